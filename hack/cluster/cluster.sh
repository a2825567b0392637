#!/usr/bin/env bash
# The local control plane: `cluster.sh build|up|down|stop|start|status`.
# build:  builds (or finds cached) every binary and image `up` needs, the images while the binaries
#         compile, starting nothing (make test runs it before the tests, so that a cold build is
#         not inside a test's time limit).
# up:     builds (or reuses) the pinned binaries and the images first (build, below: no wait of
#         up counts a build), starts (or reuses) a kwok binary-runtime cluster
#         (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok controller as local
#         processes, client throttles lifted), registers the fake nodes and pod stages, writes
#         .cluster/kubeconfig and links kubectl, helm, kwokctl and kubectl-ddp (from .venv)
#         into .cluster/bin/. Then the
#         real nodes (hack/cluster/realnode.sh up, up 1: each a kubelet and containerd, real
#         containers; real-node-1 in a network namespace of its own) with the images built here
#         (realnode.sh image, trainer, operator) imported. DDP_REAL_NODES=1 leaves out the second,
#         DDP_REAL_NODE=0 both (a control plane with fake nodes only; no root needed). A failed up
#         takes down the control plane if it started it. Run twice, it restarts nothing.
# down:   stops and deletes the cluster (and the real node, hack/cluster/realnode.sh, if up); no
#         process of it is left running.
# stop:   kills every process of the cluster (SIGKILL, as kwokctl stop does: etcd, kube-apiserver,
#         controller manager, scheduler and kwok) and keeps its state (etcd's data, certificates,
#         ports, kubeconfig): a crash of the whole control plane.
# start:  starts a stopped cluster again; returns once /readyz answers and every node is Ready
#         (but a node a test silenced, see tests/harness/faults.py), with the real nodes'
#         daemons that read the API restarted (realnode.sh resync).
# status: says whether it runs, and lists its nodes.
# DDP_AUDIT=<audit policy file> at creation turns on the API server's audit log (in the cluster's
# logs directory): it tells who deleted or created what, e.g. a fake kubelet acting late.
# DDP_CLUSTER=<name> acts on a second cluster of the checkout instead (`make cluster-up-worker`:
# MultiKueue's worker cluster): its own etcd, API server, controller manager, scheduler and kwok
# nodes from the same binaries, its state in .cluster/peers/<name>, its own ports, no real node
# (one per machine). `down` of the main cluster takes its peers down too.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
peer="${DDP_CLUSTER:-}"
[[ "$peer" =~ ^[a-z0-9]*$ ]] || { echo "DDP_CLUSTER: lowercase letters and digits only" >&2; exit 2; }
state="$root/.cluster${peer:+/peers/$peer}"
# One cluster per checkout (and peer): the name is derived from the checkout's path.
name="ddp-$(printf '%s' "$root" | sha256sum | cut -c1-8)${peer:+-$peer}"
kubeconfig="$state/kubeconfig"
export KWOK_WORKDIR="$state/kwok"
# Ports of its own too (10 from 20000..29999, below the ephemeral range): kwokctl would pick free
# ones at creation, so clusters of two checkouts created at once could pick the same ports, and
# another checkout's new cluster could take the ports of one that is stopped.
# A peer's are 5000 further on, in the same range.
port0=$((20000 + 0x$(printf '%s' "$root" | sha256sum | cut -c9-16) % 1000 * 10))
if [[ -n "$peer" ]]; then
  port0=$((20000 + (port0 - 20000 + 5000 + 0x$(printf '%s' "$peer" | sha256sum | cut -c1-4) % 50 * 10) % 10000))
  export DDP_REAL_NODE=0
fi

log() { echo "[cluster $(date +%H:%M:%S)] $*" >&2; }
die() { log "$*"; exit 1; }
# shellcheck source=hack/cluster/fds.sh
source "$here/fds.sh"
# What this script starts (kwokctl and the control plane it starts) holds none of its caller's
# open files.
close_inherited_fds

