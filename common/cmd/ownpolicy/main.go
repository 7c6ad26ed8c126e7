// Command ownpolicy writes an operator's own-resources admission policy
// (see package ownpolicy) from its CRDs:
//
//	go run github.com/trustplane/trustplane/common/cmd/ownpolicy \
//	    -service-account my-operator -crds config/crd/bases -out config/rbac
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/trustplane/trustplane/common/ownpolicy"
)

func main() {
	sa := flag.String("service-account", "", "the operator's service account name")
	crds := flag.String("crds", "config/crd/bases", "the directory of the operator's CRDs")
	out := flag.String("out", "config/rbac", "the directory to write "+ownpolicy.PolicyFile+" and "+ownpolicy.BindingFile+" to")
	flag.Parse()
	o, err := ownpolicy.FromCRDs(*sa, *crds)
	if err == nil {
		err = ownpolicy.Write(o, *out)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ownpolicy:", err)
		os.Exit(1)
	}
}
