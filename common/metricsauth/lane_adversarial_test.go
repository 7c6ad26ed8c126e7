package metricsauth_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/onsi/gomega"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// audienceToken returns a token of the service account namespace/name
// issued for audience: signed by the API server with the account's name as
// sub, but one the API server's own TokenReview refuses (it is not for
// the API server). A tenant may make this TokenRequest on its own account.
func audienceToken(t *testing.T, namespace, name, audience string) string {
	t.Helper()
	admin, err := client.New(plane.Plane(t).Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tr := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: []string{audience}}}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if err := admin.SubResource("token").Create(context.Background(), sa, tr); err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// TestAWithdrawnReaderLeavesTheReadersLaneWithTokensTheAPIServerRejects is
// an attack by a tenant whose service account once held the metrics grant
// (the scenario of TestAWithdrawnReadersTokensDoNotFloodTheReadersLane).
// After the grant is withdrawn, the tenant never again sends a token the
// API server accepts: it mints tokens of its own account for another
// audience. Each carries its account's name under the API server's
// signature, so the guard puts it in the readers' lane; its TokenReview
// refuses it (401, no user), which is not "a review that refuses the
// user", so the tenant never leaves the readers' lane, and its flood
// keeps Prometheus out for as long as it lasts, without any grant.
func TestAWithdrawnReaderLeavesTheReadersLaneWithTokensTheAPIServerRejects(t *testing.T) {
	url, c, ns, reader := readerUnderGuard(t, "aud-")
	binding := grantMetricsTo(t, c, ns, "tenant-monitoring")
	g := gomega.NewWithT(t)
	granted := accountToken(t, ns, "tenant-monitoring")
	g.Eventually(func() int {
		status, _ := get(t, url+"/metrics", "Bearer "+granted)
		return status
	}, 10*time.Second, 200*time.Millisecond).Should(gomega.Equal(http.StatusOK))
	if err := c.Delete(context.Background(), binding); err != nil {
		t.Fatal(err)
	}
	// Wait, without asking the guard, until the API server no longer
	// grants the tenant anything on /metrics.
	user := "system:serviceaccount:" + ns + ":tenant-monitoring"
	g.Eventually(func() bool {
		sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
			User:                  user,
			Groups:                []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
			NonResourceAttributes: &authzv1.NonResourceAttributes{Path: "/metrics", Verb: "get"},
		}}
		if err := c.Create(context.Background(), sar); err != nil {
			t.Fatal(err)
		}
		return sar.Status.Allowed
	}, 10*time.Second, 200*time.Millisecond).Should(gomega.BeFalse())

	const minted = 40
	foreign := make([]string, minted)
	for i := range foreign {
		foreign[i] = audienceToken(t, ns, "tenant-monitoring", "not-the-api-server")
	}
	stats, stop := flood(t, url, 100, true, func(i int64) string { return foreign[i%minted] })
	underWay(t, stats, 100)
	// Ten scrapes, as Prometheus would send them, a moment apart: a flood
	// that the readers' lane is proof against lets every one through.
	var results []string
	refused := 0
	for range 10 {
		got, ok := scrapes(url, reader, 1)
		results = append(results, got...)
		if !ok {
			refused++
		}
	}
	stop()
	if stats.ok.Load() != 0 {
		t.Errorf("%d foreign-audience tokens read the metrics", stats.ok.Load())
	}
	if refused > 0 {
		t.Errorf("a tenant whose grant was withdrawn kept the readers' lane with %d tokens of its own account for another "+
			"audience (signed by the API server, refused by its TokenReview, so never a refusal of its user: %d sent, "+
			"%d answered 429) and kept Prometheus from %d of 10 scrapes: %v",
			minted, stats.sent.Load(), stats.tooMany.Load(), refused, results)
	}
}
