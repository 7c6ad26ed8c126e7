package framework

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/spiffetls/tlsconfig"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// KindOptions configure ConnectKind. hack/e2e-kind.sh creates the cluster,
// installs SPIRE (hack/kind/spire.yaml) and deploys the operators first.
type KindOptions struct {
	// Kubeconfig defaults to $KUBECONFIG.
	Kubeconfig string
	// Kubectl defaults to "kubectl" on PATH.
	Kubectl string
	// TrustDomain defaults to example.org (as in hack/kind/spire.yaml).
	TrustDomain string
	// DeployOverlays is the DEPLOY_OVERLAYS directory hack/e2e-kind.sh
	// deployed the operators with; it defaults to $DEPLOY_OVERLAYS.
	DeployOverlays string
}

// Kind is a kind cluster with SPIRE and the operators deployed. SPIRE's API
// is reached through a port-forward to the server pod (PortForward) with an
// admin X509-SVID minted inside the server pod (its ID is in the server's
// admin_ids).
type Kind struct {
	opts       KindOptions
	client     client.Client
	forward    *Forward
	tlsConfig  *tls.Config
	diagnostic func() string
}

var _ Cluster = &Kind{}

// spireAdminID is listed in admin_ids by hack/kind/spire.yaml.
const spireAdminID = "/e2e-admin"

// ConnectKind connects to a prepared kind cluster.
func ConnectKind(ctx context.Context, opts KindOptions) (*Kind, error) {
	if opts.Kubeconfig == "" {
		opts.Kubeconfig = os.Getenv("KUBECONFIG")
	}
	if opts.Kubeconfig == "" {
		return nil, errors.New("E2E_CLUSTER=kind needs KUBECONFIG (run make e2e-kind)")
	}
	if opts.Kubectl == "" {
		opts.Kubectl = "kubectl"
	}
	if opts.TrustDomain == "" {
		opts.TrustDomain = "example.org"
	}
	if opts.DeployOverlays == "" {
		opts.DeployOverlays = os.Getenv("DEPLOY_OVERLAYS")
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	k := &Kind{opts: opts}
	var err error
	if k.client, err = clientFromKubeconfig(opts.Kubeconfig, scheme); err != nil {
		return nil, err
	}
	if err := k.mintAdminSVID(ctx); err != nil {
		return nil, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", opts.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %s: %w", opts.Kubeconfig, err)
	}
	if k.forward, err = PortForward(ctx, cfg, "spire-system", "spire-server-0", 8081); err != nil {
		return nil, err
	}
	return k, nil
}

