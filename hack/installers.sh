#!/usr/bin/env bash
# installers.sh writes one installer per operator, OUT/<operator>.yaml: the
# operator's config/default (namespace, CRDs, RBAC, manager Deployment) as a
# single file for `kubectl apply --server-side -f`, with the manager's image
# set to IMAGE_PREFIX<operator>:IMAGE_TAG (the names `make images` builds).
#
# Usage: hack/installers.sh OUT   (IMAGE_PREFIX defaults to trustplane/, IMAGE_TAG to dev)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: hack/installers.sh OUT}
prefix=${IMAGE_PREFIX-trustplane/}
tag=${IMAGE_TAG:-dev}
mkdir -p "$out"
out=$(cd "$out" && pwd)
# kustomize resolves bases relative to the kustomization, so the image
# override lives in a throwaway kustomization inside the repository.
work=$(mktemp -d "$root/.installers-XXXXXX")
trap 'rm -rf "$work"' EXIT
for o in spiffe-operator identity-operator bundle-operator; do
	mkdir -p "$work/$o"
	cat >"$work/$o/kustomization.yaml" <<KUST
resources:
- ../../$o/config/default
images:
- name: $o
  newName: $prefix$o
  newTag: "$tag"
KUST
	{
		echo "# $o installer, from $o/config/default (make installers); apply with"
		echo "#   kubectl apply --server-side -f $o.yaml"
		"$root/hack/kubectl.sh" kustomize "$work/$o"
	} >"$out/$o.yaml.tmp"
	mv "$out/$o.yaml.tmp" "$out/$o.yaml"
	echo "$out/$o.yaml"
done
