package framework

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/trustplane/trustplane/common/testenv"
)

// InferenceExtensionModule provides the InferencePool CRD the local cluster serves.
const InferenceExtensionModule = "sigs.k8s.io/gateway-api-inference-extension@v1.0.0"

// LocalOptions configure StartLocal.
type LocalOptions struct {
	// Root is the repository root; empty means RepoRoot().
	Root string
	// TrustDomain defaults to example.org.
	TrustDomain string
	// Operators to run; nil means all three.
	Operators []string
	// Progress receives one line per step; nil discards.
	Progress io.Writer
	// RealNode also runs a real node (kubelet, containerd, bridge CNI) with
	// a SPIRE agent attested by k8s_psat, so that pods run and receive
	// SVIDs. Where the machine cannot run one, Local starts without it and
	// Workloads says why.
	RealNode bool
	// Replicas runs this many replicas of each operator with leader
	// election on a Lease in Namespace. Replica i of op is named
	// <op>-<i>, runs from its own copy of the binary (SPIRE's audit log
	// names a Unix-socket caller by its binary's path) and as its own
	// service account <op>-<i>, bound to the operator's generated
	// ClusterRole and to the Roles of its config/rbac, so the API server's
	// audit log tells replicas apart. 0 or 1: one replica named after the
	// operator, without leader election.
	Replicas int
	// ExtraArgs, when set, returns flags added to a replica's command line.
	ExtraArgs func(op string, replica int) []string
	// AuditLog makes the kube-apiserver write an audit event for every
	// request that changes something (AuditLogPath) and spire-server log
	// every API call (audit_log_enabled).
	AuditLog bool
	// SpireServers above 1 runs SPIRE in HA: this many spire-servers on
	// one PostgreSQL database (testenv.StartSpireHA), and the operators
	// get every server's socket to fail over between. 0 or 1: one server.
	SpireServers int
}

// Local is a control plane, a spire-server and the operators as processes,
// each operator authenticated as its own service account, so that its RBAC
// (from config/rbac) is enforced.
type Local struct {
	root    string
	dir     string
	td      string
	cp      *testenv.ControlPlane
	spire   *testenv.Spire
	ha      *testenv.SpireHA
	client  client.Client
	bins    map[string]string // by replica
	configs map[string]string // by replica
	extra   map[string][]string
	ops     map[string][]string // replica names by operator
	out     io.Writer
	audit   string

	node   *testenv.Node
	agent  *testenv.Agent
	noNode error

	mu   sync.Mutex
	proc map[string]*testenv.Process

	// spireMu guards spireDown: the servers KillAndRestartSpire has down.
	spireMu   sync.Mutex
	spireDown map[int]bool
}

var _ Cluster = &Local{}

// StartLocal starts everything; on error it stops what it started.
func StartLocal(ctx context.Context, opts LocalOptions) (*Local, error) {
	return startLocal(ctx, opts, false)
}

