package target

import (
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func applyEntry(raw string) metav1.ManagedFieldsEntry {
	return metav1.ManagedFieldsEntry{Manager: FieldManager, Operation: metav1.ManagedFieldsOperationApply,
		FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(raw)}}
}

// TestOwnedDataKeysAndTheHashAnnotationReadOnlyTheirOwnPart: ownedDataKeys
// reads f:data and f:binaryData of our apply entry, ownsMetadata
// f:metadata; a part one of them does not read never makes it fail.
func TestOwnedDataKeysAndTheHashAnnotationReadOnlyTheirOwnPart(t *testing.T) {
	// f:metadata is not an object: ownedDataKeys used to ignore it.
	keys, ok := ownedDataKeys([]metav1.ManagedFieldsEntry{applyEntry(`{"f:data":{"f:ca.crt":{}},"f:metadata":[]}`)})
	if !ok || !reflect.DeepEqual(keys, map[string]bool{"ca.crt": true}) {
		t.Errorf("ownedDataKeys with a non-object f:metadata = %v, %v; want map[ca.crt:true], true", keys, ok)
	}
	// f:data is not an object: ownsMetadata used to ignore it.
	if !ownsMetadata([]metav1.ManagedFieldsEntry{applyEntry(`{"f:data":"x","f:metadata":{"f:annotations":{"f:` + AnnotationHash + `":{}}}}`)}, []string{AnnotationHash}, nil) {
		t.Errorf("ownsMetadata of the hash annotation with a non-object f:data = false; want true")
	}
}

// TestOwnedDataKeysAndTheHashAnnotationOfEveryManagedFieldsShape: which
// entry counts (the first apply entry of our manager with fields) and what
// each function reports for it, whatever the other entries are.
func TestOwnedDataKeysAndTheHashAnnotationOfEveryManagedFieldsShape(t *testing.T) {
	upd := applyEntry(`{"f:data":{"f:u":{}},"f:metadata":{"f:annotations":{"f:` + AnnotationHash + `":{}}}}`)
	upd.Operation = metav1.ManagedFieldsOperationUpdate
	other := applyEntry(`{"f:data":{"f:o":{}}}`)
	other.Manager = "someone"
	good := applyEntry(`{"f:data":{"f:a":{}},"f:binaryData":{"f:b":{}},"f:metadata":{"f:annotations":{"f:` + AnnotationHash + `":{}}}}`)
	second := applyEntry(`{"f:data":{"f:z":{}}}`)
	bad := applyEntry(`{not json`)
	nilRaw := applyEntry(``)
	nilRaw.FieldsV1 = nil
	for _, tc := range []struct {
		name    string
		in      []metav1.ManagedFieldsEntry
		keys    map[string]bool
		keysOK  bool
		hashOwn bool
	}{
		{"none", nil, nil, false, false},
		{"update only", []metav1.ManagedFieldsEntry{upd}, nil, false, false},
		{"other manager", []metav1.ManagedFieldsEntry{other}, nil, false, false},
		{"nil fields then good", []metav1.ManagedFieldsEntry{nilRaw, good}, map[string]bool{"a": true, "b": true}, true, true},
		{"good then second", []metav1.ManagedFieldsEntry{upd, good, second}, map[string]bool{"a": true, "b": true}, true, true},
		{"second then good", []metav1.ManagedFieldsEntry{second, good}, map[string]bool{"z": true}, true, false},
		{"bad then good", []metav1.ManagedFieldsEntry{bad, good}, nil, false, false},
		{"good then bad", []metav1.ManagedFieldsEntry{good, bad}, map[string]bool{"a": true, "b": true}, true, true},
		{"empty object", []metav1.ManagedFieldsEntry{applyEntry(`{}`)}, map[string]bool{}, true, false},
		{"null", []metav1.ManagedFieldsEntry{applyEntry(`null`)}, map[string]bool{}, true, false},
		{"short keys", []metav1.ManagedFieldsEntry{applyEntry(`{"f:data":{"f:":{},".":{},"x:y":{}}}`)}, map[string]bool{}, true, false},
	} {
		keys, ok := ownedDataKeys(tc.in)
		if ok != tc.keysOK || !reflect.DeepEqual(keys, tc.keys) {
			t.Errorf("%s: ownedDataKeys = %#v, %v; want %#v, %v", tc.name, keys, ok, tc.keys, tc.keysOK)
		}
		if got := ownsMetadata(tc.in, []string{AnnotationHash}, nil); got != tc.hashOwn {
			t.Errorf("%s: ownsMetadata of the hash annotation = %v; want %v", tc.name, got, tc.hashOwn)
		}
	}
}
