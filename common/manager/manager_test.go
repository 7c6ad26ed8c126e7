package manager_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/onsi/gomega"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/trustplane/trustplane/common/config"
	"github.com/trustplane/trustplane/common/manager"
)

func load(t *testing.T, d manager.Options, args []string, env map[string]string) (manager.Options, error) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	manager.AddFlags(fs, d)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	v, err := config.NewViper(fs)
	if err != nil {
		t.Fatal(err)
	}
	return manager.Load(v)
}

func TestDefaultsFlagsAndEnvironment(t *testing.T) {
	d := manager.Defaults()
	d.KubeQPS = 100
	o, err := load(t, d, []string{"--leader-elect", "--kube-api-burst=7"}, map[string]string{"METRICS_BIND_ADDRESS": "0", "KUBE_API_BURST": "9"})
	if err != nil {
		t.Fatal(err)
	}
	if o.KubeQPS != 100 || o.KubeBurst != 7 || !o.LeaderElect || o.MetricsAddr != "0" || o.ProbeAddr != ":8081" {
		t.Fatalf("options = %+v", o)
	}
	rc := o.RestConfig(&rest.Config{Host: "h"})
	if rc.QPS != 100 || rc.Burst != 7 || rc.Host != "h" {
		t.Fatalf("rest config = %+v", rc)
	}
	mo := o.ManagerOptions("x-operator")
	if mo.LeaderElectionID != "x-operator.trustplane.dev" || !mo.LeaderElection || mo.Metrics.BindAddress != "0" {
		t.Fatalf("manager options = %+v", mo)
	}
	if *mo.Controller.SkipNameValidation {
		t.Fatal("controller names are not checked by default")
	}
	o.Reentrant = true
	if mo := o.ManagerOptions("x-operator"); !*mo.Controller.SkipNameValidation {
		t.Fatal("Reentrant does not skip the controller name check")
	}
}

func TestInvalidSettings(t *testing.T) {
	for name, c := range map[string]struct {
		env  map[string]string
		want string
	}{
		"qps":   {map[string]string{"KUBE_API_QPS": "0"}, "kube-api-qps must be positive"},
		"burst": {map[string]string{"KUBE_API_BURST": "0"}, "kube-api-burst must be at least 1"},
		"gc":    {map[string]string{"GC_PERCENT": "-5"}, "gc-percent must not be negative"},
		"cert dir of plain metrics": {map[string]string{"METRICS_SECURE": "false", "METRICS_CERT_DIR": "/certs"},
			"metrics-cert-dir is set but metrics-secure is false"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := load(t, manager.Defaults(), nil, c.env)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error = %v, want %q", err, c.want)
			}
		})
	}
}

func TestApplyGCPercent(t *testing.T) {
	t.Setenv("GOGC", "")
	os.Unsetenv("GOGC")
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	manager.Options{GCPercent: 17}.ApplyGCPercent()
	if got := debug.SetGCPercent(100); got != 17 {
		t.Fatalf("GC percent = %d, want 17", got)
	}
	manager.Options{GCPercent: 0}.ApplyGCPercent()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("0 must keep the runtime's setting, got %d", got)
	}
	t.Setenv("GOGC", "200")
	manager.Options{GCPercent: 17}.ApplyGCPercent()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("GOGC must win, got %d", got)
	}
}

func TestHealthChecksServeProbes(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	o := manager.Defaults()
	o.MetricsAddr, o.ProbeAddr = "0", addr
	mgr, err := ctrl.NewManager(&rest.Config{Host: "https://127.0.0.1:1"}, o.ManagerOptions("probe-test"))
	if err != nil {
		t.Fatal(err)
	}
	if err := manager.AddHealthChecks(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() { cancel(); <-done }()
	g := gomega.NewWithT(t)
	for _, path := range []string{"/healthz", "/readyz"} {
		g.Eventually(func() (int, error) {
			resp, err := http.Get("http://" + addr + path)
			if err != nil {
				return 0, err
			}
			defer resp.Body.Close()
			return resp.StatusCode, nil
		}, 10*time.Second).Should(gomega.Equal(http.StatusOK), path)
	}
}

// TestEveryInstanceGetsALeaseOfItsOwnWithAValidName proves the lease name
// of every instance is a valid object name, distinct per instance, and the
// readable name-instance where that is valid.
func TestEveryInstanceGetsALeaseOfItsOwnWithAValidName(t *testing.T) {
	seen := map[string]string{}
	for _, instance := range []string{"", "blue", "blue.eu-1", "a..b", "a.-b", "a-.b", "blue..eu", strings.Repeat("b", 63)} {
		lease := manager.Options{LeaderElect: true}.ManagerOptions(manager.InstanceName("spiffe-operator", instance)).LeaderElectionID
		if errs := validation.IsDNS1123Subdomain(lease); len(errs) > 0 {
			t.Errorf("instance %q: lease %q is no valid name: %v", instance, lease, errs)
		}
		if other, taken := seen[lease]; taken {
			t.Errorf("instances %q and %q share the lease %q", other, instance, lease)
		}
		seen[lease] = instance
	}
	if got := manager.InstanceName("spiffe-operator", "blue.eu-1"); got != "spiffe-operator-blue.eu-1" {
		t.Errorf("InstanceName of blue.eu-1 = %q, want the readable spiffe-operator-blue.eu-1", got)
	}
}

// TestNoTwoAcceptedInstancesShareALease: an instance whose name makes no
// valid lease name leads on name-<16 hex digits of its SHA-256>, and an
// instance named with those digits built the same lease, so one of the two
// never led. CheckInstance refuses that form; of any two instances it
// accepts, the leases differ.
func TestNoTwoAcceptedInstancesShareALease(t *testing.T) {
	instances := []string{"", "blue", "blue.eu-1", "deadbeef", "0123456789abcdef0", "0123456789ABCDEF"}
	for _, hashed := range []string{"a..b", "blue..eu", "a.-b", "a-.b"} {
		sum := sha256.Sum256([]byte(hashed))
		instances = append(instances, hashed, hex.EncodeToString(sum[:])[:16])
	}
	seen := map[string]string{}
	refused := 0
	for _, instance := range instances {
		if err := manager.CheckInstance(instance); err != nil {
			refused++
			if !strings.Contains(err.Error(), instance) {
				t.Errorf("CheckInstance(%q) = %v: does not name the instance", instance, err)
			}
			continue
		}
		lease := manager.InstanceName("spiffe-operator", instance)
		if other, taken := seen[lease]; taken {
			t.Errorf("instances %q and %q, both accepted, share the lease %q", other, instance, lease)
		}
		seen[lease] = instance
	}
	if refused != 4 {
		t.Errorf("CheckInstance refused %d instances, want the 4 of 16 lowercase hex digits", refused)
	}
}
