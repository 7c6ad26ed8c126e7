package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/util/wait"
)

// SpireOptions configure StartSpire.
type SpireOptions struct {
	// TrustDomain defaults to "example.org".
	TrustDomain string
	// AdminIDs are SPIFFE IDs the server treats as admins over mTLS.
	AdminIDs []string
	// DefaultX509SVIDTTL defaults to 1h.
	DefaultX509SVIDTTL time.Duration
	// PSATClusters enable the k8s_psat node attestor for these clusters:
	// an agent presents a projected service-account token, which the
	// server reviews with the cluster's apiserver (TokenReview).
	PSATClusters []PSATCluster
	// BindAddress is the address the server API listens on, 127.0.0.1 by
	// default. Pods on a real node reach the server at the node's IP
	// (NodeIP), never at an address of all interfaces.
	BindAddress string
	// Port is the port of the server API, a free one when 0. Servers in HA
	// behind one DNS name listen on one port at different addresses.
	Port int
	// LogLevel is the server's log level, "DEBUG" by default (its log is
	// what a failed test prints). Benchmarks set "INFO": DEBUG logging
	// slows the server several times.
	LogLevel string
	// AuditLog enables the server's audit log (audit_log_enabled): one
	// log line per API call, naming its caller (a Unix-socket caller by
	// its binary's path, an mTLS caller by its SPIFFE ID).
	AuditLog bool
	// PostgresConnection, when set, is the libpq connection string of the
	// PostgreSQL database the server keeps its datastore in (servers in HA
	// share one, see StartSpireHA) instead of a sqlite file of its own.
	PostgresConnection string
	// BundleEndpoint makes the server serve its bundle on a SPIFFE bundle
	// endpoint (profile https_spiffe, authenticated by its own SVID
	// ServerID) at BundleEndpointURL, for another server to federate with.
	BundleEndpoint bool
}

// PSATCluster is a cluster whose agents attest with k8s_psat.
type PSATCluster struct {
	// Name is the cluster's name in agent IDs and k8s_psat:cluster selectors.
	Name string
	// KubeconfigPath reaches the cluster's apiserver with the rights to
	// review tokens and read pods and nodes (ControlPlane.SpireServerKubeconfig).
	KubeconfigPath string
	// ServiceAccounts are the agents' accounts, as namespace:name.
	ServiceAccounts []string
}

// Spire is a running spire-server on 127.0.0.1 (or BindAddress) with a sqlite file
// datastore (or a PostgreSQL database, PostgresConnection),
// a disk key manager, the join_token node attestor (and k8s_psat when
// asked) and its admin API on a Unix socket.
type Spire struct {
	// TrustDomain is the server's trust domain.
	TrustDomain string
	// Dir holds the configuration, data, socket and logs. It is short, so the
	// socket path stays far below the 108-byte limit.
	Dir string
	// SocketPath is the admin API Unix socket.
	SocketPath string
	// Address is the TCP address (host:port) of the server API, for mTLS.
	Address string
	// ServerID is the server's SPIFFE ID.
	ServerID string
	// BundleEndpointURL is the https URL of the server's bundle endpoint
	// when SpireOptions.BundleEndpoint is set; empty otherwise.
	BundleEndpointURL string

	bin    string
	config string
	proc   *Process
}

