package image_test

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/trustplane/trustplane/common/image"
)

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestWriteTarballRoundTrip reads the written tarball back with the
// library's reader, an independent path from the writer's own code.
func TestWriteTarballRoundTrip(t *testing.T) {
	dir := t.TempDir()
	bin := writeFile(t, dir, "probe", "#!binary")
	cfgFile := writeFile(t, dir, "conf", "key=value")
	spec := image.Spec{
		Ref:        "localhost/trustplane/probe:test",
		Files:      []image.File{{Path: "/probe", Source: bin}, {Path: "/etc/probe/conf", Source: cfgFile, Mode: 0o644}},
		Entrypoint: []string{"/probe", "--serve"},
		User:       "65532:65532",
		Env:        []string{"A=b"},
	}
	out := filepath.Join(dir, "img.tar")
	if err := image.WriteTarball(spec, out); err != nil {
		t.Fatal(err)
	}
	tag, _ := name.NewTag(spec.Ref)
	img, err := tarball.ImageFromPath(out, &tag)
	if err != nil {
		t.Fatalf("read back: %v", err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OS != runtime.GOOS || cfg.Architecture != runtime.GOARCH {
		t.Errorf("platform %s/%s, want %s/%s", cfg.OS, cfg.Architecture, runtime.GOOS, runtime.GOARCH)
	}
	if strings.Join(cfg.Config.Entrypoint, " ") != "/probe --serve" || cfg.Config.User != "65532:65532" || strings.Join(cfg.Config.Env, ",") != "A=b" {
		t.Errorf("config = %+v", cfg.Config)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers = %d, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		_, _ = io.Copy(&b, tr)
		if hdr.Uid != 0 || hdr.Gid != 0 || hdr.ModTime.Unix() != 0 {
			t.Errorf("%s: owner %d:%d time %v, want root and the epoch", hdr.Name, hdr.Uid, hdr.Gid, hdr.ModTime)
		}
		got[hdr.Name] = string(rune(hdr.Typeflag)) + " " + b.String() + " " + hdr.FileInfo().Mode().String()
	}
	want := map[string]string{
		"etc/":           "5  drwxr-xr-x",
		"etc/probe/":     "5  drwxr-xr-x",
		"etc/probe/conf": "0 key=value -rw-r--r--",
		"probe":          "0 #!binary -rwxr-xr-x",
	}
	if len(got) != len(want) {
		t.Errorf("entries = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("entry %s = %q, want %q", k, got[k], v)
		}
	}
}

func TestWriteTarballIsReproducible(t *testing.T) {
	dir := t.TempDir()
	bin := writeFile(t, dir, "probe", "content")
	spec := image.Spec{Ref: "localhost/x:1", Files: []image.File{{Path: "/bin/probe", Source: bin}}, Entrypoint: []string{"/bin/probe"}}
	a, err := image.Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	b, err := image.Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	da, _ := a.Digest()
	db, _ := b.Digest()
	if da != db {
		t.Errorf("digests differ: %s and %s", da, db)
	}
}

func TestBuildRejectsBadSpecs(t *testing.T) {
	dir := t.TempDir()
	bin := writeFile(t, dir, "probe", "content")
	cases := map[string]struct {
		spec image.Spec
		want string
	}{
		"no entrypoint":  {image.Spec{Files: []image.File{{Path: "/p", Source: bin}}}, "no entrypoint"},
		"no files":       {image.Spec{Entrypoint: []string{"/p"}}, "no files"},
		"relative path":  {image.Spec{Entrypoint: []string{"/p"}, Files: []image.File{{Path: "p", Source: bin}}}, "not a clean absolute"},
		"unclean path":   {image.Spec{Entrypoint: []string{"/p"}, Files: []image.File{{Path: "/a/../p", Source: bin}}}, "not a clean absolute"},
		"twice":          {image.Spec{Entrypoint: []string{"/p"}, Files: []image.File{{Path: "/p", Source: bin}, {Path: "/p", Source: bin}}}, "given twice"},
		"file and dir":   {image.Spec{Entrypoint: []string{"/p"}, Files: []image.File{{Path: "/a", Source: bin}, {Path: "/a/b", Source: bin}}}, "also the directory"},
		"missing source": {image.Spec{Entrypoint: []string{"/p"}, Files: []image.File{{Path: "/p", Source: filepath.Join(dir, "nope")}}}, "no such file"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := image.Build(c.spec)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want one containing %q", err, c.want)
			}
		})
	}
}