link_tools() {
  local bin
  bin="$("$here/build.sh")"
  mkdir -p "$state/bin"
  for b in kubectl helm kwokctl kwok etcd kube-apiserver kube-controller-manager kube-scheduler; do
    ln -sfn "$bin/$b" "$state/bin/$b"
  done
  # `kubectl ddp` (the project's plugin, in its .venv) on the same PATH.
  if [[ -x "$root/.venv/bin/kubectl-ddp" ]]; then
    ln -sfn "$root/.venv/bin/kubectl-ddp" "$state/bin/kubectl-ddp"
  fi
  export KWOK_KUBE_APISERVER_BINARY="$bin/kube-apiserver"
  export KWOK_KUBE_CONTROLLER_MANAGER_BINARY="$bin/kube-controller-manager"
  export KWOK_KUBE_SCHEDULER_BINARY="$bin/kube-scheduler"
  export KWOK_KUBECTL_BINARY="$bin/kubectl"
  export KWOK_CONTROLLER_BINARY="$bin/kwok"
  export KWOK_ETCD_BINARY="$bin/etcd"
  # shellcheck source=hack/cluster/versions.env
  source "$here/versions.env"
  export KWOK_KUBE_VERSION="$K8S_VERSION" KWOK_ETCD_VERSION="${ETCD_VERSION#v}"
}

kubectl_() { "$state/bin/kubectl" --kubeconfig "$kubeconfig" "$@"; }

healthy() {
  [[ -f "$kubeconfig" ]] && kubectl_ get --raw /readyz >/dev/null 2>&1
}

# Every component runs: the controller manager and the scheduler exit if the API server is not
# healthy within 10 s of their start, which a slow (CPU-starved) machine can miss; kwokctl
# start cluster starts again only the components that are not running.
all_running() {
  local f tries=0 dead
  while :; do
    dead=""
    for f in "$KWOK_WORKDIR/clusters/$name"/pids/*.pid; do
      alive "$(<"$f")" || dead+=" $(basename "$f" .pid)"
    done
    [[ -z "$dead" ]] && return 0
    ((++tries <= 3)) || { log "exited again:$dead (logs: $KWOK_WORKDIR/clusters/$name/logs)"; return 1; }
    log "exited:$dead; starting again"
    "$state/bin/kwokctl" --name "$name" start cluster >&2
    sleep 12  # past their 10 s wait for a healthy API server
  done
}

# fake_nodes: the fake nodes of manifests/nodes.yaml that are missing (all, on a new cluster) are
# created and awaited. The others are left as they are (created, not applied: AlreadyExists), and
# other nodes are not awaited: on a cluster already running, tests hold a fake node NotReady or
# taint it (applying the file again would undo that: a Node's taints are one list), and add and
# remove nodes of their own (a benchmark's, a test's pool) that may be gone before a wait for
# every node reads them.
fake_nodes() {
  local file="$here/manifests/nodes.yaml" present n err missing=()
  present="$(kubectl_ get -f "$file" --ignore-not-found -o name)" || die "cannot read the fake nodes"
  for n in $(kubectl_ create --dry-run=client -f "$file" -o name); do
    grep -qxF "$n" <<<"$present" || missing+=("$n")
  done
  [[ ${#missing[@]} -gt 0 ]] || return 0
  err="$(kubectl_ create --save-config -f "$file" 2>&1 >/dev/null | grep -v '(AlreadyExists)' || true)"
  [[ -z "$err" ]] || die "creating the fake nodes: $err"
  kubectl_ wait --for=condition=Ready "${missing[@]}" --timeout=120s >/dev/null ||
    die "the fake nodes ${missing[*]} are not Ready"
}

# When up fails: the control plane goes down again if this up started it (the real node stops
# what it started itself: realnode.sh).
up_failed() {
  if [[ -n "${up_started:-}" ]]; then
    log "up failed: taking down the cluster it started"
    down || true
  fi
}

up() {
  # The builds first (nothing is started yet), so that no wait below counts them.
  build
  local t0=$SECONDS
  up_started=""
  trap up_failed EXIT
  if healthy; then
    log "cluster $name already running"
  else
    up_started=1
    if [[ -d "$KWOK_WORKDIR/clusters/$name" ]]; then
      log "restarting stopped cluster $name"
      "$state/bin/kwokctl" --name "$name" start cluster >&2 || {
        log "restart failed; recreating"
        "$state/bin/kwokctl" --name "$name" delete cluster >&2 || true
      }
    fi
    if ! healthy; then
      log "creating cluster $name (kube ${KWOK_KUBE_VERSION}, etcd ${KWOK_ETCD_VERSION})"
      # Every pod's container log is the file .cluster/pod-logs/containers.log (tests write it).
      mkdir -p "$state/pod-logs" && touch "$state/pod-logs/containers.log"
      sed "s|@LOGS_FILE@|$state/pod-logs/containers.log|" "$here/manifests/logs.yaml" >"$state/logs.yaml"
      sed "/^options:/a\\
  kubeApiserverPort: $port0\\
  etcdPort: $((port0 + 1))\\
  etcdPeerPort: $((port0 + 2))\\
  kubeControllerManagerPort: $((port0 + 3))\\
  kubeSchedulerPort: $((port0 + 4))\\
  kwokControllerPort: $((port0 + 5))" "$here/kwokctl.yaml" >"$state/kwokctl.yaml"
      "$state/bin/kwokctl" --name "$name" create cluster \
        --runtime binary ${DDP_AUDIT:+--kube-audit-policy "$DDP_AUDIT"} \
        --config "$state/kwokctl.yaml" \
        --config "$here/manifests/stages.yaml" \
        --config "$state/logs.yaml" \
        --kubeconfig "$kubeconfig" \
        --wait 5m >&2
    fi
  fi
  all_running || die "the control plane does not stay up"
  fake_nodes
  if [[ "${DDP_REAL_NODE:-1}" == 1 ]]; then
    "$here/realnode.sh" up || die "the real node did not come up (DDP_REAL_NODE=0 leaves it out)"
    if ((${DDP_REAL_NODES:-2} > 1)); then
      "$here/realnode.sh" up 1 || die "real-node-1 did not come up (DDP_REAL_NODES=1 leaves it out)"
    fi
    local image
    for image in image trainer operator; do
      "$here/realnode.sh" "$image" >/dev/null || die "realnode.sh $image failed"
    done
  fi
  trap - EXIT
  log "ready in $((SECONDS - t0))s: kubeconfig $kubeconfig"
}

down() {
  local p
  if [[ -z "$peer" ]]; then
    for p in "$state"/peers/*/; do
      [[ -d "$p" ]] && { DDP_CLUSTER="$(basename "$p")" "$here/cluster.sh" down || log "peer $p: down failed"; }
    done
  fi
  # The real node first, while the API server can still take its pods and Node away.
  if [[ -d "$state/realnode" || -d "$state/realnode-1" ]]; then
    "$here/realnode.sh" down || log "realnode.sh down failed"
  fi
  if [[ -f "$state/kueue/kueue.pid" ]]; then "$here/kueue.sh" down || log "kueue.sh down failed"; fi
  if [[ -f "$state/coscheduling/scheduler.pid" ]]; then
    "$here/coscheduling.sh" down || log "coscheduling.sh down failed"
  fi
  if compgen -G "$state/volcano/*.pid" >/dev/null; then
    "$here/volcano.sh" down || log "volcano.sh down failed"
  fi
  if [[ -f "$state/jobset/jobset.pid" ]]; then "$here/jobset.sh" down || log "jobset.sh down failed"; fi
  if [[ -d "$state/registry" ]]; then "$here/registry.sh" down || log "registry.sh down failed"; fi
  if [[ -x "$state/bin/kwokctl" && -d "$KWOK_WORKDIR/clusters/$name" ]]; then
    "$state/bin/kwokctl" --name "$name" delete cluster >&2
  fi
  rm -f "$kubeconfig"
  if [[ -n "$peer" ]]; then rm -rf "$state"; fi
  # kwokctl stops what it started; make sure nothing of this cluster survives a crash either.
  pkill -f -- "$KWOK_WORKDIR/clusters/$name" 2>/dev/null || true
  log "cluster $name is down"
}

