// Command images builds the operators' container images without Docker:
// each operator's static binary, assembled into an image tarball
// (<out>/<operator>.tar, tagged trustplane/<operator>:<tag>) that
// `docker load`, `ctr images import` and `kind load image-archive` read.
// With no operator named it builds all three.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"github.com/trustplane/trustplane/e2e/framework"
	"github.com/trustplane/trustplane/e2e/operatorimage"
)

func main() {
	tag := flag.String("tag", "dev", "image tag")
	out := flag.String("out", "", "directory for the image tarballs (created if missing; required)")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: images -out <directory> [-tag <tag>] [operator...]")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *out == "" {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, *out, *tag, flag.Args())
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out, tag string, names []string) error {
	operators := operatorimage.Operators()
	if len(names) > 0 {
		operators = nil
		for _, n := range names {
			o, err := operatorimage.Lookup(n)
			if err != nil {
				return err
			}
			operators = append(operators, o)
		}
	}
	root, err := framework.RepoRoot()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("output directory: %w", err)
	}
	for _, o := range operators {
		tar, err := o.Build(ctx, root, out, tag)
		if err != nil {
			return err
		}
		fmt.Printf("%s %s\n", o.Ref(tag), tar)
	}
	return nil
}
