#!/usr/bin/env bash
# Kueue on the local cluster (cluster.sh up first): `kueue.sh up|down|status`.
# up:     builds (or finds cached) Kueue's manager from its pinned Go module (build.sh kueue),
#         applies its CRDs and runs the manager as a process on this machine, with the plain-pod
#         integration only. The API server calls its webhooks at https://127.0.0.1:<port>, with a
#         certificate made here (openssl) as their caBundle; the pod webhook sees only pods that
#         name a LocalQueue (kueue.x-k8s.io/queue-name), so that Kueue being down never stops any
#         other pod. Returns once the webhook answers and the CRDs are served.
#         MultiKueue knows DDPJobs (multiKueue.externalFrameworks): a manager cluster's Kueue sends
#         a DDPJob whose spec.managedBy is kueue.x-k8s.io/multikueue to a worker cluster.
# down:   stops the manager and removes its webhook configurations (its CRDs and objects stay).
# status: says whether it runs.
# DDP_CLUSTER=<name>: Kueue on that peer cluster of the checkout (cluster.sh), its own process,
# state and port.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
peer="${DDP_CLUSTER:-}"
cluster_state="$root/.cluster${peer:+/peers/$peer}"
state="$cluster_state/kueue"
kubeconfig="$cluster_state/kubeconfig"
# The webhook's port: per checkout, as cluster.sh's ports, in 10000..19999 (cluster.sh and the
# real node take 20000..29999); a peer's, 5000 further on.
port=$((10000 + 0x$(printf '%s' "$root" | sha256sum | cut -c9-16) % 1000 * 10))
if [[ -n "$peer" ]]; then
  port=$((10000 + (port - 10000 + 5000 + 0x$(printf '%s' "$peer" | sha256sum | cut -c1-4) % 50 * 10) % 10000))
fi
hooks=(ddp-kueue-mutating ddp-kueue-validating)
metrics_certs=/etc/kueue/metrics/certs

log() { echo "[kueue $(date +%H:%M:%S)] $*" >&2; }
die() { log "$*"; exit 1; }
kubectl_() { "$bin/kubectl" --kubeconfig "$kubeconfig" "$@"; }
pidfile="$state/kueue.pid"
# shellcheck source=hack/cluster/daemon.sh
source "$here/daemon.sh"

# The manager's settings: pods (and DDPJobs for MultiKueue) only, no leader election, no metrics or probe ports, our certificate.
config() {
  cat >"$state/config.yaml" <<EOF
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
health:
  healthProbeBindAddress: "0"
metrics:
  bindAddress: "0"
webhook:
  host: 127.0.0.1
  port: $port
  certDir: $state/certs
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
integrations:
  frameworks: [pod]
multiKueue:
  externalFrameworks:
  - name: DDPJob.v1alpha1.ddp-operator.io
EOF
}

# One self-signed certificate for 127.0.0.1, for the webhook server and for the metrics server
# (Kueue reads the latter's from the fixed path /etc/kueue/metrics/certs when it does not manage
# certificates itself; down removes that directory if up made it).
certificate() {
  self_signed "$state/certs" ddp-kueue-webhook
  if [[ ! -d "$metrics_certs" ]]; then
    mkdir -p "$metrics_certs" && touch "$state/made-metrics-certs"
  fi
  cp "$state/certs/tls.crt" "$state/certs/tls.key" "$metrics_certs/"
}

# Kueue's own webhook configurations, for pods and Kueue's objects only, pointed at this machine.
webhooks() {
  local ca
  ca="$(base64 -w0 "$state/certs/tls.crt")"
  kubectl_ create --dry-run=client -o json -f "$bin/kueue-config/webhooks.yaml" |
    python3 "$here/webhooks.py" --url "https://127.0.0.1:$port" --ca "$ca" \
      --only-group kueue.x-k8s.io --pods-labelled kueue.x-k8s.io/queue-name --names "${hooks[@]}" |
    kubectl_ apply --server-side --force-conflicts -f - >/dev/null
}

up() {
  bin="$("$here/build.sh" kueue)"
  mkdir -p "$state"
  kubectl_ apply --server-side --force-conflicts -f "$bin/kueue-config/crds" >/dev/null
  crds_established "$bin/kueue-config/crds"
  kubectl_ create namespace kueue-system --dry-run=client -o yaml | kubectl_ apply -f - >/dev/null
  certificate
  config
  if ! alive "$pidfile"; then
    log "starting Kueue (webhook on 127.0.0.1:$port)"
    setsid "$bin/kueue" --config "$state/config.yaml" --kubeconfig "$kubeconfig" \
      --feature-gates=VisibilityOnDemand=false >>"$state/kueue.log" 2>&1 </dev/null &
    echo $! >"$pidfile"
  fi
  local t0=$SECONDS
  until curl -sk -o /dev/null "https://127.0.0.1:$port/"; do
    alive "$pidfile" || die "Kueue exited: $state/kueue.log"
    ((SECONDS - t0 < 60)) || die "Kueue's webhook did not answer in 60 s: $state/kueue.log"
    sleep 0.2
  done
  webhooks
  log "Kueue is up: $state/kueue.log"
}

down() {
  bin="$("$here/build.sh" kueue)"
  stop "$pidfile"
  if [[ -f "$state/made-metrics-certs" ]]; then
    rm -rf /etc/kueue && rm -f "$state/made-metrics-certs"
  fi
  drop_webhooks "${hooks[@]}"
  log "Kueue is down"
}

main Kueue "$@"
