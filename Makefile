# Trustplane: the two commands are `make demo` and `make test`.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c

MODULES   := common spiffe-operator identity-operator bundle-operator e2e
OPERATORS := spiffe-operator identity-operator bundle-operator
# Packages of every module, as workspace patterns.
PKGS      := $(foreach m,$(MODULES),./$(m)/...)
GO_TEST_FLAGS ?= -timeout 20m
CONTROLLER_GEN := $(CURDIR)/hack/controller-gen.sh

# kubectl (with its built-in kustomize) from the tool cache unless given.
KUBECTL ?= $(CURDIR)/hack/kubectl.sh
IMAGE_TAG ?= dev

# Fuzz targets (package:Target) that make test runs for FUZZ_TIME each; their
# committed seed corpora (testdata/fuzz) also run in every plain go test.
FUZZ_TARGETS := \
	identity-operator/internal/idtemplate:FuzzRenderStaysUnderServiceAccount \
	identity-operator/internal/pool:FuzzRenderedSelectorsAreExactlyThePool \
	identity-operator/internal/selector:FuzzDecodeAndRender \
	identity-operator/internal/conflict:FuzzClassifyIsSymmetric
FUZZ_TIME ?= 10s

.PHONY: all help tools test vet unit cover bench demo generate fmt e2e e2e-kind images fuzz \
	$(foreach o,$(OPERATORS),deploy-$(o) undeploy-$(o))

all: test

help: ## list targets
	@grep -hE '^[a-zA-Z_%-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-22s %s\n", $$1, $$2}'

tools: ## build kube-apiserver, etcd, kubectl, spire-server, spire-agent and the real node's components into the cache (minutes on the first run only)
	@hack/build-tools.sh all node >/dev/null

vet: ## go vet every module
	go vet $(PKGS)

test: tools vet ## build what is missing, vet, and run every module's tests (e2e included), then each fuzz target briefly
	go test $(GO_TEST_FLAGS) $(PKGS)
	$(MAKE) fuzz

fuzz: ## run each fuzz target of FUZZ_TARGETS for FUZZ_TIME
	@for t in $(FUZZ_TARGETS); do \
		echo "fuzz $${t##*:} ($(FUZZ_TIME))"; \
		go test -run='^$$' -fuzz="^$${t##*:}\$$" -fuzztime=$(FUZZ_TIME) ./$${t%%:*} || exit 1; \
	done

cover: tools ## per-package coverage (a package counts as covered by every test of its module)
	hack/cover.sh

bench: tools ## benchmarks of every operator; figures go to bench-results/
	hack/bench.sh

generate: ## regenerate deepcopy code, CRDs and RBAC from kubebuilder markers
	@for m in $(OPERATORS); do \
		echo "generate $$m"; \
		(cd $$m && $(CONTROLLER_GEN) object paths=./api/... && \
		 $(CONTROLLER_GEN) crd rbac:roleName=$$m-manager-role paths=./... \
			output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac); \
	done
	cd common && $(CONTROLLER_GEN) object paths=./internal/testapi/... && \
		$(CONTROLLER_GEN) crd paths=./internal/testapi/... output:crd:artifacts:config=testdata/crd

fmt: ## gofmt every module
	gofmt -w $(MODULES)

demo: tools ## start a local control plane, SPIRE and the three operators, apply the samples, show the result
	hack/demo.sh

e2e: tools ## the end-to-end suite on a local control plane (also part of make test)
	go test -timeout 20m -v ./e2e/...

e2e-kind: ## the same suite on a kind cluster (needs Docker): images, SPIRE, make deploy-<operator>
	hack/e2e-kind.sh

images: ## build the operators' container images (needs Docker)
	@for o in $(OPERATORS); do docker build -t trustplane/$$o:$(IMAGE_TAG) -f $$o/Dockerfile . ; done

define deploy_rules
deploy-$(1): ## apply $(1)'s config/default (CRDs, RBAC, manager) to the cluster of $$KUBECONFIG
	$(KUBECTL) kustomize $(1)/config/default | $(KUBECTL) apply --server-side --field-manager=trustplane-deploy -f -

undeploy-$(1): ## remove $(1)'s config/default from the cluster
	$(KUBECTL) kustomize $(1)/config/default | $(KUBECTL) delete --ignore-not-found -f -
endef
$(foreach o,$(OPERATORS),$(eval $(call deploy_rules,$(o))))
