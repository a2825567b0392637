#!/usr/bin/env bash
# `make demo`: a cluster (the local one unless KUBECONFIG is set), the CRD, the operator, and
# examples/cpu-job.yaml taken to Succeeded.
#
# On the local cluster the pods are kwok's: nothing runs inside them. The demo then plays the
# kubelet's part: once every worker is Running, it runs the job's trainer containers as real
# PyTorch processes (`kubectl ddp local`, gloo on the CPU) and reports each worker's exit code on
# its pod (the kwok stage's annotation). On a real cluster the containers run by themselves.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
ns="${DEMO_NAMESPACE:-ddp-demo}"
job=hello-ddp
t0=$SECONDS
say() { printf '\n==> %s\n' "$*"; }

if [[ -z "${KUBECONFIG:-}" ]]; then
  say "Local control plane (first run builds it from Go modules: ~8 minutes on 2 cores)"
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
kubectl -n "$ns" apply -f examples/cpu-job.yaml
kubectl -n "$ns" wait --for=condition=Running --timeout=120s "ddpjob/$job"
kubectl -n "$ns" get ddpjob,pods,svc -o wide

if [[ $local_cluster == 1 ]]; then
  say "Running the workers' containers as local PyTorch processes (kubectl ddp local)"
  set +e
  .venv/bin/kubectl-ddp local examples/cpu-job.yaml --namespace "$ns"
  code=$?
  set -e
  say "Reporting exit code $code on every worker pod, as a kubelet would"
  for pod in $(kubectl -n "$ns" get pods -l "ddp-operator.io/job-name=$job" -o name); do
    kubectl -n "$ns" annotate "$pod" "kwok.ddp-operator.io/exit-code=$code" --overwrite
  done
  [[ $code == 0 ]] || { echo "demo: the training exited $code" >&2; exit 1; }
fi

kubectl -n "$ns" wait --for=condition=Succeeded --timeout=600s "ddpjob/$job"
say "Result"
kubectl -n "$ns" get ddpjob "$job"
kubectl -n "$ns" get events --field-selector "involvedObject.name=$job" --sort-by=.lastTimestamp
echo
echo "demo finished in $((SECONDS - t0))s: ddpjob/$job Succeeded. The cluster stays up:"
echo "  export KUBECONFIG=$KUBECONFIG; make cluster-down   # when done"
