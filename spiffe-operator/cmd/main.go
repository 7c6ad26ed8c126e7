// Command spiffe-operator registers Kubernetes workloads with a SPIRE server.
package main

import (
	"github.com/trustplane/trustplane/common/manager"

	"github.com/trustplane/trustplane/spiffe-operator/internal/operator"
)

func main() { manager.Main(operator.Process()) }
