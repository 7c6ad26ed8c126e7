package chaos

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"

	entryv1 "github.com/spiffe/spire-api-sdk/proto/spire/api/server/entry/v1"
	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/e2e/framework"
)

// otherClusterPrefix is the entry ID prefix of "another cluster" sharing
// the SPIRE server: the same shape as ours, another cluster tag.
const otherClusterPrefix = "trustplane.0badc0de."

// foreign is state the operators do not own, and its fingerprints.
type foreign struct {
	entries map[string]string // entry ID -> fingerprint
	objects map[string]string // kind ns/name -> uid/resourceVersion
	refs    []client.Object
}

func spiffeID(td, path string) *types.SPIFFEID { return &types.SPIFFEID{TrustDomain: td, Path: path} }

func selectors(pairs ...string) []*types.Selector {
	var out []*types.Selector
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, &types.Selector{Type: pairs[i], Value: pairs[i+1]})
	}
	return out
}

// seedForeign creates entries by hand and by another cluster, ConfigMaps
// and webhook configurations, and fingerprints them.
func seedForeign(ctx context.Context, cl *framework.Local, o *oracle) (*foreign, error) {
	td := cl.TrustDomain()
	alias := spiffeID(td, "/k8s-cluster/"+framework.ClusterName)
	entries := []*types.Entry{
		// By hand, with an ID of the admin's choosing and one SPIRE picks.
		{Id: "hand-made-1", ParentId: alias, SpiffeId: spiffeID(td, "/hand/one"), Selectors: selectors("unix", "uid:1001")},
		{ParentId: spiffeID(td, "/hand-node"), SpiffeId: spiffeID(td, "/ns/chaos-0/sa/sa-a"), Selectors: selectors("k8s", "ns:chaos-0", "k8s", "sa:sa-a")},
		// Another cluster's operator: our shape, its tag; one under its
		// own alias, one under ours with a selector more.
		{Id: otherClusterPrefix + "0123456789ab.0123456789abcdef0123", ParentId: spiffeID(td, "/k8s-cluster/other"),
			SpiffeId: spiffeID(td, "/ns/chaos-1/sa/sa-b"), Selectors: selectors("k8s", "ns:chaos-1", "k8s", "sa:sa-b")},
		{Id: otherClusterPrefix + "abcdef012345.abcdef0123456789abcd", ParentId: alias,
			SpiffeId: spiffeID(td, "/ns/chaos-2/sa/sa-c"), Selectors: selectors("k8s", "ns:chaos-2", "k8s", "sa:sa-c", "k8s", "pod-label:app:other")},
		// An instance whose prefix nests under ours.
		{Id: o.prefix + "team.0123456789ab.0123456789abcdef0123", ParentId: alias,
			SpiffeId: spiffeID(td, "/ns/chaos-3/sa/sa-a"), Selectors: selectors("k8s", "ns:chaos-3", "k8s", "sa:sa-a", "k8s", "pod-label:team:x")},
	}
	conn, err := cl.SpireConn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	resp, err := entryv1.NewEntryClient(conn).BatchCreateEntry(ctx, &entryv1.BatchCreateEntryRequest{Entries: entries})
	if err != nil {
		return nil, fmt.Errorf("create foreign entries: %w", err)
	}
	f := &foreign{entries: map[string]string{}, objects: map[string]string{}}
	for _, r := range resp.Results {
		if codes.Code(r.Status.Code) != codes.OK {
			return nil, fmt.Errorf("create foreign entry: %s", r.Status.Message)
		}
		f.entries[r.Entry.Id] = ""
	}
	objs := []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: nsName(0), Name: "app-settings"}, Data: map[string]string{"mode": "prod"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: nsName(1), Name: "ca-bundle", Labels: map[string]string{bundleLabel: "chaos"}},
			Data: map[string]string{targetKey: "not ours"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: framework.Namespace, Name: "unrelated"}, Data: map[string]string{"k": "v"}},
		&admissionregistrationv1.ValidatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "foreign-validating", Annotations: map[string]string{"bundle.trustplane.dev/inject": "someone-else"}},
			Webhooks:   []admissionregistrationv1.ValidatingWebhook{foreignWebhook("validate.chaos.example")},
		},
		&admissionregistrationv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "foreign-mutating"},
			Webhooks:   []admissionregistrationv1.MutatingWebhook{{Name: "mutate.chaos.example", ClientConfig: foreignWebhook("x").ClientConfig, Rules: foreignWebhook("x").Rules, SideEffects: foreignWebhook("x").SideEffects, AdmissionReviewVersions: []string{"v1"}, FailurePolicy: ptr.To(admissionregistrationv1.Ignore)}},
		},
	}
	for _, obj := range objs {
		if err := cl.Client().Create(ctx, obj); err != nil {
			return nil, fmt.Errorf("create foreign %T: %w", obj, err)
		}
		f.refs = append(f.refs, obj)
	}
	if err := f.fingerprint(ctx, cl, f.entries, f.objects); err != nil {
		return nil, err
	}
	return f, nil
}

