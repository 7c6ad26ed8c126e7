// Command bundle-operator runs the TrustBundle controller: it validates CA
// bundles from SPIRE, ConfigMaps, Secrets and inline PEM and distributes
// them to ConfigMaps, Secrets and the caBundle of annotated webhooks,
// APIServices and CRDs.
package main

import (
	"github.com/trustplane/trustplane/common/manager"

	"github.com/trustplane/trustplane/bundle-operator/internal/operator"
)

func main() { manager.Main(operator.Process()) }
