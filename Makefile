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
# make images: assembled in Go (go) or built with the Dockerfiles (docker).
IMAGES_WITH ?= go
IMAGES_DIR  ?= $(CURDIR)/bin/images

# Fuzz targets (package:Target:budget) that make test runs briefly; their
# committed seed corpora (testdata/fuzz) also run in every plain go test.
# Budgets are execution counts (a few seconds each here), not durations: with
# a duration, Go before 1.27 can fail a target with a spurious "context
# deadline exceeded" when the time runs out (go.dev/issue/75804). Set
# FUZZ_TIME (e.g. 2m) to fuzz every target for that long instead.
FUZZ_TARGETS := \
	identity-operator/internal/idtemplate:FuzzRenderStaysUnderServiceAccount:100000x \
	identity-operator/internal/pool:FuzzRenderedSelectorsAreExactlyThePool:3000x \
	identity-operator/internal/selector:FuzzDecodeAndRender:100000x \
	identity-operator/internal/conflict:FuzzClassifyIsSymmetric:100000x
FUZZ_TIME ?=

.PHONY: all help tools test vet unit cover bench chaos demo generate fmt e2e e2e-deployed e2e-helm e2e-installer e2e-kind images docker-images fuzz installers \
	$(foreach o,$(OPERATORS),deploy-$(o) undeploy-$(o))

all: test

help: ## list targets
	@grep -hE '^[a-zA-Z_%-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-22s %s\n", $$1, $$2}'

tools: ## build kube-apiserver, etcd, kubectl, spire-server, spire-agent and the real node's components into the cache (minutes on the first run only), and install PostgreSQL from Debian when missing
	@hack/build-tools.sh all node postgres >/dev/null

vet: ## go vet every module (common also as for macOS, where its tests may run)
	go vet $(PKGS)
	GOOS=darwin go vet ./common/...

test: tools vet ## build what is missing, vet, and run every module's tests (e2e included, with the short chaos run of e2e/chaos: about 2 minutes, fixed seed, fails on any violation), the smoke specs on the deployed cluster (operators from make deploy, then from the installers, then from the Helm chart with its upgrade and uninstall specs), then each fuzz target briefly
	# -count=1: the e2e packages build the operators with go build, which the
	# test cache does not see, so a cached result could be of other code.
	go test -count=1 $(GO_TEST_FLAGS) $(PKGS)
	$(MAKE) --no-print-directory e2e-deployed E2E_DEPLOYED_LABELS=smoke E2E_DEPLOYED_FLAGS=
	$(MAKE) --no-print-directory e2e-installer E2E_INSTALLER_FLAGS=
	$(MAKE) --no-print-directory e2e-helm E2E_HELM_FLAGS= E2E_HELM_LABELS=smoke
	$(MAKE) fuzz

