// Package image assembles container images from static binaries without
// Docker: one layer holding the files, a config naming the entrypoint and the
// user, written as a tarball that containerd (`ctr images import`) and
// `docker load` both read.
package image

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// File is one file of the image.
type File struct {
	// Path is the absolute path inside the image, e.g. /manager.
	Path string
	// Source is the file on this machine whose content is copied.
	Source string
	// Mode is the permission bits; 0 means 0o755.
	Mode int64
}

// Spec describes a FROM-scratch image.
type Spec struct {
	// Ref names the image, e.g. localhost/trustplane/svid-probe:dev.
	Ref string
	// Files are the image's only content; parent directories are added.
	Files []File
	// Entrypoint is the command the container runs.
	Entrypoint []string
	// User is the user (and group) the container runs as, e.g. 65532:65532;
	// empty means root.
	User string
	// Env is the environment, as NAME=value.
	Env []string
}

// Build assembles the image for this machine's platform. The layer is
// reproducible: fixed owners and times, entries in a fixed order.
func Build(spec Spec) (v1.Image, error) {
	if len(spec.Entrypoint) == 0 {
		return nil, errors.New("image spec has no entrypoint")
	}
	layerTar, err := layerTarball(spec.Files)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return nil, fmt.Errorf("layer of %s: %w", spec.Ref, err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, fmt.Errorf("append layer: %w", err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("config of empty image: %w", err)
	}
	cfg = cfg.DeepCopy()
	cfg.OS = runtime.GOOS
	cfg.Architecture = runtime.GOARCH
	cfg.Config.Entrypoint = spec.Entrypoint
	cfg.Config.User = spec.User
	cfg.Config.Env = spec.Env
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return nil, fmt.Errorf("set config: %w", err)
	}
	return img, nil
}

// WriteTarball builds the image and writes it to path as an image tarball
// tagged with spec.Ref.
func WriteTarball(spec Spec, path string) error {
	tag, err := name.NewTag(spec.Ref)
	if err != nil {
		return fmt.Errorf("image reference %q: %w", spec.Ref, err)
	}
	img, err := Build(spec)
	if err != nil {
		return err
	}
	if err := tarball.WriteToFile(path, tag, img); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// GoBinary builds the Go package pkg as a static binary (no cgo, stripped)
// into out, running the go command in dir (a directory of the module or
// workspace that holds pkg).
func GoBinary(ctx context.Context, dir, pkg, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if output, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, output)
	}
	return nil
}

// layerTarball writes the files and their parent directories into an
// uncompressed tar, owned by root, with the Unix epoch as time.
func layerTarball(files []File) ([]byte, error) {
	if len(files) == 0 {
		return nil, errors.New("image spec has no files")
	}
	sorted := append([]File(nil), files...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Path < sorted[j].Path })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	dirs, isFile := map[string]bool{}, map[string]bool{}
	for i, f := range sorted {
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || f.Path == "/" {
			return nil, fmt.Errorf("image file path %q is not a clean absolute file path", f.Path)
		}
		if i > 0 && sorted[i-1].Path == f.Path {
			return nil, fmt.Errorf("image file path %q is given twice", f.Path)
		}
		isFile[f.Path] = true
		var parents []string
		for d := path.Dir(f.Path); d != "/"; d = path.Dir(d) {
			parents = append([]string{d}, parents...)
		}
		for _, d := range parents {
			if isFile[d] {
				return nil, fmt.Errorf("image file path %q is also the directory of %q", d, f.Path)
			}
			if dirs[d] {
				continue
			}
			dirs[d] = true
			hdr := &tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}
			if err := tw.WriteHeader(hdr); err != nil {
				return nil, fmt.Errorf("tar header of %s: %w", d, err)
			}
		}
		data, err := os.ReadFile(f.Source)
		if err != nil {
			return nil, fmt.Errorf("read %s for %s: %w", f.Source, f.Path, err)
		}
		mode := f.Mode
		if mode == 0 {
			mode = 0o755
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(f.Path, "/"), Mode: mode, Size: int64(len(data)), ModTime: epoch, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("tar header of %s: %w", f.Path, err)
		}
		if _, err := tw.Write(data); err != nil {
			return nil, fmt.Errorf("tar content of %s: %w", f.Path, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("close tar: %w", err)
	}
	return buf.Bytes(), nil
}
