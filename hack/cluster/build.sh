#!/usr/bin/env bash
# Builds the local control plane's binaries from the pinned Go modules beside this script
# (etcd, kube-apiserver, kube-controller-manager, kube-proxy, kube-scheduler, kubectl, kubelet,
# kwok, kwokctl, helm) into a cache outside the repository (~/.cache/ddp-operator, or
# DDP_CACHE_DIR), and prints a bin directory holding all of them. Each argument adds more:
#   real-node          containerd, ctr, the CNI plugins bridge, host-local and loopback, the pause
#                      binary, coredns (CoreDNS with the plugins bind, errors, log, kubernetes),
#                      netpol (the node's NetworkPolicy engine: hack/cluster/netpol) and runc
#                      (pinned, the node's own: with cgo and libseccomp, as runc's Makefile)
#   kueue              Kueue's manager
#   scheduler-plugins  scheduler-plugins' scheduler, as scheduler-plugins
#   volcano            Volcano's vc-scheduler, vc-controller-manager and vc-webhook-manager
#   jobset             JobSet's controller manager (the benchmark's second peer), as jobset
#   registry           distribution's container registry (hack/cluster/registry.sh)
# Each tool is cached under a key made of its version, its module files and its build
# flags, so a clone reuses every build and a change rebuilds only that tool.
# Test hook: DDP_TEST_SLOW_BUILD=SECONDS makes every call take that much longer, as a cold build
# does (tests/test_realnode_up.py: no wait of realnode.sh up may count a build).
set -euo pipefail
if [[ -n "${DDP_TEST_SLOW_BUILD:-}" ]]; then sleep "$DDP_TEST_SLOW_BUILD"; fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/cluster/versions.env
source "$here/versions.env"
root="${DDP_CACHE_DIR:-$HOME/.cache/ddp-operator}"
mkdir -p "$root"
export CGO_ENABLED=0 GOFLAGS="-mod=readonly -trimpath"
log() { echo "[build $(date +%H:%M:%S)] $*" >&2; }

# go_room: the space free where go build writes, its cache and its work files. A cold build of
# the real node's tools fills gigabytes (its cache and the modules), and a full disk ends it
# "no space left on device", one line among hundreds of go's.
go_room() {
  local gocache tmp
  gocache="$(go env GOCACHE)"
  tmp="$(go env GOTMPDIR)"
  tmp="${tmp:-${TMPDIR:-/tmp}}"
  echo "$(free_at "$gocache") for its cache ($gocache), $(free_at "$tmp") for its work files ($tmp)"
}

# free_at PATH: the space free on the file system of PATH (or of its nearest existing parent).
free_at() {
  local path=$1
  until [[ -e "$path" ]]; do path="$(dirname "$path")"; done
  df --output=avail -h "$path" | tail -n 1 | tr -d ' '
}

# build NAME MODULE_DIR VERSION "LDFLAGS" "TAGS" OUTPUT...: prints the tool's cached directory.
# Built with CGO_ENABLED=0 unless the caller's environment sets it (runc needs cgo).
# An OUTPUT written NAME=BUILT is the binary go builds as BUILT (a tool's last path element),
# renamed (cmd/scheduler of scheduler-plugins as scheduler-plugins).
build() {
  local name=$1 dir=$2 version=$3 ldflags=$4 tags=$5; shift 5
  local key out
  key="$( { cat "$here/$dir"/go.mod "$here/$dir"/go.sum "$here/$dir"/*.go 2>/dev/null; \
            echo "$version|$ldflags|$tags|$(go env GOVERSION)${CGO_ENABLED/#0*/}"; } |
         sha256sum | cut -c1-12)"
  out="$root/$name-$version-$key"
  local renames=("$@") missing=0 b
  set -- "${@%%=*}"
  for b in "$@"; do [[ -x "$out/$b" ]] || missing=1; done
  if [[ $missing == 1 ]]; then
    exec 9>"$root/.$name.lock"
    flock 9
    for b in "$@"; do [[ -x "$out/$b" ]] || missing=2; done
    if [[ $missing == 2 ]]; then
      log "$name $version"
      rm -rf "$out.tmp" && mkdir -p "$out.tmp"
      local target=.
      [[ -f "$here/$dir/main.go" ]] || target=tool
      # (set -e does not reach into the $(build ...) below: a failed build returns at once)
      (cd "$here/$dir" && go build ${tags:+-tags "$tags"} -ldflags "-s -w $ldflags" -o "$out.tmp/" "$target") || {
        log "$name: go build failed (free: $(go_room))"
        return 1
      }
      if [[ -f "$here/$dir/main.go" && "$dir" != "$1" ]]; then mv "$out.tmp/$dir" "$out.tmp/$1"; fi
      for b in "${renames[@]}"; do
        if [[ $b == *=* ]]; then mv "$out.tmp/${b#*=}" "$out.tmp/${b%%=*}"; fi
      done
      rm -rf "$out" && mv "$out.tmp" "$out"
    fi
    exec 9>&-
  fi
  echo "$out"
}

