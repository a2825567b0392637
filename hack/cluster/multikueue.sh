#!/usr/bin/env bash
# Two clusters for MultiKueue (`make multikueue-up`): `multikueue.sh up|down|status`.
# up:     the local cluster is the manager (cluster.sh up first); brings up a second one, the
#         worker (DDP_CLUSTER=worker cluster.sh up: its own etcd, API server, controller manager,
#         scheduler and kwok nodes, no real node), Kueue on both (kueue.sh), the DDPJob CRD on
#         both, and on the manager MultiKueue's objects: a Secret with the worker's kubeconfig,
#         MultiKueueCluster `worker`, MultiKueueConfig `ddp-multikueue` and AdmissionCheck
#         `ddp-multikueue`. A ClusterQueue on the manager that lists that check sends its jobs
#         (spec.managedBy kueue.x-k8s.io/multikueue) to the worker; the worker needs the same
#         namespace and LocalQueue name, and an operator of its own. Returns once MultiKueue
#         says it is connected to the worker. Run twice, it restarts nothing.
# down:   the worker cluster and its Kueue down (cluster.sh down of the manager does it too).
# status: whether MultiKueue is connected to the worker.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
manager="$root/.cluster/kubeconfig"
worker="$root/.cluster/peers/worker/kubeconfig"
log() { echo "[multikueue $(date +%H:%M:%S)] $*" >&2; }
die() { log "$*"; exit 1; }
on() { local config="$1"; shift; "$root/.cluster/bin/kubectl" --kubeconfig "$config" "$@"; }
kubectl_() { on "$kubeconfig" "$@"; }  # (daemon.sh's crds_established: on $kubeconfig)
# shellcheck source=hack/cluster/daemon.sh
source "$here/daemon.sh"

up() {
  [[ -f "$manager" ]] || die "no local cluster: hack/cluster/cluster.sh up first"
  DDP_CLUSTER=worker "$here/cluster.sh" up
  "$here/kueue.sh" up
  DDP_CLUSTER=worker "$here/kueue.sh" up
  local kubeconfig crd="$root/crds/ddpjobs.ddp-operator.io.yaml"
  for kubeconfig in "$manager" "$worker"; do
    kubectl_ apply --server-side --force-conflicts -f "$crd" >/dev/null
    crds_established "$crd"
  done
  # MultiKueue takes only a kubeconfig with its credentials inline (no file paths).
  on "$worker" config view --raw --flatten --minify >"$root/.cluster/peers/worker/kubeconfig.inline"
  on "$manager" -n kueue-system create secret generic ddp-worker-kubeconfig \
    --from-file=kubeconfig="$root/.cluster/peers/worker/kubeconfig.inline" \
    --dry-run=client -o yaml | on "$manager" apply --server-side --force-conflicts -f - >/dev/null
  on "$manager" apply --server-side --force-conflicts -f - >/dev/null <<'YAML'
apiVersion: kueue.x-k8s.io/v1beta2
kind: MultiKueueCluster
metadata: {name: worker}
spec:
  clusterSource:
    kubeConfig: {locationType: Secret, location: ddp-worker-kubeconfig}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: MultiKueueConfig
metadata: {name: ddp-multikueue}
spec: {clusters: [worker]}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: AdmissionCheck
metadata: {name: ddp-multikueue}
spec:
  controllerName: kueue.x-k8s.io/multikueue
  parameters: {apiGroup: kueue.x-k8s.io, kind: MultiKueueConfig, name: ddp-multikueue}
YAML
  on "$manager" wait --for=condition=Active --timeout=60s multikueuecluster/worker >/dev/null ||
    die "MultiKueue did not connect to the worker: $root/.cluster/kueue/kueue.log"
  log "MultiKueue is up: manager $manager, worker $worker"
}

down() {
  if [[ -f "$manager" ]]; then
    on "$manager" delete multikueuecluster worker --ignore-not-found >/dev/null 2>&1 || true
  fi
  DDP_CLUSTER=worker "$here/cluster.sh" down
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) on "$manager" get multikueuecluster worker ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
