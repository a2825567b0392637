#!/usr/bin/env bash
# JobSet on the local cluster (cluster.sh up first), the benchmark's second peer (bench/README.md):
# `jobset.sh up|down|status`.
# up:     builds (or finds cached) JobSet's controller manager from its pinned Go module (build.sh
#         jobset), applies its CRD and runs the manager as a process on this machine with its
#         released defaults (client QPS 500, burst 500; every controller and webhook), but no leader
#         election, no metrics port and a certificate made here (openssl) instead of its
#         in-cluster certificate rotation. The API server calls its four webhooks (JobSets, and the
#         pods of JobSets, as its release selects them) at https://127.0.0.1:<port>. Returns once
#         the manager is ready and the webhook answers.
# down:   stops the manager and removes its webhook configurations (its CRD and objects stay).
# status: says whether it runs.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
state="$root/.cluster/jobset"
kubeconfig="$root/.cluster/kubeconfig"
# Its ports: per checkout, after kueue.sh's, coscheduling.sh's and volcano.sh's (10000..19999).
base=$((10000 + 0x$(printf '%s' "$root" | sha256sum | cut -c9-16) % 1000 * 10))
port=$((base + 8)) health=$((base + 9))
hooks=(ddp-jobset-mutating ddp-jobset-validating)

log() { echo "[jobset $(date +%H:%M:%S)] $*" >&2; }
die() { log "$*"; exit 1; }
kubectl_() { "$bin/kubectl" --kubeconfig "$kubeconfig" "$@"; }
pidfile="$state/jobset.pid"
# shellcheck source=hack/cluster/versions.env
source "$here/versions.env"
# shellcheck source=hack/cluster/daemon.sh
source "$here/daemon.sh"

config() {
  cat >"$state/config.yaml" <<EOF
apiVersion: config.jobset.x-k8s.io/v1alpha1
kind: Configuration
health:
  healthProbeBindAddress: 127.0.0.1:$health
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
EOF
}

# JobSet's own webhook configurations pointed at this machine; its pod webhooks see only the
# pods of JobSets, as in its release (config/default patches them so).
webhooks() {
  kubectl_ create --dry-run=client -o json -f "$bin/jobset-config/webhooks.yaml" |
    python3 "$here/webhooks.py" --url "https://127.0.0.1:$port" \
      --ca "$(base64 -w0 "$state/certs/tls.crt")" \
      --pods-labelled jobset.sigs.k8s.io/jobset-name --names "${hooks[@]}" |
    kubectl_ apply --server-side --force-conflicts -f - >/dev/null
}

up() {
  bin="$("$here/build.sh" jobset)"
  mkdir -p "$state"
  kubectl_ apply --server-side --force-conflicts -f "$bin/jobset-config/crds" >/dev/null
  crds_established "$bin/jobset-config/crds"
  self_signed "$state/certs" ddp-jobset-webhook
  config
  if ! alive "$pidfile"; then
    log "starting JobSet $JOBSET_VERSION (webhook on 127.0.0.1:$port)"
    setsid "$bin/jobset" --config "$state/config.yaml" --kubeconfig "$kubeconfig" \
      --zap-log-level=error >>"$state/jobset.log" 2>&1 </dev/null &
    echo $! >"$pidfile"
  fi
  local t0=$SECONDS
  until curl -sf -o /dev/null "http://127.0.0.1:$health/readyz" &&
      curl -sk -o /dev/null "https://127.0.0.1:$port/"; do
    alive "$pidfile" || die "JobSet exited: $state/jobset.log"
    ((SECONDS - t0 < 60)) || die "JobSet did not get ready in 60 s: $state/jobset.log"
    sleep 0.2
  done
  webhooks
  log "JobSet is up: $state/jobset.log"
}

down() {
  bin="$("$here/build.sh" jobset)"
  stop "$pidfile"
  drop_webhooks "${hooks[@]}"
  log "JobSet is down"
}

main JobSet "$@"