fuzz: ## run each fuzz target of FUZZ_TARGETS for its budget (or FUZZ_TIME)
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; rest=$${t#*:}; name=$${rest%%:*}; budget="$(FUZZ_TIME)"; \
		[ -n "$$budget" ] || budget=$${rest#*:}; \
		echo "fuzz $$name ($$budget)"; \
		go test -run='^$$' -fuzz="^$$name\$$" -fuzztime=$$budget ./$$pkg || exit 1; \
	done

cover: tools ## per-package coverage (a package counts as covered by every test of its module)
	hack/cover.sh

# make chaos: churn and faults on two replicas of each operator for DURATION
# with SEED (a new one, printed, when empty), then the invariant table; exits
# 1 on any violation. The short version runs in make test (e2e/chaos).
# SPIRE_HA=1 runs two spire-servers on one PostgreSQL database and kills one
# at a time while the other serves.
DURATION ?= 30m
SEED     ?=
SPIRE_HA ?=

chaos: tools ## two replicas of each operator through churn and faults for DURATION (30m) with SEED (SPIRE_HA=1: two spire-servers on PostgreSQL, one killed at a time); prints faults, checks, violations, worst identity gap, time to quiescence
	nice -n 10 go run ./e2e/cmd/chaos -duration '$(DURATION)' $(if $(SEED),-seed '$(SEED)') $(if $(filter 1,$(SPIRE_HA)),-spire-ha)

bench: tools ## benchmarks of every operator; figures go to bench-results/
	hack/bench.sh

generate: ## regenerate deepcopy code, CRDs and RBAC from kubebuilder markers, each operator's own-resources policy from its CRDs, and the chart's copies of them, its flag values and values table
	@for m in $(OPERATORS); do \
		echo "generate $$m"; \
		(cd $$m && $(CONTROLLER_GEN) object paths=./api/... && \
		 $(CONTROLLER_GEN) crd paths=./api/... output:crd:artifacts:config=config/crd/bases && \
		 $(CONTROLLER_GEN) rbac:roleName=$$m-manager-role paths=./... output:rbac:artifacts:config=config/rbac && \
		 go run github.com/trustplane/trustplane/common/cmd/ownpolicy -service-account $$m -crds config/crd/bases -out config/rbac); \
	done
	cd common && $(CONTROLLER_GEN) object paths=./examples/widget/api/... paths=./status/... && \
		$(CONTROLLER_GEN) crd paths=./examples/widget/api/... output:crd:artifacts:config=testdata/crd
	@echo "generate charts/trustplane (CRDs, RBAC and policies from config/, flag values from each operator's --help, values table)"
	go run ./e2e/cmd/chartgen

fmt: ## gofmt every module
	gofmt -w $(MODULES)

demo: tools ## start a local control plane, SPIRE and the three operators, apply the samples, show the result
	hack/demo.sh

e2e: tools ## the end-to-end suite on a local control plane (also part of make test)
	go test -timeout 20m -v ./e2e/...

# Ginkgo label filter of make e2e-deployed (empty: every spec).
E2E_DEPLOYED_LABELS ?=
E2E_DEPLOYED_FLAGS  ?= -v

e2e-deployed: tools ## the suite with the operators deployed as pods on the real node (images imported, make deploy-<operator>); make test runs its smoke specs
	E2E_CLUSTER=deployed go test -timeout 20m -count=1 $(E2E_DEPLOYED_FLAGS) ./e2e/ -ginkgo.label-filter='$(E2E_DEPLOYED_LABELS)'

E2E_HELM_FLAGS ?= -v
# Ginkgo label filter of make e2e-helm besides the Helm specs (empty, the
# default: every spec); the make-deploy specs never run there.
E2E_HELM_LABELS ?=

e2e-helm: tools ## the deployed cluster with the operators from helm install of charts/trustplane (E2E_INSTALL=helm): the Helm specs (upgrade, uninstall, install again; e2e/helm_test.go) and every other spec but make deploy's (E2E_HELM_LABELS narrows them); make test runs it
	E2E_CLUSTER=deployed E2E_INSTALL=helm go test -tags helm_e2e -timeout 30m -count=1 $(E2E_HELM_FLAGS) ./e2e/ \
		-ginkgo.label-filter='$(if $(E2E_HELM_LABELS),(helm || $(E2E_HELM_LABELS)) && ,)!make-deploy'

E2E_INSTALLER_FLAGS ?= -v

e2e-installer: tools ## the smoke specs on the deployed cluster with the operators applied from the installers of make installers (E2E_INSTALL=installer); make test runs it
	E2E_CLUSTER=deployed E2E_INSTALL=installer go test -timeout 20m -count=1 $(E2E_INSTALLER_FLAGS) ./e2e/ -ginkgo.label-filter=smoke

e2e-kind: ## the same suite on a kind cluster (needs Docker): images, SPIRE, make deploy-<operator>
	hack/e2e-kind.sh

images: ## the operators' images (trustplane/<operator>:IMAGE_TAG) as tarballs in IMAGES_DIR (bin/images), assembled in Go without Docker; IMAGES_WITH=docker runs docker-images
	@case "$(IMAGES_WITH)" in \
		go) go run ./e2e/cmd/images -tag '$(IMAGE_TAG)' -out '$(IMAGES_DIR)' $(OPERATORS) ;; \
		docker) $(MAKE) --no-print-directory docker-images ;; \
		*) echo "IMAGES_WITH=$(IMAGES_WITH): want go or docker" >&2; exit 2 ;; \
	esac

docker-images: ## the same images built with the operators' Dockerfiles into the local Docker engine (needs Docker)
	@for o in $(OPERATORS); do docker build -t trustplane/$$o:$(IMAGE_TAG) -f $$o/Dockerfile . ; done

installers: ## dist/<operator>.yaml: each operator's config/default in one file for kubectl apply, images trustplane/<operator>:IMAGE_TAG
	IMAGE_TAG='$(IMAGE_TAG)' hack/installers.sh dist

# make deploy-<operator> applies <operator>/config/default with the image
# make images builds (trustplane/<operator>:IMAGE_TAG, as make installers), or,
# with DEPLOY_OVERLAYS=<dir>, the kustomization <dir>/<operator>: an overlay
# of config/default for one cluster (image, SPIRE address, agent socket).
DEPLOY_OVERLAYS ?=

define deploy_rules
deploy-$(1): ## apply $(1)'s config/default (CRDs, RBAC, manager; image trustplane/$(1):IMAGE_TAG), or its overlay in DEPLOY_OVERLAYS/$(1), to the cluster of $$KUBECONFIG
	$$(if $$(DEPLOY_OVERLAYS),$(KUBECTL) kustomize $$(DEPLOY_OVERLAYS)/$(1),IMAGE_TAG='$$(IMAGE_TAG)' hack/installers.sh - $(1)) | $(KUBECTL) apply --server-side --field-manager=trustplane-deploy -f -

undeploy-$(1): ## remove $(1)'s config/default from the cluster
	$(KUBECTL) kustomize $(1)/config/default | $(KUBECTL) delete --ignore-not-found -f -
endef
$(foreach o,$(OPERATORS),$(eval $(call deploy_rules,$(o))))
