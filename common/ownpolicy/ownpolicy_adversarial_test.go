package ownpolicy_test

import (
	"os"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/trustplane/trustplane/common/ownpolicy"
)

// A kind the renderer drops is a kind the operator's token may rewrite
// (spec included) unchecked, so every kind of the CRD directory is held.
var _ = Describe("Rendering from CRDs that hold several kinds in one file", func() {
	It("holds every kind of a YAML file holding several CRDs, not only the first", func() {
		dir := GinkgoT().TempDir()
		Expect(os.WriteFile(filepath.Join(dir, "crds.yaml"), []byte(`---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: alphas.a.example.org
spec:
  group: a.example.org
  names: {plural: alphas, kind: Alpha}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: betas.a.example.org
spec:
  group: a.example.org
  names: {plural: betas, kind: Beta}
`), 0o644)).To(Succeed())
		o, err := ownpolicy.FromCRDs("two-operator", dir)
		Expect(err).NotTo(HaveOccurred())
		Expect(o.Resources).To(ConsistOf(
			ownpolicy.Resource{Group: "a.example.org", Plural: "alphas", Kind: "Alpha"},
			ownpolicy.Resource{Group: "a.example.org", Plural: "betas", Kind: "Beta"}),
			"every CRD of the file is held by the policy")
	})
})