func (k *Kind) kubectl(ctx context.Context, args ...string) ([]byte, error) {
	args = append([]string{"--kubeconfig", k.opts.Kubeconfig}, args...)
	out, err := exec.CommandContext(ctx, k.opts.Kubectl, args...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return out, nil
}

// mintAdminSVID mints an X509-SVID for the admin ID inside the server pod
// and builds the mTLS configuration from its PEM output.
func (k *Kind) mintAdminSVID(ctx context.Context) error {
	id := "spiffe://" + k.opts.TrustDomain + spireAdminID
	out, err := k.kubectl(ctx, "exec", "-n", "spire-system", "spire-server-0", "-c", "spire-server", "--",
		"/opt/spire/bin/spire-server", "x509", "mint", "-spiffeID", id)
	if err != nil {
		return err
	}
	var certs, bundle []*x509.Certificate
	var keyDER []byte
	section := 0 // the output lists the SVID chain, then the key, then the bundle
	for rest := out; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		switch block.Type {
		case "CERTIFICATE":
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				return fmt.Errorf("parse minted certificate: %w", err)
			}
			if section == 0 {
				certs = append(certs, cert)
			} else {
				bundle = append(bundle, cert)
			}
		case "PRIVATE KEY", "EC PRIVATE KEY":
			keyDER, section = block.Bytes, 1
		}
	}
	if len(certs) == 0 || keyDER == nil || len(bundle) == 0 {
		return fmt.Errorf("unexpected output of x509 mint: %d certs, key %v, %d bundle certs", len(certs), keyDER != nil, len(bundle))
	}
	var chain bytes.Buffer
	for _, c := range certs {
		_ = pem.Encode(&chain, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	svid, err := x509svid.Parse(chain.Bytes(), keyPEM)
	if err != nil {
		return fmt.Errorf("parse minted svid: %w", err)
	}
	td, err := spiffeid.TrustDomainFromString(k.opts.TrustDomain)
	if err != nil {
		return err
	}
	serverID, err := spiffeid.FromSegments(td, "spire", "server")
	if err != nil {
		return err
	}
	k.tlsConfig = tlsconfig.MTLSClientConfig(svid, x509bundle.FromX509Authorities(td, bundle), tlsconfig.AuthorizeID(serverID))
	return nil
}

// Client implements Cluster.
func (k *Kind) Client() client.Client { return k.client }

// KubeconfigPath implements Cluster.
func (k *Kind) KubeconfigPath() string { return k.opts.Kubeconfig }

// SpireConn implements Cluster.
func (k *Kind) SpireConn(context.Context) (*grpc.ClientConn, error) {
	return grpc.NewClient(k.forward.Address, grpc.WithTransportCredentials(credentials.NewTLS(k.tlsConfig)))
}

// SpireCLI implements Cluster: the CLI inside the server pod.
func (k *Kind) SpireCLI(ctx context.Context, args ...string) (string, error) {
	out, err := k.kubectl(ctx, append([]string{"exec", "-n", "spire-system", "spire-server-0", "-c", "spire-server", "--",
		"/opt/spire/bin/spire-server"}, args...)...)
	return string(out), err
}

// TrustDomain implements Cluster.
func (k *Kind) TrustDomain() string { return k.opts.TrustDomain }

// AgentParentID implements Cluster: the node alias hack/e2e-kind.sh registers.
func (k *Kind) AgentParentID() string { return "spiffe://" + k.opts.TrustDomain + "/k8s-cluster-nodes" }

// KindClusterName is the kind cluster's name in SPIRE (hack/kind/spire.yaml),
// the CLUSTER_NAME hack/e2e-kind.sh gives spiffe-operator.
const KindClusterName = "kind"

// AgentClusterName implements Cluster.
func (k *Kind) AgentClusterName() string { return KindClusterName }

// DeployArgs implements Cluster: the overlays hack/e2e-kind.sh deployed
// with (the loaded images, the cluster's name), or config/default as it is.
func (k *Kind) DeployArgs() []string {
	if k.opts.DeployOverlays == "" {
		return nil
	}
	return []string{"DEPLOY_OVERLAYS=" + k.opts.DeployOverlays}
}

// RestartOperator implements Cluster: delete the operator's pod and wait for
// its Deployment to be available again.
func (k *Kind) RestartOperator(ctx context.Context, op string) error {
	if _, err := k.kubectl(ctx, "delete", "pod", "-n", Namespace, "-l", "app.kubernetes.io/name="+op, "--grace-period=0", "--force"); err != nil {
		return err
	}
	_, err := k.kubectl(ctx, "rollout", "status", "-n", Namespace, "deployment/"+op, "--timeout=120s")
	return err
}

// Workloads implements Cluster: hack/e2e-kind.sh loads the probe image,
// and the agent DaemonSet of hack/kind/spire.yaml serves its socket from
// the node's /run/spire/agent-sockets.
func (k *Kind) Workloads() (Workloads, error) {
	return Workloads{ProbeImage: ProbeImage, AgentSocketDir: "/run/spire/agent-sockets", AgentSocketName: "spire-agent.sock"}, nil
}

// Diagnostics implements Cluster.
func (k *Kind) Diagnostics() string {
	var b strings.Builder
	for _, op := range Operators {
		out, _ := k.kubectl(context.Background(), "logs", "-n", Namespace, "deployment/"+op, "--tail=60")
		fmt.Fprintf(&b, "--- %s ---\n%s\n", op, out)
	}
	return b.String()
}

// Stop implements Cluster; the cluster itself is deleted by make e2e-kind.
func (k *Kind) Stop() error {
	k.forward.Stop()
	return nil
}
