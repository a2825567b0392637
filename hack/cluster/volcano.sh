#!/usr/bin/env bash
# Volcano on the local cluster (cluster.sh up first): `volcano.sh up|down|status`.
# up:     builds (or finds cached) Volcano's scheduler, controller manager and webhook manager
#         from its pinned Go module (build.sh volcano), applies its CRDs and runs the three as
#         processes on this machine, as its Helm chart configures them (the scheduler's default
#         configuration; scheduler name volcano), without leader election, every port on
#         loopback. Admission: the webhooks for PodGroups and Queues (the chart's own webhook
#         configurations, rendered with helm, called at https://127.0.0.1:<port> with a
#         certificate made here); not the pod webhooks, which would see every pod of the cluster.
#         Returns once the three answer on their health ports and the webhook configurations
#         are in place.
# down:   stops them and removes the webhook configurations (the CRDs and objects stay).
# status: says whether they run.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
state="$root/.cluster/volcano"
kubeconfig="$root/.cluster/kubeconfig"
# Ports: per checkout, beside kueue.sh's and coscheduling.sh's (10000..19999).
base=$((10000 + 0x$(printf '%s' "$root" | sha256sum | cut -c9-16) % 1000 * 10))
webhook_port=$((base + 2))
admissions="/podgroups/mutate,/queues/mutate,/queues/validate"
components=(vc-webhook-manager vc-controller-manager vc-scheduler)
declare -A health=([vc-webhook-manager]=$((base + 3)) [vc-controller-manager]=$((base + 4))
  [vc-scheduler]=$((base + 5)))

log() { echo "[volcano $(date +%H:%M:%S)] $*" >&2; }
die() { log "$*"; exit 1; }
kubectl_() { "$bin/kubectl" --kubeconfig "$kubeconfig" "$@"; }
# shellcheck source=hack/cluster/daemon.sh
source "$here/daemon.sh"

# The chart's webhook configurations for $admissions, pointed at this machine. The webhook
# manager waits for them by name, and only fills in their caBundle.
webhooks() {
  "$bin/helm" template volcano "$bin/volcano-config/chart" --namespace volcano-system \
    --set "custom.enabled_admissions=${admissions//,/\\,}" --show-only templates/webhooks.yaml |
    kubectl_ create --dry-run=client -o json -f - |
    python3 "$here/webhooks.py" --url "https://127.0.0.1:$webhook_port" \
      --ca "$(base64 -w0 "$state/certs/tls.crt")"
}

# start NAME ARGS...: runs one component unless it runs, its log in $state.
start() {
  local name=$1; shift
  if ! alive "$state/$name.pid"; then
    setsid "$bin/$name" --kubeconfig "$kubeconfig" --enable-healthz \
      --healthz-address="127.0.0.1:${health[$name]}" "$@" >>"$state/$name.log" 2>&1 </dev/null &
    echo $! >"$state/$name.pid"
  fi
}

up() {
  bin="$("$here/build.sh" volcano)"
  mkdir -p "$state"
  local crds="$bin/volcano-config/crds"
  kubectl_ apply --server-side --force-conflicts -f "$crds" >/dev/null
  crds_established "$crds"
  kubectl_ create namespace volcano-system --dry-run=client -o yaml | kubectl_ apply -f - >/dev/null
  self_signed "$state/certs" ddp-volcano-webhook
  webhooks | kubectl_ apply --server-side --force-conflicts -f - >/dev/null
  log "starting Volcano $VOLCANO_VERSION (webhooks on 127.0.0.1:$webhook_port)"
  start vc-webhook-manager --enabled-admission="$admissions" \
    --listen-address=127.0.0.1 --port="$webhook_port" --webhook-url="https://127.0.0.1:$webhook_port" \
    --ca-cert-file="$state/certs/tls.crt" --tls-cert-file="$state/certs/tls.crt" \
    --tls-private-key-file="$state/certs/tls.key"
  start vc-controller-manager --leader-elect=false --listen-address="127.0.0.1:$((base + 6))"
  start vc-scheduler --leader-elect=false --listen-address="127.0.0.1:$((base + 7))" \
    --scheduler-conf="$bin/volcano-config/chart/config/volcano-scheduler.conf"
  local t0=$SECONDS c
  for c in "${components[@]}"; do
    # (the webhook manager serves its health over TLS, with its webhook certificate)
    until curl -sf -o /dev/null "http://127.0.0.1:${health[$c]}/healthz" ||
      curl -sfk -o /dev/null "https://127.0.0.1:${health[$c]}/healthz"; do
      alive "$state/$c.pid" || die "$c exited: $state/$c.log"
      ((SECONDS - t0 < 90)) || die "$c is not healthy after 90 s: $state/$c.log"
      sleep 0.2
    done
  done
  until curl -sk -o /dev/null "https://127.0.0.1:$webhook_port/"; do
    ((SECONDS - t0 < 90)) || die "Volcano's webhook did not answer: $state/vc-webhook-manager.log"
    sleep 0.2
  done
  log "Volcano is up: $state/*.log"
}

down() {
  bin="$("$here/build.sh" volcano)"
  local c
  for c in "${components[@]}"; do stop "$state/$c.pid"; done
  if [[ -f "$kubeconfig" ]]; then
    local kind name
    for kind in mutatingwebhookconfiguration validatingwebhookconfiguration; do
      for name in $(kubectl_ get "$kind" -o name | grep volcano-admission-service- || true); do
        kubectl_ delete "$name" --ignore-not-found >/dev/null || true
      done
    done
  fi
  log "Volcano is down"
}

# shellcheck source=hack/cluster/versions.env
source "$here/versions.env"
case "${1:-}" in
  up) up ;;
  down) down ;;
  status)
    for c in "${components[@]}"; do
      if alive "$state/$c.pid"; then echo "$c runs (pid $(<"$state/$c.pid"))"; else echo "$c is down"; exit 1; fi
    done
    ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
