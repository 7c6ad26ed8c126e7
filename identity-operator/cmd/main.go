// Command identity-operator runs the IdentityBinding controller: it turns
// IdentityBindings into SpiffeEntry (and optionally ClusterSPIFFEID) objects
// with safe selectors and settled conflicts.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/trustplane/trustplane/identity-operator/internal/setup"
)

func main() {
	fs := pflag.NewFlagSet("identity-operator", pflag.ExitOnError)
	setup.AddFlags(fs)
	zapOpts := zap.Options{}
	goFlags := flag.NewFlagSet("zap", flag.ExitOnError)
	zapOpts.BindFlags(goFlags)
	fs.AddGoFlagSet(goFlags)
	_ = fs.Parse(os.Args[1:])
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	if err := setup.Run(ctrl.SetupSignalHandler(), fs); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