// StartSpire starts a spire-server and waits until it is healthy.
func StartSpire(opts SpireOptions) (*Spire, error) {
	bin, err := Binary("spire-server")
	if err != nil {
		return nil, err
	}
	if opts.TrustDomain == "" {
		opts.TrustDomain = "example.org"
	}
	if opts.DefaultX509SVIDTTL == 0 {
		opts.DefaultX509SVIDTTL = time.Hour
	}
	if opts.LogLevel == "" {
		opts.LogLevel = "DEBUG"
	}
	if opts.BindAddress == "" {
		opts.BindAddress = "127.0.0.1"
	}
	// A socket path over 108 bytes makes spire-server hang: keep it short.
	dir, err := os.MkdirTemp("/tmp", "tps")
	if err != nil {
		return nil, fmt.Errorf("spire dir: %w", err)
	}
	port := opts.Port
	if port == 0 {
		if port, err = FreePortOn(opts.BindAddress); err != nil {
			return nil, err
		}
	}
	s := &Spire{
		TrustDomain: opts.TrustDomain,
		Dir:         dir,
		SocketPath:  filepath.Join(dir, "api.sock"),
		Address:     net.JoinHostPort(opts.BindAddress, strconv.Itoa(port)),
		ServerID:    "spiffe://" + opts.TrustDomain + "/spire/server",
		bin:         bin,
		config:      filepath.Join(dir, "server.conf"),
	}
	federation := ""
	if opts.BundleEndpoint {
		bePort, err := FreePortOn(opts.BindAddress)
		if err != nil {
			return nil, err
		}
		s.BundleEndpointURL = "https://" + net.JoinHostPort(opts.BindAddress, strconv.Itoa(bePort))
		federation = fmt.Sprintf("    federation {\n        bundle_endpoint {\n            address = %q\n            port = %d\n"+
			"            profile \"https_spiffe\" {}\n        }\n    }\n", opts.BindAddress, bePort)
	}
	var admins []string
	for _, id := range opts.AdminIDs {
		admins = append(admins, strconv.Quote(id))
	}
	conf := fmt.Sprintf(`server {
    bind_address = %q
    bind_port = "%d"
    socket_path = %q
    trust_domain = %q
    data_dir = %q
    log_level = %q
    default_x509_svid_ttl = %q
    admin_ids = [%s]
    audit_log_enabled = %t
%s}
plugins {
%s    NodeAttestor "join_token" {
        plugin_data {}
    }
%s    KeyManager "disk" {
        plugin_data {
            keys_path = %q
        }
    }
}
`, opts.BindAddress, port, s.SocketPath, s.TrustDomain, filepath.Join(dir, "data"), opts.LogLevel, opts.DefaultX509SVIDTTL.String(),
		strings.Join(admins, ", "), opts.AuditLog, federation, datastorePlugin(opts, dir), psatServerPlugin(opts.PSATClusters), filepath.Join(dir, "keys.json"))
	if err := os.WriteFile(s.config, []byte(conf), 0o600); err != nil {
		return nil, fmt.Errorf("write spire-server config: %w", err)
	}
	if err := s.start(); err != nil {
		return nil, err
	}
	return s, nil
}

// datastorePlugin is the sql DataStore block: a sqlite file in dir, or the
// PostgreSQL database of opts.
func datastorePlugin(opts SpireOptions, dir string) string {
	dbType, conn, pool := "sqlite3", filepath.Join(dir, "datastore.sqlite3"), ""
	if opts.PostgresConnection != "" {
		// A bounded pool: servers sharing the database share its connections.
		dbType, conn, pool = "postgres", opts.PostgresConnection, "\n            max_open_conns = 50"
	}
	return fmt.Sprintf("    DataStore \"sql\" {\n        plugin_data {\n            database_type = %q\n            connection_string = %q%s\n        }\n    }\n",
		dbType, conn, pool)
}

// psatServerPlugin is the k8s_psat NodeAttestor block, or nothing.
func psatServerPlugin(clusters []PSATCluster) string {
	if len(clusters) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("    NodeAttestor \"k8s_psat\" {\n        plugin_data {\n            clusters = {\n")
	for _, c := range clusters {
		var sas []string
		for _, sa := range c.ServiceAccounts {
			sas = append(sas, strconv.Quote(sa))
		}
		fmt.Fprintf(&b, "                %q = {\n                    service_account_allow_list = [%s]\n                    kube_config_file = %q\n                }\n",
			c.Name, strings.Join(sas, ", "), c.KubeconfigPath)
	}
	b.WriteString("            }\n        }\n    }\n")
	return b.String()
}

