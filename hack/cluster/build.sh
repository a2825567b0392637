#!/usr/bin/env bash
# Builds the local control plane's binaries from the pinned Go modules beside this script
# (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kwok, kwokctl, helm)
# into a cache outside the repository, keyed by the content of this folder, and prints the bin dir.
# A second run with the same pins finds the cache and does nothing.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"

key="$(cd "$here" && cat versions.env build.sh ./*/go.mod ./*/go.sum ./*/*.go 2>/dev/null | sha256sum | cut -c1-12)"
cache="${DDP_CACHE_DIR:-$HOME/.cache/ddp-operator}/cluster-${K8S_VERSION}-${key}"
bin="$cache/bin"
want=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok kwokctl helm)

complete() { for b in "${want[@]}"; do [[ -x "$bin/$b" ]] || return 1; done; }
if complete; then echo "$bin"; exit 0; fi

mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if complete; then echo "$bin"; exit 0; fi

tmp="$cache/bin.tmp"
rm -rf "$tmp" && mkdir -p "$tmp"
export CGO_ENABLED=0 GOFLAGS="-mod=readonly -trimpath"
log() { echo "[build $(date +%H:%M:%S)] $*" >&2; }

minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
kv=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  kv+=" -X $pkg.gitVersion=${K8S_VERSION} -X $pkg.gitMajor=1 -X $pkg.gitMinor=${minor}"
  kv+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

log "etcd ${ETCD_VERSION}"
(cd "$here/etcd" && go build -ldflags "-s -w" -o "$tmp/etcd" .)
log "kwok ${KWOK_VERSION}"
(cd "$here/kwok" && go build -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v} -X sigs.k8s.io/kwok/pkg/consts.KubeVersion=${K8S_VERSION#v}" -o "$tmp/" tool)
log "helm ${HELM_VERSION}"
(cd "$here/helm" && go build -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION} -X helm.sh/helm/v3/internal/version.gitTreeState=clean" -o "$tmp/" tool)
log "kubernetes ${K8S_VERSION} (kube-apiserver, kube-controller-manager, kube-scheduler, kubectl)"
(cd "$here/kube" && go build -tags selinux,notest -ldflags "-s -w $kv" -o "$tmp/" tool)

rm -rf "$bin" && mv "$tmp" "$bin"
log "done: $bin"
echo "$bin"
