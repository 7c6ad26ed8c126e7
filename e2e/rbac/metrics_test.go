package rbac_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/onsi/gomega"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/trustplane/trustplane/common/metricsauth"
)

// TestEachOperatorsRoleGuardsItsMetricsWithItsReaderRole runs each
// operator's metrics guard as the operator's own service account, with only
// its config/rbac/role.yaml, and proves that role may make the reviews: a
// scraper bound to the operator's config/rbac/metrics_reader_role.yaml
// reads the metrics, and a tenant's service account does not. Without
// create on tokenreviews and subjectaccessreviews every scrape would get
// 503.
func TestEachOperatorsRoleGuardsItsMetricsWithItsReaderRole(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp := startPlane(t)
	tokenOf := func(ns, name string) string {
		t.Helper()
		token, err := cp.ServiceAccountToken(ctx, ns, name)
		if err != nil {
			t.Fatal(err)
		}
		return token
	}
	tenant := tokenOf("tenant", "app")
	root := repoRoot()
	for _, op := range operators {
		acc, err := cp.AsServiceAccount(ctx, "trustplane-system", op, filepath.Join(root, op, "config", "rbac", "role.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cp.AsServiceAccount(ctx, "monitoring", "prometheus-"+op, filepath.Join(root, op, "config", "rbac", "metrics_reader_role.yaml")); err != nil {
			t.Fatal(err)
		}
		reader := tokenOf("monitoring", "prometheus-"+op)
		// The guard reads the API server's service account signing keys
		// to tell a reader's new token: the default discovery role lets
		// every service account read them.
		if _, err := kubernetes.NewForConfigOrDie(acc.Config).RESTClient().Get().AbsPath("/openid/v1/jwks").DoRaw(ctx); err != nil {
			t.Errorf("%s cannot read the service account issuer's keys: %v", op, err)
		}
		url := guardedAs(t, acc.Config)
		// RBAC's authorizer sees a new binding within a moment.
		gomega.NewWithT(t).Eventually(func() int { return statusOf(t, url, reader) }, 10*time.Second, 100*time.Millisecond).
			Should(gomega.Equal(http.StatusOK), "%s: its reader", op)
		if got := statusOf(t, url, tenant); got != http.StatusForbidden {
			t.Errorf("%s: a tenant got %d, want 403", op, got)
		}
	}
}

// guardedAs serves a handler behind the metrics guard whose reviews go out
// with cfg, and returns the server's URL.
func guardedAs(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	filter, err := metricsauth.Provider(metricsauth.Options{DenyFor: 50 * time.Millisecond})(cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	h, err := filter(logr.Discard(), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "series\n")
	}))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL + "/metrics"
}

// statusOf is the status of GET url with token as bearer.
func statusOf(t *testing.T, url, token string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