func (s *Spire) start() error {
	p, err := startProcess("spire-server", filepath.Join(s.Dir, "server.log"), s.bin, "run", "-config", s.config)
	if err != nil {
		return err
	}
	s.proc = p
	if err := s.waitHealthy(90 * time.Second); err != nil {
		_ = p.Stop(10 * time.Second)
		return fmt.Errorf("%w\n--- spire-server log ---\n%s", err, lastLines(p.Logs(), 40))
	}
	return nil
}

func (s *Spire) waitHealthy(timeout time.Duration) error {
	var out []byte
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var err error
		if out, err = exec.CommandContext(hctx, s.bin, "healthcheck", "-socketPath", s.SocketPath).CombinedOutput(); err == nil {
			return true, nil
		}
		if s.proc.Exited() {
			return false, fmt.Errorf("spire-server exited before it was healthy: %v", s.proc.ExitError())
		}
		return false, nil
	})
	if wait.Interrupted(err) {
		return fmt.Errorf("spire-server not healthy after %s: %s", timeout, strings.TrimSpace(string(out)))
	}
	return err
}

// Dial returns a gRPC connection to the admin API over the Unix socket.
func (s *Spire) Dial(_ context.Context) (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient("unix://"+s.SocketPath, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dial spire-server at %s: %w", s.SocketPath, err)
	}
	return conn, nil
}

// CLI runs `spire-server <args> -socketPath <socket>` and returns its output.
func (s *Spire) CLI(ctx context.Context, args ...string) (string, error) {
	args = append(args, "-socketPath", s.SocketPath)
	out, err := exec.CommandContext(ctx, s.bin, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("spire-server %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// MintX509SVID mints an X509-SVID for spiffeID and writes svid.pem, key.pem
// and bundle.pem into a new directory, which it returns.
func (s *Spire) MintX509SVID(ctx context.Context, spiffeID string) (string, error) {
	dir, err := os.MkdirTemp(s.Dir, "svid")
	if err != nil {
		return "", fmt.Errorf("svid dir: %w", err)
	}
	if _, err := s.CLI(ctx, "x509", "mint", "-spiffeID", spiffeID, "-write", dir); err != nil {
		return "", err
	}
	return dir, nil
}

// BundlePEM returns the server's X.509 bundle in PEM form.
func (s *Spire) BundlePEM(ctx context.Context) (string, error) {
	return s.CLI(ctx, "bundle", "show")
}

// Stop stops the server (SIGTERM, SIGKILL after 15s). The directory stays
// for Restart and for the logs.
func (s *Spire) Stop() error {
	if s == nil || s.proc == nil {
		return nil
	}
	return s.proc.Stop(15 * time.Second)
}

// Kill ends the server at once (SIGKILL), as a crash would.
func (s *Spire) Kill() error {
	if s == nil || s.proc == nil {
		return nil
	}
	return s.proc.Kill()
}

// Restart stops the server and starts it again on the same data, keys and
// socket, as after a crash or an upgrade.
func (s *Spire) Restart() error {
	if err := s.Stop(); err != nil {
		return err
	}
	return s.start()
}

// KillAndRestart ends the server at once (SIGKILL), as a crash would, and
// starts it again on the same data, keys and socket.
func (s *Spire) KillAndRestart() error {
	if err := s.Kill(); err != nil {
		return err
	}
	return s.start()
}

// Running reports whether the server process is alive.
func (s *Spire) Running() bool { return s.proc != nil && !s.proc.Exited() }

// Logs returns the server's log.
func (s *Spire) Logs() string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, "server.log"))
	return string(b)
}

// Cleanup stops the server and removes its directory.
func (s *Spire) Cleanup() error {
	err := s.Stop()
	if rmErr := os.RemoveAll(s.Dir); rmErr != nil && err == nil {
		err = rmErr
	}
	return err
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
