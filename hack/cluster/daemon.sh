#!/usr/bin/env bash
# Sourced by the scripts that run one of the local cluster's extra programs as processes on this
# machine (kueue.sh, coscheduling.sh, volcano.sh, jobset.sh): their process, certificate and
# webhook helpers. Some use the sourcing script's $kubeconfig, $pidfile and kubectl_.
# shellcheck disable=SC2154

# shellcheck source=hack/cluster/fds.sh
source "$(dirname "${BASH_SOURCE[0]}")/fds.sh"
# What the sourcing script starts holds none of its caller's open files.
close_inherited_fds

# alive PIDFILE: whether the process written in PIDFILE runs.
alive() { [[ -f "$1" && -e /proc/$(<"$1") ]]; }

# stop PIDFILE: ends that process (TERM, then KILL after 20 s) and removes PIDFILE.
stop() {
  if alive "$1"; then
    local pid t0=$SECONDS
    pid="$(<"$1")"
    kill -TERM "$pid"
    while [[ -e /proc/$pid ]]; do
      if ((SECONDS - t0 > 20)); then kill -KILL "$pid"; fi
      sleep 0.2
    done
  fi
  rm -f "$1"
}

# self_signed DIR CN: a key and a self-signed certificate for 127.0.0.1 (DIR/tls.key,
# DIR/tls.crt), made once: what the API server trusts for webhooks served on this machine.
self_signed() {
  if [[ ! -f "$1/tls.crt" ]]; then
    mkdir -p "$1"
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=$2" \
      -addext "subjectAltName=IP:127.0.0.1" -keyout "$1/tls.key" -out "$1/tls.crt" 2>/dev/null
  fi
}

# crds_established FILE...: waits (60 s at most) until the CRDs of FILE (files or folders, as
# kubectl -f takes them) are Established. A CRD just created may have no status yet, which
# kubectl wait takes for an error ("<nil> is of the type <nil>"), not for a wait: it is asked
# again until then (CI of 2026-12-05 lost Kueue's 10 tests to that once); past 60 s it fails
# with kubectl's last words (a missing file, a timeout).
crds_established() {
  local t0=$SECONDS args=() f said
  for f in "$@"; do args+=(-f "$f"); done
  until said="$(kubectl_ wait --for=condition=Established --timeout=60s "${args[@]}" 2>&1)"; do
    ((SECONDS - t0 < 60)) || die "the CRDs of $* were not Established in 60 s: $said"
    sleep 0.5
  done
}

# drop_webhooks MUTATING VALIDATING: removes the program's two webhook configurations, if the
# cluster is there (the sourcing script's $kubeconfig and kubectl_).
drop_webhooks() {
  if [[ -f "$kubeconfig" ]]; then
    kubectl_ delete mutatingwebhookconfiguration "$1" --ignore-not-found >/dev/null || true
    kubectl_ delete validatingwebhookconfiguration "$2" --ignore-not-found >/dev/null || true
  fi
}

# main NAME ACTION: the script's command line: up, down (its functions) or status (of $pidfile).
main() {
  case "${2:-}" in
    up) up ;;
    down) down ;;
    status) if alive "$pidfile"; then echo "$1 runs (pid $(<"$pidfile"))"; else echo "$1 is down"; exit 1; fi ;;
    *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
  esac
}
