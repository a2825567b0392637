#!/usr/bin/env bash
# `make kind-up`: for users with Docker. Creates a kind cluster, builds the operator and trainer
# images and loads them into it, installs the Helm chart, and adds kwok with the same fake
# accelerator nodes and pod stages as the local cluster, so `make e2e` runs the cluster tests
# against it. Needs docker, kind, kubectl and helm on PATH.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
name="${KIND_CLUSTER:-ddp-operator}"
kwok_version="$(sed -n 's/^KWOK_VERSION=//p' hack/cluster/versions.env)"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)"
operator_image="ddp-operator/operator:${version}"
trainer_image="ddp-operator/trainer:cpu"
kubeconfig="$root/.cluster/kind-kubeconfig"
mkdir -p .cluster

for tool in docker kind kubectl helm; do
  command -v "$tool" >/dev/null || { echo "kind-up: $tool is required" >&2; exit 1; }
done

if ! kind get clusters | grep -qx "$name"; then
  kind create cluster --name "$name" --kubeconfig "$kubeconfig" --wait 120s
else
  kind get kubeconfig --name "$name" >"$kubeconfig"
fi
export KUBECONFIG="$kubeconfig"

docker build -t "$operator_image" .
docker build -f trainer_image/Dockerfile -t "$trainer_image" .
kind load docker-image --name "$name" "$operator_image" "$trainer_image"

# Test pods belong on the fake nodes: keep them off kind's real node with a taint that only the
# system components installed here tolerate.
taint=ddp-operator.io/system-only
kubectl taint nodes --all "$taint=true:NoSchedule" --overwrite
toleration="{\"key\":\"$taint\",\"operator\":\"Exists\",\"effect\":\"NoSchedule\"}"

# kwok in the cluster, with our stages (they replace kwok's defaults) and fake nodes.
kubectl apply -f "https://github.com/kubernetes-sigs/kwok/releases/download/${kwok_version}/kwok.yaml"
kubectl -n kube-system patch deployment kwok-controller --type=json \
  -p "[{\"op\":\"add\",\"path\":\"/spec/template/spec/tolerations\",\"value\":[$toleration]}]"
kubectl apply -f hack/cluster/manifests/stages.yaml
kubectl apply -f hack/cluster/manifests/nodes.yaml
kubectl -n kube-system rollout status deployment/kwok-controller --timeout=180s

helm upgrade --install ddp-operator charts/ddp-operator \
  --namespace ddp-system --create-namespace \
  --set image.tag="$version" --set image.pullPolicy=Never \
  --set "tolerations[0].key=$taint" --set "tolerations[0].operator=Exists" \
  --set "tolerations[0].effect=NoSchedule" --wait --timeout 180s
kubectl -n ddp-system get pods
echo "kind-up: ready. export KUBECONFIG=$kubeconfig; make e2e"
