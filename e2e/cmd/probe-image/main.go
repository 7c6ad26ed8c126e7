// Command probe-image writes the svid-probe image as a tarball, for
// clusters whose nodes load images from files (hack/e2e-kind.sh runs
// `kind load image-archive` with it).
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/trustplane/trustplane/e2e/framework"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: probe-image <directory for svid-probe.tar>")
		os.Exit(2)
	}
	root, err := framework.RepoRoot()
	if err == nil {
		var tar string
		if tar, err = framework.BuildProbeImage(context.Background(), root, os.Args[1]); err == nil {
			fmt.Println(filepath.Clean(tar))
			return
		}
	}
	fmt.Fprintln(os.Stderr, "probe-image:", err)
	os.Exit(1)
}