exists() { [[ -x "$state/bin/kwokctl" && -d "$KWOK_WORKDIR/clusters/$name" ]]; }

build() {
  local t0=$SECONDS image images=""
  log "building the local cluster's binaries and images, or taking them from" \
    "${DDP_CACHE_DIR:-$HOME/.cache/ddp-operator} (a cold build took 20 minutes on 2 cores, 2026-11-27)"
  if [[ "${DDP_REAL_NODE:-1}" == 1 ]]; then
    # The images (downloads, then single-threaded work at nice 10) need none of the Go binaries:
    # on a cold machine they build while the binaries compile (measured: the base image's 9 min
    # ran entirely beside them; the Go builds slowed from ~24 to ~28 min).
    (for image in base trainer operator; do
      "$here/image.sh" "$image" >/dev/null || exit 1
    done) &
    images=$!
  fi
  link_tools
  if [[ -n "$images" ]]; then
    if ! "$here/build.sh" real-node >/dev/null; then
      # The images' builds go too: a failed `make test` leaves nothing running behind it.
      pkill -TERM -P "$images" 2>/dev/null || true
      kill "$images" 2>/dev/null || true
      die "the real node's binaries did not build"
    fi
    wait "$images" || die "an image did not build (image.sh's log above)"
    for image in image trainer operator; do
      "$here/realnode.sh" "$image" >/dev/null || die "realnode.sh $image failed"
    done
  fi
  log "binaries and images ready in $((SECONDS - t0))s"
}

