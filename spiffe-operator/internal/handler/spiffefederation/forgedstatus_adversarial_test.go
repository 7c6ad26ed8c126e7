package spiffefederation

import (
	"context"
	"testing"
	"time"

	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

// TestAForgedStatusDeletesNoOtherTrustDomainsRelationship: the status
// records which relationship the object holds, and Delete deleted the one
// it names. Whoever may write the status (the operator's own service
// account token patches it) names another trust domain's relationship
// (a partner's, made by hand or held by another object); when the object
// is deleted, that relationship went with it. The spec's trust domain is
// immutable, so the object holds at most the relationship of that one.
func TestAForgedStatusDeletesNoOtherTrustDomainsRelationship(t *testing.T) {
	obj := federationObject("a", func(*v1alpha1.SpiffeFederationSpec) {})
	partner := &types.FederationRelationship{TrustDomain: "bank.test", BundleEndpointUrl: "https://bank.test/bundle"}
	api := &memoryFederations{rels: map[string]*types.FederationRelationship{"bank.test": partner}}
	for _, forged := range []func(*v1alpha1.SpiffeFederationStatus){
		func(st *v1alpha1.SpiffeFederationStatus) { st.RelationshipTrustDomain = "bank.test" },
		func(st *v1alpha1.SpiffeFederationStatus) { st.ClaimedTrustDomain = "bank.test" },
	} {
		o := obj.DeepCopy()
		forged(&o.Status)
		if err := handlerOver(api, time.Now(), *o).Delete(context.Background(), o); err != nil {
			t.Fatal(err)
		}
		if len(api.deleted) != 0 {
			t.Fatalf("deleting SpiffeFederation %s (trust domain %s) deleted SPIRE's relationship with %v, which its forged status named",
				o.Name, o.Spec.TrustDomain, api.deleted)
		}
	}
}