// startLocal starts everything; with servePods, which needs a real node,
// the kube-apiserver and the spire-server API listen on the node's IP (not
// on 127.0.0.1), where pods reach them through the node's bridge.
func startLocal(ctx context.Context, opts LocalOptions, servePods bool) (_ *Local, err error) {
	if opts.Root == "" {
		if opts.Root, err = RepoRoot(); err != nil {
			return nil, err
		}
	}
	if opts.TrustDomain == "" {
		opts.TrustDomain = "example.org"
	}
	if opts.Operators == nil {
		opts.Operators = Operators
	}
	out := opts.Progress
	if out == nil {
		out = io.Discard
	}
	l := &Local{root: opts.Root, td: opts.TrustDomain, out: out, bins: map[string]string{},
		configs: map[string]string{}, extra: map[string][]string{}, ops: map[string][]string{},
		proc: map[string]*testenv.Process{}, spireDown: map[int]bool{}}
	defer func() {
		if err != nil {
			err = errors.Join(err, l.Stop())
		}
	}()
	if l.dir, err = os.MkdirTemp("", "trustplane-local-"); err != nil {
		return nil, fmt.Errorf("work dir: %w", err)
	}
	for _, op := range Operators {
		if err := writeLocalOverlay(filepath.Join(l.dir, "overlays"), filepath.Join(l.root, op, "config", "default"), op, l.td, l.AgentParentID()); err != nil {
			return nil, fmt.Errorf("overlay of %s: %w", op, err)
		}
	}

	for _, op := range opts.Operators {
		l.step("building %s", op)
		bin := filepath.Join(l.dir, op)
		cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd")
		cmd.Dir = filepath.Join(l.root, op)
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("build %s: %w\n%s", op, err, out)
		}
		if err := l.addReplicas(op, bin, opts); err != nil {
			return nil, err
		}
	}

	l.step("starting kube-apiserver and etcd")
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	var crds []string
	for _, op := range opts.Operators {
		crds = append(crds, filepath.Join(l.root, op, "config", "crd", "bases"))
	}
	// InferencePool, the default pool kind of IdentityBinding, from the Go module cache.
	gaie, err := testenv.ModuleDir(InferenceExtensionModule)
	if err != nil {
		return nil, err
	}
	crds = append(crds, filepath.Join(gaie, "config", "crd", "bases", "inference.networking.k8s.io_inferencepools.yaml"))
	cpOpts := testenv.ControlPlaneOptions{CRDDirectoryPaths: crds, Scheme: scheme, APIServerFlags: map[string]string{}}
	if opts.AuditLog {
		if cpOpts.APIServerFlags, err = l.auditFlags(); err != nil {
			return nil, err
		}
	}
	l.noNode = errors.New("the cluster was started without a real node (RealNode false)")
	if opts.RealNode {
		if l.noNode = testenv.NodePreflight(); l.noNode == nil {
			for k, v := range testenv.NodeAPIServerFlags() {
				cpOpts.APIServerFlags[k] = v
			}
			// No kube-proxy runs, so no ClusterIP routes: the apiserver
			// calls a Service's webhook at a ready endpoint's pod IP, still
			// verifying the name <service>.<namespace>.svc.
			cpOpts.APIServerFlags["enable-aggregator-routing"] = "true"
		}
	}
	var bindAddress string
	if servePods {
		if l.noNode != nil {
			return nil, fmt.Errorf("operators deployed as pods need a real node: %w", l.noNode)
		}
		if bindAddress, err = testenv.NodeIP(); err != nil {
			return nil, err
		}
		cpOpts.BindAddress = bindAddress
	}
	if l.cp, err = testenv.StartControlPlane(cpOpts); err != nil {
		return nil, err
	}
	if l.client, err = clientFromKubeconfig(l.cp.KubeconfigPath, scheme); err != nil {
		return nil, err
	}

	spireOpts := testenv.SpireOptions{TrustDomain: l.td, BindAddress: bindAddress, AuditLog: opts.AuditLog}
	if l.noNode == nil {
		reviewer, err := l.cp.SpireServerKubeconfig(ctx)
		if err != nil {
			return nil, err
		}
		spireOpts.PSATClusters = []testenv.PSATCluster{{Name: ClusterName, KubeconfigPath: reviewer,
			ServiceAccounts: []string{testenv.SpireAgentNamespace + ":" + testenv.SpireAgentServiceAccount}}}
	}
	if opts.SpireServers > 1 {
		l.step("starting %d spire-servers on one PostgreSQL database", opts.SpireServers)
		if l.ha, err = testenv.StartSpireHA(spireOpts, opts.SpireServers); err != nil {
			return nil, err
		}
		l.spire = l.ha.Servers[0]
	} else {
		l.step("starting spire-server")
		if l.spire, err = testenv.StartSpire(spireOpts); err != nil {
			return nil, err
		}
	}
	if l.noNode == nil {
		if err := l.startNode(ctx); err != nil {
			return nil, err
		}
	}

	for _, op := range opts.Operators {
		l.step("installing RBAC of %s", op)
		for _, r := range l.ops[op] {
			if l.configs[r], err = l.installRBAC(ctx, op, r); err != nil {
				return nil, err
			}
			if err := l.startOperator(r); err != nil {
				return nil, err
			}
		}
	}
	return l, nil
}

