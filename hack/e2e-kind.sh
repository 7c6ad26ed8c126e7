#!/usr/bin/env bash
# e2e-kind.sh runs the end-to-end specs on a kind cluster: it creates the
# cluster (sigs.k8s.io/kind v0.33.0), builds the operator images as tarballs
# (make images) and loads them,
# installs SPIRE from its public images (hack/kind/spire.yaml), registers the
# operators as SPIRE admins, runs `make deploy-<operator>` for each with
# DEPLOY_OVERLAYS (an overlay of config/default per operator: the loaded
# image, the cluster's name in SPIRE), then the same Ginkgo specs as
# `make e2e` with E2E_CLUSTER=kind and the same DEPLOY_OVERLAYS, so that the
# make-deploy specs apply what was deployed. Needs Docker.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v docker >/dev/null && docker info >/dev/null 2>&1 || { echo "make e2e-kind needs a running Docker engine" >&2; exit 1; }
kind() { go run sigs.k8s.io/kind@v0.33.0 "$@"; }
cluster=trustplane-e2e
export KUBECONFIG=${KUBECONFIG_E2E:-$(mktemp /tmp/trustplane-kind-XXXXXX.kubeconfig)}
kubectl=hack/kubectl.sh
overlays=$(mktemp -d /tmp/trustplane-kind-overlays-XXXXXX)
cleanup() {
	rm -rf "$overlays"
	[ "${KEEP_CLUSTER:-}" = 1 ] || kind delete cluster --name "$cluster"
}
trap cleanup EXIT

kind create cluster --name "$cluster" --config hack/kind/cluster.yaml --kubeconfig "$KUBECONFIG"
images_dir=$(mktemp -d /tmp/trustplane-images-XXXXXX)
make images IMAGE_TAG=e2e IMAGES_DIR="$images_dir"
for o in spiffe-operator identity-operator bundle-operator; do
	kind load image-archive "$images_dir/$o.tar" --name "$cluster"
done
kind load image-archive "$(go run ./e2e/cmd/probe-image "$images_dir")" --name "$cluster"
rm -rf "$images_dir"

$kubectl apply --server-side -f hack/kind/spire.yaml
$kubectl -n spire-system rollout status statefulset/spire-server --timeout=180s
$kubectl -n spire-system rollout status daemonset/spire-agent --timeout=180s
server() { $kubectl -n spire-system exec spire-server-0 -c spire-server -- /opt/spire/bin/spire-server "$@"; }
server entry create -node -spiffeID spiffe://example.org/k8s-cluster-nodes -selector k8s_psat:cluster:kind
for o in spiffe-operator identity-operator bundle-operator; do
	server entry create -admin -parentID spiffe://example.org/k8s-cluster-nodes \
		-spiffeID "spiffe://example.org/trustplane/$o" \
		-selector k8s:ns:trustplane-system -selector "k8s:sa:$o"
done

# One overlay of config/default per operator: the image kind loaded and, for
# spiffe-operator, the cluster's name in hack/kind/spire.yaml's k8s_psat
# attestor (framework.KindClusterName).
for o in spiffe-operator identity-operator bundle-operator; do
	mkdir -p "$overlays/$o"
	cat >"$overlays/$o/kustomization.yaml" <<KUST
resources:
- $(realpath --relative-to="$overlays/$o" "$o/config/default")
images:
- name: $o
  newName: trustplane/$o
  newTag: e2e
KUST
	[ "$o" != spiffe-operator ] || cat >>"$overlays/$o/kustomization.yaml" <<KUST
patches:
- target: {kind: Deployment, name: $o}
  patch: |-
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: $o, namespace: trustplane-system}
    spec: {template: {spec: {containers: [{name: manager, env: [{name: CLUSTER_NAME, value: kind}]}]}}}
KUST
done
export DEPLOY_OVERLAYS=$overlays

for o in spiffe-operator identity-operator bundle-operator; do
	$kubectl kustomize "$overlays/$o" >/dev/null # validate early
	make "deploy-$o" KUBECTL="$kubectl" DEPLOY_OVERLAYS="$overlays"
	$kubectl -n trustplane-system rollout status "deployment/$o" --timeout=180s
done

E2E_CLUSTER=kind go test -timeout 30m -v ./e2e/...
