#!/usr/bin/env bash
# A container registry for the local cluster (cluster.sh up first): `registry.sh up|down|status`.
# up:     builds (or finds cached) distribution's registry from its pinned Go module (build.sh
#         registry) and runs it as a process on this machine, on loopback, without TLS, its
#         storage under .cluster/registry; tells the real node's containerd to pull from it
#         (certs.d/HOST:PORT/hosts.toml: plain HTTP, that host only; every other registry stays
#         a closed port); prints HOST:PORT. What `make release` pushes there (images and the
#         chart, as OCI artifacts) the real node pulls and Helm installs: tests/test_release_registry.py.
# down:   stops it and removes its storage and the node's host entry.
# status: says whether it runs.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
state="$root/.cluster/registry"
pidfile="$state/registry.pid"
certs="$root/.cluster/realnode/containerd/certs.d"

log() { echo "[registry $(date +%H:%M:%S)] $*" >&2; }
die() { log "$*"; exit 1; }
# shellcheck source=hack/cluster/versions.env
source "$here/versions.env"
# shellcheck source=hack/cluster/daemon.sh
source "$here/daemon.sh"

up() {
  local bin t0
  bin="$("$here/build.sh" registry)"
  mkdir -p "$state/storage"
  # Its address: the one it runs on, else a port free now (the cluster's ports are hashed from
  # the checkout's path; this one needs no fixed place).
  if alive "$pidfile" && [[ -f "$state/address" ]]; then
    address="$(<"$state/address")"
  else
    address="127.0.0.1:$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    echo "$address" >"$state/address"
  fi
  cat >"$state/config.yml" <<EOF
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $state/storage
  delete:
    enabled: true
http:
  addr: $address
EOF
  if ! alive "$pidfile"; then
    log "starting distribution's registry $REGISTRY_VERSION on $address"
    OTEL_TRACES_EXPORTER=none setsid "$bin/registry" serve "$state/config.yml" \
      >>"$state/registry.log" 2>&1 </dev/null &
    echo $! >"$pidfile"
  fi
  t0=$SECONDS
  until curl -sf -o /dev/null "http://$address/v2/"; do
    alive "$pidfile" || die "the registry exited: $state/registry.log"
    ((SECONDS - t0 < 60)) || die "the registry did not answer in 60 s: $state/registry.log"
    sleep 0.2
  done
  if [[ -d "$certs" ]]; then
    local hosts="$certs/$address"
    mkdir -p "$hosts"
    printf 'server = "http://%s"\n\n[host."http://%s"]\n  capabilities = ["pull", "resolve"]\n' \
      "$address" "$address" >"$hosts/hosts.toml"
  fi
  echo "$address"
}

down() {
  stop "$pidfile"
  if [[ -f "$state/address" ]]; then rm -rf "${certs:?}/$(<"$state/address")"; fi
  rm -rf "$state"
  log "the registry is down"
}

main registry "$@"
