#!/usr/bin/env bash
# build-tools.sh builds the real components the tests run (kube-apiserver, kubectl,
# etcd, spire-server, spire-agent, helm) from the Go module proxy into a cache outside
# the repository, keyed by version. A binary already in the cache is reused.
# The node target builds the real node's components the same way: kubelet,
# kube-controller-manager, kube-scheduler, containerd with its runc shim and its
# client ctr (which imports images), runc and the CNI plugins bridge, host-local, loopback and portmap.
#
# The postgres target installs PostgreSQL from Debian when it is missing: the harness
# runs it for SPIRE in HA (testenv.StartSpireHA) and the benchmark's PostgreSQL run.
#
# Usage: hack/build-tools.sh [k8s] [spire] [helm] [node] [postgres] [all]   (default: all; all is k8s, spire and helm)
# Prints the cache directory of the binaries on its last line when asked with --print-dir.
set -euo pipefail

K8S_VERSION=v1.37.2
ETCD_VERSION=v3.7.3
SPIRE_VERSION=v1.13.3
CONTAINERD_VERSION=v2.4.2
RUNC_VERSION=v1.5.3
CNI_PLUGINS_VERSION=v1.10.0
HELM_VERSION=v3.22.0

root=$(cd "$(dirname "$0")/.." && pwd)
cache=${TRUSTPLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trustplane}
bin="$cache/bin"
mkdir -p "$bin"

say() { printf '[build-tools] %s\n' "$*" >&2; }

# build NAME VERSION DIR PKG [CGO] [LDFLAGS] [TAGS]
build() {
	local name=$1 version=$2 dir=$3 pkg=$4 cgo=${5:-0} ldflags=${6:-} tags=${7:-}
	local out="$bin/$name-$version"
	if [ -x "$out" ]; then
		say "$name $version: cached at $out"
		return
	fi
	say "$name $version: building from the Go module proxy (first run only; this takes minutes)"
	local start=$SECONDS
	(cd "$root/hack/tools/$dir" && CGO_ENABLED=$cgo GOWORK=off go build -trimpath -tags "$tags" -ldflags "-s -w $ldflags" -o "$out.tmp" "$pkg")
	mv "$out.tmp" "$out"
	say "$name $version: built in $((SECONDS - start))s"
}

# k8s_ldflags stamps the Kubernetes version into a binary, as its release build does.
k8s_ldflags() {
	local minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
	local ld=""
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ld="$ld -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
	done
	echo "$ld"
}

k8s() {
	local ld; ld=$(k8s_ldflags)
	build kube-apiserver "$K8S_VERSION" k8s k8s.io/kubernetes/cmd/kube-apiserver 0 "$ld"
	build kubectl "$K8S_VERSION" k8s k8s.io/kubernetes/cmd/kubectl 0 "$ld"
	build etcd "$ETCD_VERSION" etcd go.etcd.io/etcd/server/v3 0
}

spire() {
	build spire-server "$SPIRE_VERSION" spire github.com/spiffe/spire/cmd/spire-server 1
	build spire-agent "$SPIRE_VERSION" spire github.com/spiffe/spire/cmd/spire-agent 1
}

# helm builds the Helm command line the chart tests lint and render with,
# stamped as Helm's release build stamps it: its version, and the Kubernetes
# version of its client-go as the default of helm template and helm lint.
helm() {
	local kv minor ld p
	kv=$(cd "$root/hack/tools/helm" && GOWORK=off go list -m -f '{{.Version}}' k8s.io/client-go)
	minor=${kv#v0.}; minor=${minor%%.*}
	ld="-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
	for p in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
		ld="$ld -X $p.k8sVersionMajor=1 -X $p.k8sVersionMinor=$minor"
	done
	build helm "$HELM_VERSION" helm helm.sh/helm/v3/cmd/helm 0 "$ld"
}

# node builds what a real node runs. runc links its nsenter C code (cgo, so gcc is
# needed) and libseccomp: without seccomp support runc refuses every container whose
# spec has a seccomp profile, and the kubelet asks for RuntimeDefault for every pod
# sandbox. Its headers come from Debian's libseccomp-dev, installed here when missing
# and run as root with apt-get.
node() {
	if ! pkg-config --exists libseccomp 2>/dev/null; then
		if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
			say "runc needs libseccomp's headers: installing libseccomp-dev and pkg-config from Debian"
			apt-get update -qq
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libseccomp-dev pkg-config >/dev/null
		else
			say "runc needs libseccomp's headers and pkg-config: apt-get install libseccomp-dev pkg-config"
			exit 1
		fi
	fi
	local ld; ld=$(k8s_ldflags)
	build kubelet "$K8S_VERSION" k8s k8s.io/kubernetes/cmd/kubelet 0 "$ld"
	build kube-controller-manager "$K8S_VERSION" k8s k8s.io/kubernetes/cmd/kube-controller-manager 0 "$ld"
	build kube-scheduler "$K8S_VERSION" k8s k8s.io/kubernetes/cmd/kube-scheduler 0 "$ld"
	local cv="-X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION"
	build containerd "$CONTAINERD_VERSION" containerd github.com/containerd/containerd/v2/cmd/containerd 0 "$cv"
	build containerd-shim-runc-v2 "$CONTAINERD_VERSION" containerd github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 0 "$cv"
	build ctr "$CONTAINERD_VERSION" containerd github.com/containerd/containerd/v2/cmd/ctr 0 "$cv"
	build runc "$RUNC_VERSION" runc github.com/opencontainers/runc 1 "-X main.version=${RUNC_VERSION#v}" seccomp
	local p
	for p in main/bridge ipam/host-local main/loopback meta/portmap; do
		build "cni-${p#*/}" "$CNI_PLUGINS_VERSION" cni "github.com/containernetworking/plugins/plugins/$p" 0 \
			"-X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$CNI_PLUGINS_VERSION"
	done
}

# postgres installs Debian's PostgreSQL server when no initdb is found where the harness
# looks (testenv.PostgresBinDir): /usr/lib/postgresql/<version>/bin, then PATH.
postgres() {
	if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null; then
		return
	fi
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		say "SPIRE in HA needs PostgreSQL: installing postgresql from Debian"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
	else
		say "SPIRE in HA needs PostgreSQL: apt-get install postgresql"
		exit 1
	fi
}

# envtest expects plain names in one directory: link them there.
assets() {
	local dir="$cache/assets/k8s-$K8S_VERSION"
	mkdir -p "$dir"
	ln -sf "$bin/kube-apiserver-$K8S_VERSION" "$dir/kube-apiserver"
	ln -sf "$bin/kubectl-$K8S_VERSION" "$dir/kubectl"
	ln -sf "$bin/etcd-$ETCD_VERSION" "$dir/etcd"
	ln -sf "$bin/spire-server-$SPIRE_VERSION" "$dir/spire-server" 2>/dev/null || true
	ln -sf "$bin/spire-agent-$SPIRE_VERSION" "$dir/spire-agent" 2>/dev/null || true
	ln -sf "$bin/helm-$HELM_VERSION" "$dir/helm" 2>/dev/null || true
	echo "$dir"
}

targets=${*:-all}
for t in $targets; do
	case $t in
	k8s) k8s ;;
	spire) spire ;;
	helm) helm ;;
	node) node ;;
	postgres) postgres ;;
	all) k8s; spire; helm ;;
	--print-dir) ;;
	*) say "unknown target $t"; exit 2 ;;
	esac
done
assets
