#!/usr/bin/env bash
# scheduler-plugins' Coscheduling on the local cluster (cluster.sh up first):
# `coscheduling.sh up|down|status`.
# up:     builds (or finds cached) scheduler-plugins' scheduler from its pinned Go module
#         (build.sh scheduler-plugins), applies its PodGroup CRD (scheduling.x-k8s.io/v1alpha1)
#         and runs it as a second scheduler, named scheduler-plugins-scheduler (the name a DDPJob
#         with gangScheduling.scheduler Coscheduling sends its pods to), with the Coscheduling
#         plugin, as a process on this machine: no leader election, its health port on loopback.
#         Returns once the CRD is served and the scheduler is ready (its /readyz: informers
#         synced).
# down:   stops the scheduler (the CRD and PodGroups stay).
# status: says whether it runs.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
state="$root/.cluster/coscheduling"
kubeconfig="$root/.cluster/kubeconfig"
name=scheduler-plugins-scheduler
# Its health port: per checkout, next to kueue.sh's webhook port (10000..19999).
port=$((10001 + 0x$(printf '%s' "$root" | sha256sum | cut -c9-16) % 1000 * 10))

log() { echo "[coscheduling $(date +%H:%M:%S)] $*" >&2; }
die() { log "$*"; exit 1; }
kubectl_() { "$bin/kubectl" --kubeconfig "$kubeconfig" "$@"; }
pidfile="$state/scheduler.pid"
# shellcheck source=hack/cluster/daemon.sh
source "$here/daemon.sh"

# The scheduler's settings: one profile, Coscheduling's queue sort and its gang plugins. A pod
# Coscheduling turned away is retried only on a PodGroup change (which scheduler-plugins'
# controller, not run here, makes when pods end) or after --pod-max-in-unschedulable-pods-duration
# (5 min by default, 5 s here): so a gang waiting for another job's nodes starts within seconds.
# permitWaitingTimeSeconds: how long the placed members of an incomplete gang hold their nodes.
config() {
  cat >"$state/config.yaml" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: false
clientConnection:
  kubeconfig: $kubeconfig
profiles:
- schedulerName: $name
  plugins:
    multiPoint:
      enabled:
      - name: Coscheduling
    queueSort:
      enabled:
      - name: Coscheduling
      disabled:
      - name: "*"
  pluginConfig:
  - name: Coscheduling
    args:
      permitWaitingTimeSeconds: 10
EOF
}

up() {
  bin="$("$here/build.sh" scheduler-plugins)"
  mkdir -p "$state"
  kubectl_ apply --server-side --force-conflicts -f "$bin/coscheduling-crd.yaml" >/dev/null
  crds_established "$bin/coscheduling-crd.yaml"
  config
  if ! alive "$pidfile"; then
    log "starting scheduler-plugins $SCHEDULER_PLUGINS_VERSION as $name"
    : >"$state/scheduler.log"
    setsid "$bin/scheduler-plugins" --config "$state/config.yaml" \
      --bind-address=127.0.0.1 --secure-port="$port" --pod-max-in-unschedulable-pods-duration=5s \
      >>"$state/scheduler.log" 2>&1 </dev/null &
    echo $! >"$pidfile"
  fi
  local t0=$SECONDS
  until curl -sfk -o /dev/null "https://127.0.0.1:$port/readyz"; do
    alive "$pidfile" || die "scheduler-plugins exited: $state/scheduler.log"
    ((SECONDS - t0 < 60)) || die "scheduler-plugins was not ready in 60 s: $state/scheduler.log"
    sleep 0.2
  done
  log "scheduler-plugins is up: $state/scheduler.log"
}

down() {
  stop "$pidfile"
  log "scheduler-plugins is down"
}

# shellcheck source=hack/cluster/versions.env
source "$here/versions.env"
case "${1:-}" in
  up) up ;;
  down) down ;;
  status) if alive "$pidfile"; then echo "scheduler-plugins runs (pid $(<"$pidfile"))"; else echo "scheduler-plugins is down"; exit 1; fi ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
