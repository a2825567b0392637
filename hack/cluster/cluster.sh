#!/usr/bin/env bash
# The local control plane: `cluster.sh up|down|status`.
# up:     builds (or reuses) the pinned binaries, starts (or reuses) a kwok binary-runtime cluster
#         (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok controller as local
#         processes, client throttles lifted), registers the fake nodes and pod stages, writes
#         .cluster/kubeconfig and links kubectl, helm and kwokctl into .cluster/bin/.
# down:   stops and deletes the cluster; no process of it is left running.
# status: says whether it runs, and lists its nodes.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
state="$root/.cluster"
# One cluster per checkout: the name is derived from the checkout's path.
name="ddp-$(printf '%s' "$root" | sha256sum | cut -c1-8)"
kubeconfig="$state/kubeconfig"
export KWOK_WORKDIR="$state/kwok"
# Ports of its own too (10 from 20000..29999, below the ephemeral range): kwokctl would pick free
# ones at creation, so clusters of two checkouts created at once could pick the same ports, and
# another checkout's new cluster could take the ports of one that is stopped.
port0=$((20000 + 0x$(printf '%s' "$root" | sha256sum | cut -c9-16) % 1000 * 10))

log() { echo "[cluster $(date +%H:%M:%S)] $*" >&2; }

link_tools() {
  local bin
  bin="$("$here/build.sh")"
  mkdir -p "$state/bin"
  for b in kubectl helm kwokctl kwok etcd kube-apiserver kube-controller-manager kube-scheduler; do
    ln -sfn "$bin/$b" "$state/bin/$b"
  done
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

up() {
  local t0=$SECONDS
  link_tools
  if healthy; then
    log "cluster $name already running"
  else
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
        --runtime binary \
        --config "$state/kwokctl.yaml" \
        --config "$here/manifests/stages.yaml" \
        --config "$state/logs.yaml" \
        --kubeconfig "$kubeconfig" \
        --wait 5m >&2
    fi
  fi
  kubectl_ apply -f "$here/manifests/nodes.yaml" >/dev/null
  kubectl_ wait --for=condition=Ready node --all --timeout=120s >/dev/null
  log "ready in $((SECONDS - t0))s: kubeconfig $kubeconfig"
}

down() {
  if [[ -x "$state/bin/kwokctl" && -d "$KWOK_WORKDIR/clusters/$name" ]]; then
    "$state/bin/kwokctl" --name "$name" delete cluster >&2
  fi
  rm -f "$kubeconfig"
  # kwokctl stops what it started; make sure nothing of this cluster survives a crash either.
  pkill -f -- "$KWOK_WORKDIR/clusters/$name" 2>/dev/null || true
  log "cluster $name is down"
}

status() {
  if [[ -x "$state/bin/kubectl" ]] && healthy; then
    echo "cluster $name: running; kubeconfig $kubeconfig"
    kubectl_ get nodes -L ddp-operator.io/accelerator \
      -o custom-columns='NAME:.metadata.name,STATUS:.status.conditions[?(@.type=="Ready")].status,GPU:.status.allocatable.nvidia\.com/gpu,ASCEND910:.status.allocatable.huawei\.com/Ascend910,CPU:.status.allocatable.cpu'
  else
    echo "cluster $name: not running"
    return 1
  fi
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  kubeconfig) echo "$kubeconfig" ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
