// Package operatorimage defines the operators' container images (which Go
// package becomes which file, run as which user) and builds them as image
// tarballs without Docker. It is the one source of truth for those values:
// a test checks that each operator's Dockerfile names the same ones.
package operatorimage

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/trustplane/trustplane/common/image"
)

// User is the user and group every operator runs as (distroless "nonroot").
const User = "65532:65532"

// Package is the Go package, relative to the operator's module directory,
// that is the operator's binary.
const Package = "./cmd"

// Repository is the image repository prefix: an operator's image is
// Repository/<operator>:<tag>.
const Repository = "trustplane"

// Operator is one operator's image. Its name is also its module directory
// (relative to the repository root) and the last element of its image name.
type Operator struct {
	// Name is e.g. spiffe-operator.
	Name string
}

// Operators returns the three operators, in the order they are built.
func Operators() []Operator {
	return []Operator{{Name: "spiffe-operator"}, {Name: "identity-operator"}, {Name: "bundle-operator"}}
}

// Lookup returns the operator called name.
func Lookup(name string) (Operator, error) {
	for _, o := range Operators() {
		if o.Name == name {
			return o, nil
		}
	}
	names := make([]string, 0, len(Operators()))
	for _, o := range Operators() {
		names = append(names, o.Name)
	}
	return Operator{}, fmt.Errorf("no operator %q (known: %s)", name, strings.Join(names, ", "))
}

// Binary is the binary's absolute path inside the image.
func (o Operator) Binary() string { return "/" + o.Name }

// Entrypoint is the command the container runs.
func (o Operator) Entrypoint() []string { return []string{o.Binary()} }

// Ref is the image's reference for tag, e.g. trustplane/spiffe-operator:dev.
func (o Operator) Ref(tag string) string { return Repository + "/" + o.Name + ":" + tag }

// Spec is the image of the operator tagged tag, whose binary is the file bin
// on this machine.
func (o Operator) Spec(tag, bin string) image.Spec {
	return image.Spec{
		Ref:        o.Ref(tag),
		Files:      []image.File{{Path: o.Binary(), Source: bin}},
		Entrypoint: o.Entrypoint(),
		User:       User,
	}
}

// Build compiles the operator's Package in root/<Name> as a static binary
// and writes its image, tagged tag, to dir/<Name>.tar, whose path it
// returns. The binary is compiled into a temporary directory under dir and
// removed afterwards.
func (o Operator) Build(ctx context.Context, root, dir, tag string) (string, error) {
	if ref, err := name.NewTag(o.Ref(tag)); err != nil {
		return "", fmt.Errorf("%s: image tag %q: %w", o.Name, tag, err)
	} else if ref.TagStr() != tag {
		return "", fmt.Errorf("%s: image tag %q is not a valid tag (the reference reads it as %q)", o.Name, tag, ref.TagStr())
	}
	work, err := os.MkdirTemp(dir, "."+o.Name+"-")
	if err != nil {
		return "", fmt.Errorf("%s: %w", o.Name, err)
	}
	defer os.RemoveAll(work)
	bin := filepath.Join(work, o.Name)
	if err := image.GoBinary(ctx, filepath.Join(root, o.Name), Package, bin); err != nil {
		return "", fmt.Errorf("%s: %w", o.Name, err)
	}
	tar := filepath.Join(dir, o.Name+".tar")
	if err := image.WriteTarball(o.Spec(tag, bin), tar); err != nil {
		return "", fmt.Errorf("%s: %w", o.Name, err)
	}
	return tar, nil
}
