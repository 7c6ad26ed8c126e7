// Command chartgen brings the Helm chart under charts/trustplane in step
// with the operators (make generate runs it): it copies their CRDs, RBAC
// rules and admission policies into the chart's files/, writes the flag
// values of values.schema.json from each operator binary's --help, and
// regenerates the values table of the chart's README.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/trustplane/trustplane/e2e/charts"
	"github.com/trustplane/trustplane/e2e/framework"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "chartgen:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	root, err := framework.RepoRoot()
	if err != nil {
		return err
	}
	files, err := charts.Expected(ctx, root)
	if err != nil {
		return err
	}
	return charts.Write(root, files)
}
