# Trustplane: the two commands are `make demo` and `make test`.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c

MODULES   := common spiffe-operator identity-operator bundle-operator e2e
OPERATORS := spiffe-operator identity-operator bundle-operator
# Packages of every module, as workspace patterns.
PKGS      := $(foreach m,$(MODULES),./$(m)/...)
GO_TEST_FLAGS ?= -timeout 20m
CONTROLLER_GEN := $(CURDIR)/hack/controller-gen.sh

.PHONY: all help tools test vet unit cover bench demo generate fmt e2e e2e-kind \
	$(foreach o,$(OPERATORS),deploy-$(o) undeploy-$(o))

all: test

help: ## list targets
	@grep -hE '^[a-zA-Z_%-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-22s %s\n", $$1, $$2}'

tools: ## build kube-apiserver, etcd, kubectl, spire-server, spire-agent into the cache (minutes on the first run only)
	@hack/build-tools.sh all >/dev/null

vet: ## go vet every module
	go vet $(PKGS)

test: tools vet ## build what is missing, vet, and run every module's tests (e2e included)
	go test $(GO_TEST_FLAGS) $(PKGS)

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
