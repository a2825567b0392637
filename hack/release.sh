#!/usr/bin/env bash
# `make release REGISTRY=registry.example.com/team`: the release of this checkout, built and
# pushed where a cluster can pull it:
#   REGISTRY/ddp-operator:VERSION   the operator (Dockerfile); the chart's image.repository
#   REGISTRY/ddp-trainer:VERSION    the trainer image (trainer_image/Dockerfile; torch from PyPI,
#                                   whose Linux wheels carry CUDA: it runs on GPUs and CPUs)
#   oci://REGISTRY/charts/ddp-operator, version VERSION (Helm 3.8+ pushes charts as OCI artifacts)
# VERSION is the chart's (charts/ddp-operator/Chart.yaml), which the package and CHANGELOG.md
# share. The chart is also left in dist/ddp-operator-VERSION.tgz.
#
# CONTAINER_TOOL picks what builds and pushes the images (default: the first of docker, podman
# and buildah on PATH); PLATFORM (default linux/amd64) the platform; BASE another Python 3.11
# image to build on (a base your organisation approves; default python:3.11-slim); BUILD_FLAGS
# more flags for the build (a proxy's --build-arg, a --secret, a mount). PLAIN_HTTP=1: the
# registry speaks HTTP without TLS (a lab's registry: buildah and podman push without TLS, helm
# with --plain-http; Docker needs it among its daemon's insecure-registries). PUSH=0 builds
# without pushing. IMAGES (default "operator trainer") picks the images.
#
# DDP_RELEASE_TO=local-cluster: the local cluster of `make demo` stands in for the registry.
# The images are built as the local cluster builds them (hack/cluster/image.sh: buildah, no
# registry for the base) and given the release's names in its real node's containerd, so a pod
# naming REGISTRY/ddp-operator:VERSION finds it there and never pulls (the tag is not latest);
# the chart is packaged, not pushed. The tests run the install page this way.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
registry="${REGISTRY:-${1:-}}"
registry="${registry%/}"
log() { echo "[release] $*" >&2; }
die() { log "$*"; exit 1; }
[[ -n "$registry" ]] || die "usage: make release REGISTRY=registry.example.com/team (a registry you can push to and your nodes can pull from)"

version="$(sed -n 's/^version: *//p' charts/ddp-operator/Chart.yaml)"
[[ -n "$version" ]] || die "no version in charts/ddp-operator/Chart.yaml"
operator="$registry/ddp-operator:$version"
trainer="$registry/ddp-trainer:$version"
images="${IMAGES:-operator trainer}"
wanted() { [[ " $images " == *" $1 "* ]]; }

helm_() {
  if command -v helm >/dev/null; then helm "$@"
  elif [[ -x .cluster/bin/helm ]]; then .cluster/bin/helm "$@"
  else die "helm is missing (https://helm.sh/docs/intro/install/; 3.8 or later)"
  fi
}

mkdir -p dist
helm_ package charts/ddp-operator --destination dist >/dev/null
chart="dist/ddp-operator-$version.tgz"
log "chart $chart"

if [[ "${DDP_RELEASE_TO:-registry}" == local-cluster ]]; then
  realnode="${DDP_REALNODE:-$root/hack/cluster/realnode.sh}"
  for pair in "operator=$operator" "trainer=$trainer"; do
    what="${pair%%=*}" name="${pair#*=}"
    wanted "$what" || continue
    out="$("$root/hack/cluster/image.sh" "$what")"
    "$realnode" load "${out% *}" "${out#* }" "$name"
    log "$name: ${out#* } in the local cluster's real node (no registry)"
  done
  echo "$operator"
  exit 0
fi

tool="${CONTAINER_TOOL:-}"
if [[ -z "$tool" ]]; then
  for t in docker podman buildah; do
    if command -v "$t" >/dev/null; then tool=$t; break; fi
  done
fi
[[ -n "$tool" ]] || die "no docker, podman or buildah on PATH (or set CONTAINER_TOOL)"
flags=(--platform "${PLATFORM:-linux/amd64}" ${BASE:+--build-arg "BASE=$BASE"})
read -r -a extra <<<"${BUILD_FLAGS:-}"
flags+=("${extra[@]}")
push_flags=() helm_flags=()
if [[ "${PLAIN_HTTP:-0}" == 1 ]]; then
  helm_flags+=(--plain-http)
  if [[ "$tool" != docker ]]; then push_flags+=(--tls-verify=false); fi
fi
build() { # build DOCKERFILE NAME
  case "$tool" in
    buildah) buildah bud --layers "${flags[@]}" -f "$1" -t "$2" . ;;
    *) "$tool" build "${flags[@]}" -f "$1" -t "$2" . ;;
  esac
}
built=()
if wanted operator; then build Dockerfile "$operator"; built+=("$operator"); fi
if wanted trainer; then build trainer_image/Dockerfile "$trainer"; built+=("$trainer"); fi
if [[ "${PUSH:-1}" == 1 ]]; then
  for name in "${built[@]}"; do "$tool" push "${push_flags[@]}" "$name"; done
  helm_ push "${helm_flags[@]}" "$chart" "oci://$registry/charts"
  log "pushed ${built[*]} and oci://$registry/charts/ddp-operator:$version"
else
  log "built ${built[*]} (PUSH=0: not pushed)"
fi
echo "$operator"
