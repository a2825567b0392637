#!/usr/bin/env bash
# `make demo`: a cluster (the local one unless KUBECONFIG is set), the CRD, the operator, and
# examples/cpu-job.yaml taken to Succeeded.
#
# On the local cluster the job runs in real containers on its real node (hack/cluster/realnode.sh:
# a kubelet and containerd): the manifest is applied with the trainer image built here, the
# node's selector and toleration, and a CPU request that fits its 2 cores (shown below). On
# another cluster (KUBECONFIG) it is applied as it is.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
ns="${DEMO_NAMESPACE:-ddp-demo}"
job=hello-ddp
t0=$SECONDS
say() { printf '\n==> %s\n' "$*"; }

if [[ -z "${KUBECONFIG:-}" ]]; then
  say "Local cluster: control plane, fake nodes and a real node (first run builds it all: see README)"
  hack/cluster/cluster.sh up
  export KUBECONFIG="$root/.cluster/kubeconfig"
  export PATH="$root/.cluster/bin:$PATH"
  local_cluster=1
else
  local_cluster=0
fi
kubectl get nodes -L ddp-operator.io/accelerator

say "CRD"
kubectl apply --server-side --force-conflicts -f crds/
kubectl wait --for=condition=Established --timeout=60s crd/ddpjobs.ddp-operator.io

say "Operator (ddp-operator run --namespace $ns), log in .cluster/demo-operator.log"
mkdir -p .cluster
.venv/bin/ddp-operator run --namespace "$ns" >.cluster/demo-operator.log 2>&1 &
operator=$!
trap 'kill $operator 2>/dev/null || true; wait $operator 2>/dev/null || true' EXIT

say "Job: examples/cpu-job.yaml in namespace $ns"
kubectl create namespace "$ns" --dry-run=client -o yaml | kubectl apply -f -
kubectl -n "$ns" delete ddpjob "$job" --ignore-not-found --wait=true
if [[ $local_cluster == 1 ]]; then
  trainer="$(hack/cluster/realnode.sh trainer)"
  patch='[
    {"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "'"$trainer"'"},
    {"op": "add", "path": "/spec/template/spec/containers/0/imagePullPolicy", "value": "IfNotPresent"},
    {"op": "replace", "path": "/spec/template/spec/containers/0/resources/requests/cpu", "value": "500m"},
    {"op": "add", "path": "/spec/template/spec/nodeSelector", "value": {"ddp-operator.io/node": "real"}},
    {"op": "add", "path": "/spec/template/spec/tolerations", "value": [
      {"key": "ddp-operator.io/real-node", "operator": "Exists", "effect": "NoSchedule"}]}
  ]'
  echo "On the real node of the local cluster, with this JSON patch: $patch"
  kubectl patch --local -f examples/cpu-job.yaml --type=json -p "$patch" -o yaml |
    kubectl -n "$ns" apply -f -
else
  kubectl -n "$ns" apply -f examples/cpu-job.yaml
fi
kubectl -n "$ns" wait --for=condition=Succeeded --timeout=600s "ddpjob/$job" || {
  kubectl -n "$ns" get ddpjob,pods -o wide
  .venv/bin/kubectl-ddp status "$job" -n "$ns"
  echo "demo: the job did not succeed" >&2
  exit 1
}
kubectl -n "$ns" get pods -o wide -l "ddp-operator.io/job-name=$job"
say "Training output of every worker (kubectl ddp logs $job)"
.venv/bin/kubectl-ddp logs "$job" -n "$ns"
say "Workers and exit codes (kubectl ddp status $job)"
.venv/bin/kubectl-ddp status "$job" -n "$ns"

say "Result"
kubectl -n "$ns" get ddpjob "$job"
kubectl -n "$ns" get events --field-selector "involvedObject.name=$job" --sort-by=.lastTimestamp
echo
echo "demo finished in $((SECONDS - t0))s: ddpjob/$job Succeeded. The cluster stays up:"
echo "  export KUBECONFIG=$KUBECONFIG; make cluster-down   # when done"