alive() { [[ -e /proc/$1 && "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]]; }

stop() {
  exists || { log "cluster $name does not exist"; return 1; }
  link_tools
  local f pids=() pid t0=$SECONDS
  for f in "$KWOK_WORKDIR/clusters/$name"/pids/*.pid; do
    [[ -f "$f" ]] && pids+=("$(<"$f")")
  done
  # SIGKILL, not waiting (etcd's WAL keeps every acknowledged write); the pid files go.
  "$state/bin/kwokctl" --name "$name" stop cluster >&2
  for pid in "${pids[@]}"; do
    while alive "$pid"; do
      if ((SECONDS - t0 > 10)); then log "process $pid still running after 10s"; return 1; fi
      sleep 0.1
    done
  done
  log "cluster $name is stopped (state kept)"
}

start() {
  exists || { log "cluster $name does not exist"; return 1; }
  local t0=$SECONDS since
  since="$(date -u +%Y-%m-%dT%H:%M:%S)"
  link_tools
  "$state/bin/kwokctl" --name "$name" start cluster >&2
  until healthy; do
    if ((SECONDS - t0 > 120)); then log "no /readyz after 120s"; return 1; fi
    sleep 0.2
  done
  # Past the components' own 10 s wait for a healthy API server: whether they stayed up.
  ((SECONDS - t0 >= 11)) || sleep $((11 - (SECONDS - t0)))
  all_running || return 1
  # kwok is back under a new identity: let it take every node's Lease now rather than when the
  # old one expires (up to 20 s: the node lifecycle controller could mark the node Unknown).
  # Not the Leases a test holds (tests/harness/faults.py) nor those kwok renewed already.
  local lease
  kubectl_ get lease -n kube-node-lease -o \
    jsonpath='{range .items[*]}{.metadata.name} {.spec.holderIdentity} {.spec.renewTime}{"\n"}{end}' |
    awk -v since="$since" '$2 != "ddp-operator.io/test-silenced" && $3 < since { print $1 }' |
    while read -r lease; do
      kubectl_ patch lease -n kube-node-lease "$lease" --type=merge \
        -p '{"spec":{"leaseDurationSeconds":1}}' >/dev/null
    done
  # Every node but those a test silenced (tests/harness/faults.py marks them).
  local -a nodes
  mapfile -t nodes < <(kubectl_ get nodes -o \
    jsonpath='{range .items[*]}node/{.metadata.name} {.metadata.annotations.ddp-operator\.io/test-silenced}{"\n"}{end}' |
    awk 'NF == 1 { print $1 }')
  ((${#nodes[@]} == 0)) || kubectl_ wait --for=condition=Ready "${nodes[@]}" --timeout=120s >/dev/null
  # Likewise the real nodes' kubelets, CoreDNS, kube-proxy and netpol, whose watches back off
  # meanwhile.
  if [[ -d "$state/realnode" ]]; then "$here/realnode.sh" resync || return 1; fi
  if [[ -d "$state/realnode-1" ]]; then "$here/realnode.sh" resync 1 || return 1; fi
  log "cluster $name is started in $((SECONDS - t0))s"
}

status() {
  if [[ -x "$state/bin/kubectl" ]] && healthy; then
    echo "cluster $name: running; kubeconfig $kubeconfig"
    if [[ -d "$state/realnode" ]]; then echo "real-node-0: $("$here/realnode.sh" status | head -n 1)"; fi
    if [[ -d "$state/realnode-1" ]]; then echo "real-node-1: $("$here/realnode.sh" status 1 | head -n 1)"; fi
    kubectl_ get nodes -L ddp-operator.io/accelerator \
      -o custom-columns='NAME:.metadata.name,STATUS:.status.conditions[?(@.type=="Ready")].status,GPU:.status.allocatable.nvidia\.com/gpu,ASCEND910:.status.allocatable.huawei\.com/Ascend910,CPU:.status.allocatable.cpu'
  else
    echo "cluster $name: not running"
    return 1
  fi
}

case "${1:-}" in
  build) build ;;
  up) up ;;
  down) down ;;
  stop) stop ;;
  start) start ;;
  status) status ;;
  kubeconfig) echo "$kubeconfig" ;;
  *) echo "usage: $0 build|up|down|stop|start|status|kubeconfig" >&2; exit 2 ;;
esac
