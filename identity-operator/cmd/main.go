// Command identity-operator runs the IdentityBinding controller: it turns
// IdentityBindings into SpiffeEntry (and optionally ClusterSPIFFEID) objects
// with safe selectors and settled conflicts.
package main

import (
	"github.com/trustplane/trustplane/common/manager"

	"github.com/trustplane/trustplane/identity-operator/internal/setup"
)

func main() { manager.Main(setup.Operator()) }