func foreignWebhook(name string) admissionregistrationv1.ValidatingWebhook {
	return admissionregistrationv1.ValidatingWebhook{
		Name: name,
		ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:1/never"),
			CABundle: []byte("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n")},
		Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Rule: admissionregistrationv1.Rule{APIGroups: []string{"chaos.example"}, APIVersions: []string{"v1"}, Resources: []string{"things"}}}},
		SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
		AdmissionReviewVersions: []string{"v1"},
		FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
	}
}

// fingerprint fills entries (ID -> digest of the whole entry) and objects
// (-> UID and resourceVersion) from the server and the API.
func (f *foreign) fingerprint(ctx context.Context, cl *framework.Local, entries, objects map[string]string) error {
	conn, err := cl.SpireConn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	ec := entryv1.NewEntryClient(conn)
	ids := make([]string, 0, len(f.entries))
	for id := range f.entries {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		e, err := ec.GetEntry(ctx, &entryv1.GetEntryRequest{Id: id})
		if err != nil {
			if codeOf(err) == codes.NotFound {
				entries[id] = "deleted"
				continue
			}
			return fmt.Errorf("get entry %s: %w", id, err)
		}
		data, err := proto.MarshalOptions{Deterministic: true}.Marshal(e)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(data)
		entries[id] = hex.EncodeToString(sum[:])
	}
	for _, ref := range f.refs {
		obj := ref.DeepCopyObject().(client.Object)
		key := fmt.Sprintf("%T %s/%s", obj, ref.GetNamespace(), ref.GetName())
		if err := cl.Client().Get(ctx, client.ObjectKeyFromObject(ref), obj); err != nil {
			objects[key] = "unreadable: " + err.Error()
			continue
		}
		objects[key] = string(obj.GetUID()) + "/" + obj.GetResourceVersion()
	}
	return nil
}

// changes compares the state now with the fingerprints: one line per
// changed item. A read that fails (a component restarting) returns an
// error and no verdict.
func (f *foreign) changes(ctx context.Context, cl *framework.Local) (int, []string, error) {
	entries, objects := map[string]string{}, map[string]string{}
	if err := f.fingerprint(ctx, cl, entries, objects); err != nil {
		return 0, nil, err
	}
	var out []string
	for id, fp := range f.entries {
		if entries[id] != fp {
			out = append(out, fmt.Sprintf("SPIRE entry %s changed (%s)", id, entries[id]))
		}
	}
	for k, fp := range f.objects {
		if len(objects[k]) > 11 && objects[k][:11] == "unreadable:" {
			return 0, nil, fmt.Errorf("%s %s", k, objects[k])
		}
		if objects[k] != fp {
			out = append(out, fmt.Sprintf("%s changed: %s -> %s", k, fp, objects[k]))
		}
	}
	return len(f.entries) + len(f.objects), out, nil
}
