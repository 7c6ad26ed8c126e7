// Command spiffe-operator registers Kubernetes workloads with a SPIRE server.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/trustplane/trustplane/common/config"
	"github.com/trustplane/trustplane/spiffe-operator/internal/operator"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "spiffe-operator:", err)
		os.Exit(1)
	}
}

func run() error {
	fs := pflag.NewFlagSet("spiffe-operator", pflag.ContinueOnError)
	operator.AddFlags(fs)
	zapOpts := zap.Options{}
	// flag.CommandLine carries controller-runtime's --kubeconfig; add zap's flags to it.
	zapOpts.BindFlags(flag.CommandLine)
	fs.AddGoFlagSet(flag.CommandLine)
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	v, err := config.NewViper(fs)
	if err != nil {
		return err
	}
	opts, err := operator.Load(v)
	if err != nil {
		return err
	}
	opts.Manager.ApplyGCPercent()
	restCfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	ctx := ctrl.SetupSignalHandler()
	op, err := operator.New(ctx, restCfg, opts, metrics.Registry)
	if err != nil {
		return err
	}
	ctrl.Log.WithName("setup").Info("starting spiffe-operator", "trustDomain", opts.TrustDomain, "entryIDPrefix", op.EntryIDPrefix)
	return op.Start(ctx)
}
