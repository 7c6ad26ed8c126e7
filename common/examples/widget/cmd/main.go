// Command widget-operator runs the example operator of docs/framework.md.
package main

import (
	"context"

	"github.com/trustplane/trustplane/common/examples/widget"
	"github.com/trustplane/trustplane/common/manager"
)

func main() {
	manager.Main(manager.Operator{
		Name:   "widget-operator",
		Scheme: widget.NewScheme,
		Setup: func(_ context.Context, p *manager.Process) (func(), error) {
			return nil, widget.Setup(p.Manager, p.Config, p.Metrics)
		},
	})
}
