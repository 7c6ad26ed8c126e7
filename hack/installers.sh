#!/usr/bin/env bash
# installers.sh writes one installer per operator, OUT/<operator>.yaml: the
# operator's config/default (namespace, CRDs, RBAC, manager Deployment) as a
# single file for `kubectl apply --server-side -f`, with the manager's image
# set to IMAGE_PREFIX<operator>:IMAGE_TAG (the names `make images` builds).
#
# Usage: hack/installers.sh OUT [OPERATOR...]   (IMAGE_PREFIX defaults to
# trustplane/, IMAGE_TAG to dev; every operator unless named). OUT - writes
# the installers to standard output instead (make deploy-<operator>).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: hack/installers.sh OUT [OPERATOR...]}
shift
operators=("$@")
if [ ${#operators[@]} -eq 0 ]; then
	operators=(spiffe-operator identity-operator bundle-operator)
fi
prefix=${IMAGE_PREFIX-trustplane/}
tag=${IMAGE_TAG:-dev}
if [ "$out" != - ]; then
	mkdir -p "$out"
	out=$(cd "$out" && pwd)
fi
# kustomize resolves bases relative to the kustomization, so the image
# override lives in a throwaway kustomization inside the repository.
work=$(mktemp -d "$root/.installers-XXXXXX")
trap 'rm -rf "$work"' EXIT
for o in "${operators[@]}"; do
	mkdir -p "$work/$o"
	cat >"$work/$o/kustomization.yaml" <<KUST
resources:
- ../../$o/config/default
images:
- name: $o
  newName: $prefix$o
  newTag: "$tag"
KUST
	if [ "$out" = - ]; then
		"$root/hack/kubectl.sh" kustomize "$work/$o"
		continue
	fi
	{
		echo "# $o installer, from $o/config/default (make installers); apply with"
		echo "#   kubectl apply --server-side -f $o.yaml"
		"$root/hack/kubectl.sh" kustomize "$work/$o"
	} >"$out/$o.yaml.tmp"
	mv "$out/$o.yaml.tmp" "$out/$o.yaml"
	echo "$out/$o.yaml"
done
