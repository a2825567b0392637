#!/usr/bin/env bash
# `make demo`: a cluster (the local one unless KUBECONFIG names another), the CRD, the operator,
# and examples/cpu-job.yaml, applied as it is written, taken to Succeeded.
#
# On the local cluster the operator is installed as users install it (the Helm chart, its image
# built here from the Dockerfile, as a pod of the real node) and keeps running after the demo,
# watching the namespaces the docs use (DEMO_WATCH: default and ddp-demo), with its progress
# endpoint on; the job runs in real containers on the real node (the fake nodes are tainted:
# hack/cluster/manifests/nodes.yaml). `make cluster-down` stops it all. The local cluster is
# recognised whatever KUBECONFIG says (hack/is-local-cluster.sh: unset, the same file, or the
# same server), so a second run in the shell the first one set up (the printed export) does the
# same again. On another cluster the operator runs as a process of this script, for the demo
# only: install the chart there to keep one (README, "Install on your cluster").
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
ns="${DEMO_NAMESPACE:-ddp-demo}"
watch="${DEMO_WATCH:-default,$ns}"
job=hello-ddp
t0=$SECONDS
say() { printf '\n==> %s\n' "$*"; }

if hack/is-local-cluster.sh; then
  if [[ -n "${KUBECONFIG:-}" ]]; then
    echo "KUBECONFIG=$KUBECONFIG names the local cluster: the demo runs there as without it"
  fi
  say "Local cluster: control plane, fake nodes and a real node (the first run builds it all)"
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
# A CRD just created may have no status yet, which kubectl wait takes for an error ("<nil> is
# of the type <nil>"), not for a wait: asked again for 60 s, then its last words.
t0=$SECONDS
until said="$(kubectl wait --for=condition=Established --timeout=60s crd/ddpjobs.ddp-operator.io 2>&1)"; do
  ((SECONDS - t0 < 60)) || { echo "$said" >&2; exit 1; }
  sleep 0.5
done
echo "$said"
kubectl create namespace "$ns" --dry-run=client -o yaml | kubectl apply -f -

if [[ $local_cluster == 1 ]]; then
  image="$(hack/cluster/realnode.sh operator)"
  say "Operator: the Helm chart, release ddp-operator in ddp-system, image $image, watching $watch"
  helm upgrade --install ddp-operator charts/ddp-operator -n ddp-system --create-namespace \
    --set "image.repository=${image%:*},image.tag=${image##*:}" \
    --set "watchNamespaces={$watch}" \
    --set-string 'nodeSelector.ddp-operator\.io/node=real' \
    --wait --timeout 5m
else
  say "Operator (ddp-operator run --namespace $ns, for this demo only), log in .cluster/demo-operator.log"
  mkdir -p .cluster
  .venv/bin/ddp-operator run --namespace "$ns" >.cluster/demo-operator.log 2>&1 &
  operator=$!
  trap 'kill $operator 2>/dev/null || true; wait $operator 2>/dev/null || true' EXIT
fi

say "Job: kubectl apply -n $ns -f examples/cpu-job.yaml"
kubectl -n "$ns" delete ddpjob "$job" --ignore-not-found --wait=true
kubectl -n "$ns" apply -f examples/cpu-job.yaml
kubectl -n "$ns" wait --for=condition=Succeeded --timeout=600s "ddpjob/$job" || {
  kubectl -n "$ns" get ddpjob,pods -o wide
  .venv/bin/kubectl-ddp status "$job" -n "$ns"
  echo "demo: the job did not succeed" >&2
  exit 1
}
kubectl -n "$ns" get pods -o wide -l "ddp-operator.io/job-name=$job"
echo "workers ran on: $(kubectl -n "$ns" get pods -l "ddp-operator.io/job-name=$job" \
  -o jsonpath='{range .items[*]}{.metadata.name}={.spec.nodeName} {end}')"
say "Training output of every worker (kubectl ddp logs $job)"
.venv/bin/kubectl-ddp logs "$job" -n "$ns"
say "Workers and exit codes (kubectl ddp status $job)"
.venv/bin/kubectl-ddp status "$job" -n "$ns"

say "Result"
kubectl -n "$ns" get ddpjob "$job"
kubectl -n "$ns" get events --field-selector "involvedObject.name=$job" --sort-by=.lastTimestamp
echo
echo "demo finished in $((SECONDS - t0))s: ddpjob/$job Succeeded."
if [[ $local_cluster == 1 ]]; then
  cat <<NEXT

The cluster and the operator keep running (the operator watches ${watch//,/ and }). Next:

  export KUBECONFIG=$KUBECONFIG PATH=$root/.cluster/bin:\$PATH
  kubectl apply -f examples/cpu-job.yaml        # in namespace default, on the real node
  kubectl get ddpj -w                           # Ctrl-C when it says Succeeded
  kubectl ddp logs hello-ddp
  kubectl apply -f examples/train-cpu.yaml      # 2 workers x 2 processes, torchrun
  kubectl ddp top                               # progress of every job, live (Ctrl-C ends it)

Pages: docs/getting-started/local.md (what runs where), docs/tasks/sdk.md (Python).
Stop it all: make cluster-down
NEXT
fi