// addReplicas names the replicas of op and gives each its binary: bin for
// a single replica, a copy of it per replica otherwise.
func (l *Local) addReplicas(op, bin string, opts LocalOptions) error {
	if opts.Replicas <= 1 {
		l.ops[op] = []string{op}
		l.bins[op] = bin
		if opts.ExtraArgs != nil {
			l.extra[op] = opts.ExtraArgs(op, 0)
		}
		return nil
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return fmt.Errorf("read %s: %w", bin, err)
	}
	for i := range opts.Replicas {
		r := fmt.Sprintf("%s-%d", op, i)
		l.bins[r] = bin + "-" + strconv.Itoa(i)
		if err := os.WriteFile(l.bins[r], data, 0o755); err != nil {
			return fmt.Errorf("copy %s: %w", bin, err)
		}
		l.ops[op] = append(l.ops[op], r)
		l.extra[r] = []string{"--leader-elect", "--leader-election-namespace=" + Namespace}
		if opts.ExtraArgs != nil {
			l.extra[r] = append(l.extra[r], opts.ExtraArgs(op, i)...)
		}
	}
	return nil
}

// auditPolicy logs, at metadata level, every request except reads.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  verbs: [get, list, watch]
- level: Metadata
`

// auditFlags writes the audit policy and returns the kube-apiserver flags
// that enable the audit log (AuditLogPath).
func (l *Local) auditFlags() (map[string]string, error) {
	policy := filepath.Join(l.dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		return nil, fmt.Errorf("write audit policy: %w", err)
	}
	l.audit = filepath.Join(l.dir, "audit.log")
	return map[string]string{"audit-policy-file": policy, "audit-log-path": l.audit}, nil
}

// AuditLogPath is the kube-apiserver's audit log (JSON lines), empty
// unless LocalOptions.AuditLog was set.
func (l *Local) AuditLogPath() string { return l.audit }

// ControlPlane returns the local kube-apiserver and etcd.
func (l *Local) ControlPlane() *testenv.ControlPlane { return l.cp }

// Replicas returns the names of op's replicas (see LocalOptions.Replicas).
func (l *Local) Replicas(op string) []string { return l.ops[op] }

// ReplicaUser is the API user replica r authenticates as.
func (l *Local) ReplicaUser(r string) string {
	return "system:serviceaccount:" + Namespace + ":" + r
}

// ReplicaBinary is the binary replica r runs from.
func (l *Local) ReplicaBinary(r string) string { return l.bins[r] }

// Replica returns the running process of replica r, nil if it is stopped.
func (l *Local) Replica(r string) *testenv.Process {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.proc[r]
}

// KillReplica ends replica r at once (SIGKILL), as a crash would.
func (l *Local) KillReplica(r string) error {
	l.mu.Lock()
	p := l.proc[r]
	l.mu.Unlock()
	return p.Kill()
}

// StartReplica starts replica r again after KillReplica.
func (l *Local) StartReplica(r string) error { return l.startOperator(r) }

func (l *Local) step(format string, args ...any) {
	fmt.Fprintf(l.out, "[trustplane] "+format+"\n", args...)
}

// installRBAC runs replica r of the operator as its own service account
// holding only its generated ClusterRole (config/rbac/role.yaml) and, with
// leader election, the Roles of config/rbac (leases, events, sources), and
// returns the kubeconfig.
func (l *Local) installRBAC(ctx context.Context, op, r string) (string, error) {
	role := filepath.Join(l.root, op, "config", "rbac", "role.yaml")
	access, err := l.cp.AsServiceAccount(ctx, Namespace, r, role)
	if err != nil {
		return "", fmt.Errorf("RBAC of %s: %w", r, err)
	}
	if r != op {
		files, err := filepath.Glob(filepath.Join(l.root, op, "config", "rbac", "*_role.yaml"))
		if err != nil {
			return "", err
		}
		for _, f := range files {
			if err := l.cp.BindRoles(ctx, f, Namespace, r); err != nil {
				return "", fmt.Errorf("RBAC of %s: %w", r, err)
			}
		}
	}
	return access.KubeconfigPath, nil
}

// operatorArgs are the flags of each operator in the local setup.
func (l *Local) operatorArgs(op string) []string {
	common := []string{"--metrics-bind-address=0", "--health-probe-bind-address=0", "--requeue-after=10m"}
	switch op {
	case "spiffe-operator":
		return append(common, "--spire-socket="+l.spireSockets(), "--trust-domain="+l.td, "--cluster-name="+ClusterName)
	case "identity-operator":
		return append(common, "--trust-domain="+l.td, "--parent-id="+l.AgentParentID())
	case "bundle-operator":
		return append(common, "--spire-socket="+l.spireSockets(), "--poll-interval=2s")
	}
	return common
}

// startOperator starts replica r (the operator itself when it runs alone).
func (l *Local) startOperator(r string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	op := l.operatorOf(r)
	p, err := testenv.StartProcess(testenv.ProcessOptions{
		Name: r, Path: l.bins[r], Args: append(l.operatorArgs(op), l.extra[r]...),
		Env:     []string{"KUBECONFIG=" + l.configs[r]},
		LogPath: filepath.Join(l.dir, r+".log"),
	})
	if err != nil {
		return err
	}
	l.proc[r] = p
	// An operator that exits at once (bad flags, missing RBAC at startup) is an error now, not a timeout later.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if p.Exited() {
			return fmt.Errorf("%s exited at startup: %v\n%s", r, p.ExitError(), tail(p.Logs(), 30))
		}
		time.Sleep(100 * time.Millisecond) // startup watch interval
	}
	l.step("%s running (pid %d, log %s)", r, p.Pid(), filepath.Join(l.dir, r+".log"))
	return nil
}

// operatorOf is the operator replica r belongs to.
func (l *Local) operatorOf(r string) string {
	for op, rs := range l.ops {
		for _, x := range rs {
			if x == r {
				return op
			}
		}
	}
	return r
}

// Client implements Cluster.
func (l *Local) Client() client.Client { return l.client }

// KubeconfigPath implements Cluster.
func (l *Local) KubeconfigPath() string { return l.cp.KubeconfigPath }

// SpireConn implements Cluster: the admin API over the Unix socket of the
// first server that KillAndRestartSpire does not have down.
func (l *Local) SpireConn(ctx context.Context) (*grpc.ClientConn, error) {
	return l.serving().Dial(ctx)
}

// SpireCLI implements Cluster: the CLI on the admin socket of the first
// server that KillAndRestartSpire does not have down.
func (l *Local) SpireCLI(ctx context.Context, args ...string) (string, error) {
	return l.serving().CLI(ctx, args...)
}

// spireSockets is the --spire-socket value: every server's socket.
func (l *Local) spireSockets() string {
	if l.ha == nil {
		return l.spire.SocketPath
	}
	return strings.Join(l.ha.SocketPaths(), ",")
}

// SpireServers returns every spire-server: several with
// LocalOptions.SpireServers, otherwise the one.
func (l *Local) SpireServers() []*testenv.Spire {
	if l.ha == nil {
		return []*testenv.Spire{l.spire}
	}
	return l.ha.Servers
}

// KillAndRestartSpire ends server i of SpireServers at once (SIGKILL) and
// starts it again on the same data; meanwhile SpireConn and SpireCLI use
// another server, if there is one.
func (l *Local) KillAndRestartSpire(i int) error {
	servers := l.SpireServers()
	if i < 0 || i >= len(servers) {
		return fmt.Errorf("no spire-server %d of %d", i, len(servers))
	}
	l.spireMu.Lock()
	l.spireDown[i] = true
	l.spireMu.Unlock()
	defer func() {
		l.spireMu.Lock()
		delete(l.spireDown, i)
		l.spireMu.Unlock()
	}()
	return servers[i].KillAndRestart()
}

// serving is the first server not down, the first server if all are.
func (l *Local) serving() *testenv.Spire {
	servers := l.SpireServers()
	l.spireMu.Lock()
	defer l.spireMu.Unlock()
	for i, s := range servers {
		if !l.spireDown[i] {
			return s
		}
	}
	return servers[0]
}

// TrustDomain implements Cluster.
func (l *Local) TrustDomain() string { return l.td }

// AgentParentID implements Cluster: on the real node, the alias of every
// agent attested by k8s_psat in this cluster.
func (l *Local) AgentParentID() string { return "spiffe://" + l.td + "/k8s-cluster/" + ClusterName }

// AgentClusterName implements Cluster.
func (l *Local) AgentClusterName() string { return ClusterName }

// Spire returns the local spire-server (the first of SpireServers).
func (l *Local) Spire() *testenv.Spire { return l.spire }

// Dir is the working directory with binaries, logs and kubeconfigs.
func (l *Local) Dir() string { return l.dir }

// DeployArgs implements Cluster: the operators run as processes here, and
// make deploy applies each config/default as it is but for
// identity-operator's settings, which name this cluster's trust domain and
// parent: with config/default's own, the admission policy on the
// operator's writes that make deploy installs would refuse the writes of
// the operator running here. StartLocal writes the overlays.
func (l *Local) DeployArgs() []string {
	return []string{"DEPLOY_OVERLAYS=" + filepath.Join(l.dir, "overlays")}
}

// writeLocalOverlay writes dir/<op>/kustomization.yaml: base (op's
// config/default) as it is, with identity-operator's settings for trust
// domain td and parent.
func writeLocalOverlay(dir, base, op, td, parent string) error {
	od := filepath.Join(dir, op)
	if err := os.MkdirAll(od, 0o755); err != nil {
		return err
	}
	rel, err := filepath.Rel(od, base)
	if err != nil {
		return err
	}
	k := map[string]any{"resources": []string{rel}}
	if op == "identity-operator" {
		settings, err := identitySettingsPatch(td, parent)
		if err != nil {
			return err
		}
		k["patches"] = []any{settings}
	}
	out, err := yaml.Marshal(k)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(od, "kustomization.yaml"), out, 0o644)
}

// RestartOperator implements Cluster: SIGKILL, then start again, each
// replica of op.
func (l *Local) RestartOperator(_ context.Context, op string) error {
	if len(l.ops[op]) == 0 {
		return fmt.Errorf("operator %s is not running", op)
	}
	for _, r := range l.ops[op] {
		if err := l.KillReplica(r); err != nil {
			return err
		}
		if err := l.startOperator(r); err != nil {
			return err
		}
	}
	return nil
}

// OperatorLogs returns an operator's log (of every replica, in turn).
func (l *Local) OperatorLogs(op string) string {
	var b strings.Builder
	for _, r := range l.ops[op] {
		if p := l.Replica(r); p != nil {
			b.WriteString(p.Logs())
		}
	}
	return b.String()
}

// Diagnostics implements Cluster.
func (l *Local) Diagnostics() string {
	var b strings.Builder
	for _, op := range Operators {
		for _, r := range l.ops[op] {
			if p := l.Replica(r); p != nil {
				fmt.Fprintf(&b, "--- %s (last lines) ---\n%s\n", r, tail(p.Logs(), 60))
			}
		}
	}
	if l.spire != nil {
		for i, s := range l.SpireServers() {
			fmt.Fprintf(&b, "--- spire-server %d (last lines) ---\n%s\n", i, tail(s.Logs(), 30))
		}
	}
	if l.agent != nil {
		fmt.Fprintf(&b, "--- spire-agent (last lines) ---\n%s\n", tail(l.agent.Logs(), 30))
	}
	if l.node != nil {
		b.WriteString(l.node.Diagnostics())
	}
	return b.String()
}

// Stop implements Cluster.
func (l *Local) Stop() error {
	var errs []error
	l.mu.Lock()
	for _, p := range l.proc {
		errs = append(errs, p.Stop(10*time.Second))
	}
	l.mu.Unlock()
	if l.agent != nil {
		errs = append(errs, l.agent.Cleanup())
	}
	if l.node != nil {
		errs = append(errs, l.node.Stop())
	}
	if l.ha != nil {
		errs = append(errs, l.ha.Cleanup())
	} else if l.spire != nil {
		errs = append(errs, l.spire.Cleanup())
	}
	if l.cp != nil {
		errs = append(errs, l.cp.Stop())
	}
	if l.dir != "" {
		errs = append(errs, os.RemoveAll(l.dir))
	}
	return errors.Join(errs...)
}

// Kill ends every process at once (SIGKILL) and removes the files; the
// demo uses it when asked twice to stop.
func (l *Local) Kill() {
	l.mu.Lock()
	for _, p := range l.proc {
		_ = p.Kill()
	}
	l.mu.Unlock()
	if l.agent != nil {
		_ = l.agent.Cleanup()
	}
	if l.node != nil {
		_ = l.node.Stop() // kills at once; its cleanup must still run
	}
	if l.ha != nil {
		_ = l.ha.Cleanup()
	} else if l.spire != nil {
		_ = l.spire.Kill()
		_ = os.RemoveAll(l.spire.Dir)
	}
	if l.cp != nil {
		_ = l.cp.Stop() // envtest's own stop already ends with SIGKILL
	}
	_ = os.RemoveAll(l.dir)
}

func clientFromKubeconfig(path string, scheme *runtime.Scheme) (client.Client, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %s: %w", path, err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("client from %s: %w", path, err)
	}
	return c, nil
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
