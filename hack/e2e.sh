#!/usr/bin/env bash
# `make e2e`: the cluster tests against the kind cluster of `make kind-up` (via KUBECONFIG).
# The operator under test is started by the tests themselves, as for the local cluster; the
# chart's Deployment is scaled to zero meanwhile so that it does not act on the tests' jobs.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
export KUBECONFIG="${KUBECONFIG:-$root/.cluster/kind-kubeconfig}"
[[ -f "$KUBECONFIG" ]] || { echo "e2e: no kubeconfig at $KUBECONFIG; run make kind-up" >&2; exit 1; }
kubectl -n ddp-system scale deployment --all --replicas=0
trap 'kubectl -n ddp-system scale deployment ddp-operator --replicas=1' EXIT
.venv/bin/pytest -m "cluster and not gpu" "$@"