# beside TOOL PATH FUNCTION ARGS...: PATH, made by FUNCTION ARGS... next to a built tool, once,
# under the tool's lock: the background build and a test's (volcano.sh up) may run at once, and
# both made the same PATH.tmp, the second's mv then failing "cannot stat".
beside() {
  local tool=$1 path=$2; shift 2
  [[ -e "$path" ]] && return 0
  (
    exec 9>"$root/.$tool.lock"
    flock 9
    if [[ ! -e "$path" ]]; then "$@"; fi
  )
}

# kubebuilder_config OUT DIR MODULE: beside a built tool (OUT/DIR-config/), the CRDs and webhook
# configurations of a kubebuilder project's module (its config/components).
kubebuilder_config() {
  local out=$1 dir=$2 module=$3 src
  src="$(cd "$here/$dir" && go list -m -f '{{.Dir}}' "$module")"
  rm -rf "$out/$dir-config.tmp"
  mkdir -p "$out/$dir-config.tmp/crds"
  cp "$src"/config/components/crd/bases/*.yaml "$out/$dir-config.tmp/crds/"
  cp "$src/config/components/webhook/manifests.yaml" "$out/$dir-config.tmp/webhooks.yaml"
  chmod -R u+w "$out/$dir-config.tmp"
  mv "$out/$dir-config.tmp" "$out/$dir-config"
}

# coscheduling_crd OUT: beside scheduler-plugins' scheduler, the PodGroup CRD of its module.
coscheduling_crd() {
  local src
  src="$(cd "$here/scheduler-plugins" && go list -m -f '{{.Dir}}' sigs.k8s.io/scheduler-plugins)"
  cp "$src/manifests/coscheduling/crd.yaml" "$1/coscheduling-crd.yaml.tmp"
  chmod u+w "$1/coscheduling-crd.yaml.tmp"
  mv "$1/coscheduling-crd.yaml.tmp" "$1/coscheduling-crd.yaml"
}

# volcano_config OUT: beside Volcano's binaries, its CRDs and its Helm chart.
volcano_config() {
  local src
  src="$(cd "$here/volcano" && go list -m -f '{{.Dir}}' volcano.sh/volcano)"
  rm -rf "$1/volcano-config.tmp"
  mkdir -p "$1/volcano-config.tmp/crds"
  cp "$src"/config/crd/volcano/bases/*.yaml "$src"/config/crd/jobflow/bases/*.yaml \
    "$1/volcano-config.tmp/crds/"
  cp -r "$src/installer/helm/chart/volcano" "$1/volcano-config.tmp/chart"
  chmod -R u+w "$1/volcano-config.tmp"
  mv "$1/volcano-config.tmp" "$1/volcano-config"
}

minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
kube_ld=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  kube_ld+=" -X $pkg.gitVersion=${K8S_VERSION} -X $pkg.gitMajor=1 -X $pkg.gitMinor=${minor}"
  kube_ld+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
# helm reports the Kubernetes version it was built against (its client-go) to offline templates.
helm_k8s="$(grep -E '^\s*k8s.io/client-go ' "$here/helm/go.mod" | awk '{print $2}')"
helm_minor="${helm_k8s#v0.}"; helm_minor="${helm_minor%%.*}"
helm_ld="-X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}"
helm_ld+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
  helm_ld+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=${helm_minor}"
done
kwok_ld="-X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v}"
kwok_ld+=" -X sigs.k8s.io/kwok/pkg/consts.KubeVersion=${K8S_VERSION#v}"
containerd_ld="-X github.com/containerd/containerd/v2/version.Version=${CONTAINERD_VERSION}"
cni_ld="-X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=${CNI_PLUGINS_VERSION}"

dirs=(
  "$(build etcd etcd "$ETCD_VERSION" "" "" etcd)"
  "$(build kwok kwok "$KWOK_VERSION" "$kwok_ld" "" kwok kwokctl)"
  "$(build helm helm "$HELM_VERSION" "$helm_ld" "" helm)"
  "$(build kubernetes kube "$K8S_VERSION" "$kube_ld" "selinux,notest" \
      kube-apiserver kube-controller-manager kube-proxy kube-scheduler kubectl kubelet)"
)
# `build.sh real-node` adds the real node's container runtime, CNI plugins and DNS (realnode.sh).
if [[ " $* " == *" real-node "* ]]; then
  dirs+=(
    "$(build containerd containerd "$CONTAINERD_VERSION" "$containerd_ld" \
        "urfave_cli_no_docs,no_btrfs,no_devmapper,no_zfs" containerd containerd-shim-runc-v2 ctr)"
    "$(build cni-plugins cni "$CNI_PLUGINS_VERSION" "$cni_ld" "" bridge host-local loopback)"
    "$(build pause pause v1 "" "" pause)"
    "$(build coredns coredns "$COREDNS_VERSION" "" "" coredns)"
    "$(build netpol netpol "$NETPOL_VERSION" "" "" netpol)"
    "$(CGO_ENABLED=1 build runc runc "$RUNC_VERSION" "" "seccomp,urfave_cli_no_docs" runc)"
  )
fi
# `build.sh kueue` adds Kueue's manager, and beside it (kueue-config/) the CRDs and webhook
# configurations of the same module version, that kueue.sh applies.
if [[ " $* " == *" kueue "* ]]; then
  kueue="$(build kueue kueue "$KUEUE_VERSION" \
      "-X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION" "" kueue)"
  beside kueue "$kueue/kueue-config" kubebuilder_config "$kueue" kueue sigs.k8s.io/kueue
  dirs+=("$kueue")
fi
# `build.sh scheduler-plugins` adds scheduler-plugins' scheduler (as scheduler-plugins) and beside
# it the PodGroup CRD of the same module version, that coscheduling.sh applies.
if [[ " $* " == *" scheduler-plugins "* ]]; then
  sp="$(build scheduler-plugins scheduler-plugins "$SCHEDULER_PLUGINS_VERSION" \
      "-X k8s.io/component-base/version.gitVersion=$SCHEDULER_PLUGINS_K8S_VERSION" "" \
      scheduler-plugins=scheduler)"
  beside scheduler-plugins "$sp/coscheduling-crd.yaml" coscheduling_crd "$sp"
  dirs+=("$sp")
fi
# `build.sh volcano` adds Volcano's three binaries and beside them (volcano-config/) its CRDs and
# its Helm chart (its scheduler's configuration, its webhook configurations), of the same module
# version, that volcano.sh uses.
if [[ " $* " == *" volcano "* ]]; then
  vc="$(build volcano volcano "$VOLCANO_VERSION" \
      "-X volcano.sh/volcano/pkg/version.Version=$VOLCANO_VERSION" "" \
      vc-scheduler=scheduler vc-controller-manager=controller-manager \
      vc-webhook-manager=webhook-manager)"
  beside volcano "$vc/volcano-config" volcano_config "$vc"
  dirs+=("$vc")
fi
# `build.sh jobset` adds JobSet's controller manager and beside it (jobset-config/) its CRD and
# webhook configurations, of the same module version, that jobset.sh applies.
if [[ " $* " == *" jobset "* ]]; then
  js="$(build jobset jobset "$JOBSET_VERSION" \
      "-X sigs.k8s.io/jobset/pkg/version.GitVersion=$JOBSET_VERSION" "" jobset)"
  beside jobset "$js/jobset-config" kubebuilder_config "$js" jobset sigs.k8s.io/jobset
  dirs+=("$js")
fi
# `build.sh registry` adds distribution's registry (hack/cluster/registry.sh).
if [[ " $* " == *" registry "* ]]; then
  dirs+=("$(build registry registry "$REGISTRY_VERSION" \
      "-X github.com/distribution/distribution/v3/version.version=$REGISTRY_VERSION" "" registry)")
fi
# A build that failed left its place empty (a command substitution's status is lost in an array):
# stop here, before a bin directory without it is made and kept.
for d in "${dirs[@]}"; do
  [[ -n "$d" && -d "$d" ]] || { log "a build failed (its output is above)"; exit 1; }
done
bin="$root/bin-$(printf '%s\n' "${dirs[@]}" | sha256sum | cut -c1-12)"
if [[ ! -d "$bin" ]]; then
  # A directory of its own: two builds at once (make demo beside make test) each make one, and
  # the first to finish names it (mv -T fails on the other's: that one is dropped).
  tmp="$(mktemp -d "$bin.tmp.XXXXXX")"
  for d in "${dirs[@]}"; do ln -sfn "$d"/* "$tmp/"; done
  mv -T "$tmp" "$bin" 2>/dev/null || rm -rf "$tmp"
fi
echo "$bin"
