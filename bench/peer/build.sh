#!/usr/bin/env bash
# Builds Kubeflow's training operator (the benchmark's peer) from its Go module, pinned in go.mod
# beside this script, into ~/.cache/ddp-operator (or DDP_CACHE_DIR); prints the binary's path.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
version="$(awk '/kubeflow\/training-operator /{print $2}' "$here/go.mod")"
key="$(cat "$here/go.mod" "$here/go.sum" | sha256sum | cut -c1-12)"
out="${DDP_CACHE_DIR:-$HOME/.cache/ddp-operator}/training-operator-$version-$key"
if [[ ! -x "$out/training-operator.v1" ]]; then
  echo "[build $(date +%H:%M:%S)] kubeflow training-operator $version" >&2
  mkdir -p "$out.tmp"
  (cd "$here" && CGO_ENABLED=0 GOFLAGS="-mod=readonly -trimpath" go build -ldflags "-s -w" -o "$out.tmp/" tool)
  rm -rf "$out" && mv "$out.tmp" "$out"
fi
echo "$out/training-operator.v1"
