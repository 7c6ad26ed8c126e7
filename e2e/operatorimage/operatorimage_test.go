package operatorimage_test

import (
	"archive/tar"
	"context"
	"debug/elf"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/trustplane/trustplane/e2e/operatorimage"
)

// tinyMain is the program of a module laid out like an operator (<name>/cmd);
// it uses package net, so with cgo it would link dynamically.
const tinyMain = `package main

import (
	"fmt"
	"net"
)

func main() {
	_, err := net.LookupPort("tcp", "443")
	fmt.Println("tiny-operator running", err == nil)
}
`

// TestBuildWritesAStaticImageLikeTheDockerfile builds a tiny operator with
// Build and reads the tarball back with go-containerregistry's reader: the
// tag, entrypoint and user are the definition's, the only file is the
// binary at its path, and that binary is static and runs.
func TestBuildWritesAStaticImageLikeTheDockerfile(t *testing.T) {
	t.Setenv("GOWORK", "off")
	root, out := t.TempDir(), t.TempDir()
	o := operatorimage.Operator{Name: "tiny-operator"}
	mod := filepath.Join(root, o.Name)
	if err := os.MkdirAll(filepath.Join(mod, "cmd"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mod, "go.mod"), []byte("module example.test/tiny\n\ngo 1.26.0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mod, "cmd", "main.go"), []byte(tinyMain), 0o600); err != nil {
		t.Fatal(err)
	}

	path, err := o.Build(context.Background(), root, out, "test")
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(out, "tiny-operator.tar"); path != want {
		t.Errorf("tarball at %s, want %s", path, want)
	}
	if entries, _ := os.ReadDir(out); len(entries) != 1 {
		t.Errorf("output directory holds %d entries, want only the tarball", len(entries))
	}

	manifest, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(path) })
	if err != nil {
		t.Fatalf("read manifest: %v", err)
	}
	if len(manifest) != 1 || !slices.Equal(manifest[0].RepoTags, []string{"trustplane/tiny-operator:test"}) {
		t.Fatalf("manifest = %+v, want one image tagged trustplane/tiny-operator:test", manifest)
	}
	img, err := tarball.ImageFromPath(path, nil)
	if err != nil {
		t.Fatalf("read image: %v", err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.Config.Entrypoint, []string{"/tiny-operator"}) || len(cfg.Config.Cmd) != 0 {
		t.Errorf("entrypoint %q cmd %q, want [/tiny-operator] and none", cfg.Config.Entrypoint, cfg.Config.Cmd)
	}
	if cfg.Config.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532", cfg.Config.User)
	}

	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers = %d, %v; want 1", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	hdr, err := tr.Next()
	if err != nil {
		t.Fatal(err)
	}
	if hdr.Name != "tiny-operator" || hdr.Typeflag != tar.TypeReg || hdr.Mode != 0o755 {
		t.Fatalf("layer entry %s (type %c, mode %o), want the file tiny-operator, 0755", hdr.Name, hdr.Typeflag, hdr.Mode)
	}
	bin := filepath.Join(t.TempDir(), "tiny-operator")
	f, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, tr); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if next, err := tr.Next(); err != io.EOF {
		t.Errorf("layer holds more than the binary: %v, %v", next, err)
	}

	exe, err := elf.Open(bin)
	if err != nil {
		t.Fatalf("binary is not ELF: %v", err)
	}
	defer exe.Close()
	for _, p := range exe.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("binary names a dynamic loader; built without CGO_ENABLED=0?")
		}
	}
	if libs, _ := exe.ImportedLibraries(); len(libs) != 0 {
		t.Errorf("binary links %v dynamically", libs)
	}
	output, err := exec.Command(bin).CombinedOutput()
	if err != nil || strings.TrimSpace(string(output)) != "tiny-operator running true" {
		t.Errorf("binary from the image printed %q, %v", output, err)
	}
}

func TestLookupRejectsUnknownOperators(t *testing.T) {
	if _, err := operatorimage.Lookup("nope-operator"); err == nil || !strings.Contains(err.Error(), `no operator "nope-operator"`) || !strings.Contains(err.Error(), "bundle-operator") {
		t.Errorf("err = %v, want one naming the operator and the known ones", err)
	}
	for _, o := range operatorimage.Operators() {
		got, err := operatorimage.Lookup(o.Name)
		if err != nil || got != o {
			t.Errorf("Lookup(%s) = %v, %v", o.Name, got, err)
		}
	}
}

// TestBuildRejectsABadTagBeforeCompiling: the module does not exist, so an
// error about the tag shows the tag was checked first.
func TestBuildRejectsABadTagBeforeCompiling(t *testing.T) {
	for _, tag := range []string{"", "a b", "UPPER:case", "x/y"} {
		_, err := operatorimage.Operator{Name: "spiffe-operator"}.Build(context.Background(), t.TempDir(), t.TempDir(), tag)
		if err == nil || !strings.Contains(err.Error(), "image tag") {
			t.Errorf("tag %q: err = %v, want one about the image tag", tag, err)
		}
	}
}
