package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// postgresSuperuser is the superuser initdb creates; the harness connects
// as it over loopback, where the server trusts every local connection.
const postgresSuperuser = "postgres"

// postgresRunAs is the unprivileged account PostgreSQL runs as when the test
// runs as root: postgres and initdb refuse to run as root.
const postgresRunAs = "nobody"

// Postgres is a running PostgreSQL server (Debian's packages, see
// PostgresBinDir) with its data in a temporary directory, listening on a
// free loopback port and on a Unix socket in that directory. It trusts every
// connection from this machine: it is for tests only.
type Postgres struct {
	// Dir holds the data directory, the socket and the log.
	Dir string
	// Port is the loopback TCP port.
	Port int

	binDir string
	proc   *Process
	cred   *syscall.Credential
}

// PostgresBinDir is the directory of PostgreSQL's server programs: the
// newest /usr/lib/postgresql/<version>/bin of Debian's postgresql package,
// else the directory of initdb on PATH. The error says how to install it.
func PostgresBinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { return versionOf(b) - versionOf(a) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Dir(real), nil
		}
	}
	return "", errors.New("PostgreSQL is not installed: run hack/build-tools.sh postgres (as root it installs Debian's postgresql package) or apt-get install postgresql")
}

// versionOf is the major version in /usr/lib/postgresql/<version>/bin, 0 if none.
func versionOf(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

// StartPostgres initialises a database cluster in a new temporary directory
// and starts PostgreSQL on it. As root it runs as the unprivileged user
// nobody, which owns the directory.
func StartPostgres() (*Postgres, error) {
	binDir, err := PostgresBinDir()
	if err != nil {
		return nil, err
	}
	cred, err := postgresCredential()
	if err != nil {
		return nil, err
	}
	// The socket lives here: keep the path short.
	dir, err := os.MkdirTemp("/tmp", "tpg")
	if err != nil {
		return nil, fmt.Errorf("postgres dir: %w", err)
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("hand %s to %s: %w", dir, postgresRunAs, err)
		}
	}
	port, err := FreePort()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	p := &Postgres{Dir: dir, Port: port, binDir: binDir, cred: cred}
	if err := p.initdb(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	proc, err := StartProcess(ProcessOptions{
		Name: "postgres", Path: filepath.Join(binDir, "postgres"), LogPath: filepath.Join(dir, "postgres.log"),
		Credential: cred,
		Args: []string{"-D", p.dataDir(), "-h", "127.0.0.1", "-p", strconv.Itoa(port), "-k", dir,
			// Two spire-servers each keep a pool of connections.
			"-c", "max_connections=200"},
	})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	p.proc = proc
	if err := p.waitReady(60 * time.Second); err != nil {
		_ = p.Cleanup()
		return nil, fmt.Errorf("%w\n--- postgres log ---\n%s", err, lastLines(proc.Logs(), 40))
	}
	return p, nil
}

// postgresCredential is nobody's credential when the test runs as root, else
// nil (the current user runs PostgreSQL).
func postgresCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(postgresRunAs)
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL refuses to run as root and there is no user %s to run it as: %w", postgresRunAs, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("uid of %s: %w", postgresRunAs, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("gid of %s: %w", postgresRunAs, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func (p *Postgres) dataDir() string { return filepath.Join(p.Dir, "data") }

// initdb creates the database cluster, as the user PostgreSQL runs as.
func (p *Postgres) initdb() error {
	cmd := exec.Command(filepath.Join(p.binDir, "initdb"), "-D", p.dataDir(), "-U", postgresSuperuser,
		"--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync")
	cmd.Dir = p.Dir
	cmd.SysProcAttr = childAttr()
	cmd.SysProcAttr.Credential = p.cred
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w: %s", err, out)
	}
	return nil
}

// waitReady polls pg_isready until the server accepts connections.
func (p *Postgres) waitReady(timeout time.Duration) error {
	var out []byte
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		var err error
		if out, err = p.client(ctx, "pg_isready", "-d", "postgres").CombinedOutput(); err == nil {
			return true, nil
		}
		if p.proc.Exited() {
			return false, fmt.Errorf("postgres exited before it was ready: %v", p.proc.ExitError())
		}
		return false, nil
	})
	if wait.Interrupted(err) {
		return fmt.Errorf("postgres not ready after %s: %s", timeout, strings.TrimSpace(string(out)))
	}
	return err
}

// client is a PostgreSQL client program of the same installation, pointed
// at this server over loopback as the superuser.
func (p *Postgres) client(ctx context.Context, name string, args ...string) *exec.Cmd {
	args = append([]string{"-h", "127.0.0.1", "-p", strconv.Itoa(p.Port), "-U", postgresSuperuser}, args...)
	return exec.CommandContext(ctx, filepath.Join(p.binDir, name), args...)
}

// CreateDatabase creates the database name and returns its connection
// string (a libpq URL over loopback, without TLS).
func (p *Postgres) CreateDatabase(ctx context.Context, name string) (string, error) {
	if out, err := p.client(ctx, "createdb", name).CombinedOutput(); err != nil {
		return "", fmt.Errorf("createdb %s: %w: %s", name, err, out)
	}
	return p.ConnectionString(name), nil
}

// ConnectionString is the libpq URL of database name on this server.
func (p *Postgres) ConnectionString(name string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", postgresSuperuser, p.Port, name)
}

// Logs returns the server's log.
func (p *Postgres) Logs() string {
	if p == nil || p.proc == nil {
		return ""
	}
	return p.proc.Logs()
}

// Stop stops the server (SIGTERM to its process group, SIGKILL after 15s).
func (p *Postgres) Stop() error {
	if p == nil || p.proc == nil {
		return nil
	}
	return p.proc.Stop(15 * time.Second)
}

// Cleanup stops the server and removes its directory.
func (p *Postgres) Cleanup() error {
	if p == nil {
		return nil
	}
	err := p.Stop()
	if rmErr := os.RemoveAll(p.Dir); rmErr != nil && err == nil {
		err = rmErr
	}
	return err
}
