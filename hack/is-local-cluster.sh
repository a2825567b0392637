#!/usr/bin/env bash
# `hack/is-local-cluster.sh`: exit 0 if KUBECONFIG names this checkout's local cluster
# (hack/cluster/cluster.sh), 1 if it names another. Local: KUBECONFIG unset or empty; or the same
# file as .cluster/kubeconfig (resolved paths: a link, a relative path, a cluster that is down and
# its kubeconfig gone); or, while .cluster/kubeconfig exists, its current context's server is the
# local cluster's. make demo (hack/demo.sh, hack/prereqs.sh) asks it, so that a second run in the
# shell the first one set up (its printed `export KUBECONFIG=...`) takes the local path again.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
local_kubeconfig="$root/.cluster/kubeconfig"

[[ -z "${KUBECONFIG:-}" ]] && exit 0
[[ "$(realpath -m -- "$KUBECONFIG")" == "$(realpath -m -- "$local_kubeconfig")" ]] && exit 0
[[ -f "$local_kubeconfig" ]] || exit 1

kubectl="$root/.cluster/bin/kubectl"
[[ -x "$kubectl" ]] || kubectl="$(command -v kubectl)" || exit 1
# The server of a kubeconfig's (or a KUBECONFIG list's) current context; empty if it has none.
server() {
  KUBECONFIG="$1" "$kubectl" config view --minify -o jsonpath='{.clusters[0].cluster.server}' \
    2>/dev/null || true
}
theirs="$(server "$KUBECONFIG")"
[[ -n "$theirs" && "$theirs" == "$(server "$local_kubeconfig")" ]]
