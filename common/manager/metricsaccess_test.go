package manager_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/internal/testapi"
	"github.com/trustplane/trustplane/common/manager"
)

// scrape asks addr for /metrics with token, over HTTPS (the certificate is
// self-signed) and, when no TLS server answers, over plain HTTP, so that it
// reads whatever the endpoint serves; it returns the status and body.
func scrape(addr, token string) (int, string, error) {
	insecure := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the endpoint's own self-signed certificate
	}}
	var lastErr error
	for _, scheme := range []string{"https", "http"} {
		req, err := http.NewRequest(http.MethodGet, scheme+"://"+addr+"/metrics", nil)
		if err != nil {
			return 0, "", err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := insecure.Do(req)
		if err != nil {
			lastErr = err
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return 0, "", err
		}
		return resp.StatusCode, string(body), nil
	}
	return 0, "", lastErr
}

// noServer is the config of an API server that is not there: enough for
// a manager that only serves metrics.
var noServer = &rest.Config{Host: "https://127.0.0.1:1"}

// startManager runs a manager with o's options until the test ends.
func startManager(t *testing.T, cfg *rest.Config, o manager.Options) {
	t.Helper()
	mgr, err := ctrl.NewManager(cfg, o.ManagerOptions("metrics-test"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestATenantsPodReadsNoMetricsOfAnOperatorWithTheDefaults is the attack a
// review made with a tenant's rights: a pod of any namespace that reaches
// the metrics port read every series, and with them the name and state of
// every binding. With the framework's defaults the endpoint now serves
// HTTPS, refuses that pod's service account token and anyone without one,
// and serves a reader bound to get /metrics.
func TestATenantsPodReadsNoMetricsOfAnOperatorWithTheDefaults(t *testing.T) {
	plane, err := testapi.StartControlPlane()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = plane.Stop() })
	ctx := context.Background()
	ns, err := testapi.NewNamespace(ctx, plane.Client, "tenant-")
	if err != nil {
		t.Fatal(err)
	}
	token := func(name string) string {
		token, err := plane.ServiceAccountToken(ctx, ns, name)
		if err != nil {
			t.Fatal(err)
		}
		return token
	}
	tenant, reader := token("app"), token("prometheus")
	for _, obj := range []client.Object{
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "reader-" + ns},
			Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "reader-" + ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "reader-" + ns},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "prometheus"}}},
	} {
		if err := plane.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}

	o := manager.Defaults()
	o.MetricsAddr, o.ProbeAddr = freeAddr(t), "0"
	startManager(t, plane.Config, o)

	g := gomega.NewWithT(t)
	g.Eventually(func() error {
		status, body, err := scrape(o.MetricsAddr, reader)
		if err != nil {
			return err
		}
		if status != http.StatusOK || !strings.Contains(body, "# HELP") {
			return fmt.Errorf("a bound reader got %d %.200q", status, body)
		}
		return nil
	}, 20*time.Second, 200*time.Millisecond).Should(gomega.Succeed())
	for who, tok := range map[string]string{"a tenant's service account": tenant, "no token": ""} {
		status, body, err := scrape(o.MetricsAddr, tok)
		if err != nil {
			t.Fatalf("%s: %v", who, err)
		}
		if status == http.StatusOK || strings.Contains(body, "# HELP") {
			t.Errorf("%s read the metrics: %d %.200q", who, status, body)
		}
	}
	resp, err := http.Get("http://" + o.MetricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		t.Error("plain HTTP read the metrics")
	}
}

// TestMetricsSecureFalseServesPlainHTTP proves the opt-out does what its
// flag says (for a scrape through a sidecar on loopback): plain HTTP, no
// token needed.
func TestMetricsSecureFalseServesPlainHTTP(t *testing.T) {
	o := manager.Defaults()
	o.MetricsSecure = false
	o.MetricsAddr, o.ProbeAddr = freeAddr(t), "0"
	startManager(t, noServer, o)
	gomega.NewWithT(t).Eventually(func() (int, error) {
		resp, err := http.Get("http://" + o.MetricsAddr + "/metrics")
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		return resp.StatusCode, nil
	}, 10*time.Second, 100*time.Millisecond).Should(gomega.Equal(http.StatusOK))
}

// TestTheMetricsServerServesTheCertificateOfItsCertDirOverHTTP1 proves
// --metrics-cert-dir's certificate is the one served, and that a client
// offering HTTP/2 gets HTTP/1.1.
func TestTheMetricsServerServesTheCertificateOfItsCertDirOverHTTP1(t *testing.T) {
	dir := t.TempDir()
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("metrics.example", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	o := manager.Defaults()
	o.MetricsCertDir = dir
	o.MetricsAddr, o.ProbeAddr = freeAddr(t), "0"
	startManager(t, noServer, o)
	block, _ := pem.Decode(certPEM)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		ForceAttemptHTTP2: true,
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2", "http/1.1"}}, //nolint:gosec // the certificate is compared below
	}}
	gomega.NewWithT(t).Eventually(func() error {
		resp, err := client.Get("https://" + o.MetricsAddr + "/metrics")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 || !bytes.Equal(resp.TLS.PeerCertificates[0].Raw, block.Bytes) {
			return fmt.Errorf("the server did not present the certificate of %s", dir)
		}
		if resp.ProtoMajor != 1 {
			return fmt.Errorf("a client offering HTTP/2 got %s", resp.Proto)
		}
		if resp.StatusCode != http.StatusUnauthorized {
			return fmt.Errorf("no token got %d, want 401", resp.StatusCode)
		}
		return nil
	}, 10*time.Second, 100*time.Millisecond).Should(gomega.Succeed())
}
