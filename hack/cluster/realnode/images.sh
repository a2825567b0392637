# shellcheck shell=bash
# shellcheck disable=SC2154,SC2034 # settings come from lib.sh; pause_tar is for realnode.sh up
# realnode.sh's images (sourced after lib.sh): the pause image, and the images image.sh builds,
# imported into every running node.

# image_tar NAME REF ROOTFS ARGS...: an OCI archive of ROOTFS as REF, cached as NAME.
image_tar() {
  local name=$1 ref=$2 rootfs=$3; shift 3
  local out="$cache/images/$name.tar"
  if [[ ! -f "$out" ]]; then
    mkdir -p "$cache/images"
    python3 "$here/ociimage.py" --name "$ref" --rootfs "$rootfs" "$@" "$out"
  fi
  echo "$out"
}

pause_image() {
  local key dir
  key="$(sha256sum "$bin/pause" | cut -c1-12)"
  pause_ref="ddp-operator.io/pause:$key"
  dir="$(mktemp -d)"
  install -m 0755 "$bin/pause" "$dir/pause"
  pause_tar="$(image_tar "pause-$key" "$pause_ref" "$dir" --entrypoint '["/pause"]')"
  rm -rf "$dir"
}

import() {
  ctr_ images import --snapshotter overlayfs "$1" >/dev/null 2>>"$rn/ctr.log" ||
    die "import of $1 failed: $rn/ctr.log"
}

# pin REF: the kubelet never removes image REF. Image garbage collection is off (kubelet.yaml),
# but a disk under the eviction threshold still has the kubelet delete every image no container
# uses: a cold CI of 2026-12-05 filled the disk building the test images, and the trainer and
# operator images went, which no registry gives back (ErrImagePull). containerd's CRI reports an
# image with this label pinned, and the kubelet's collection passes over pinned images.
pin() {
  ctr_ images label "$1" io.cri-containerd.pinned=pinned >/dev/null
}

# provide ARGS...: the image `image.sh ARGS...` builds (or reuses: base, trainer [NAME=VALUE]...,
# operator, foreign NAME), imported into every running node that lacks it (its name carries its
# cache key); prints its name.
provide() {
  [[ $(id -u) == 0 ]] || die "needs root"
  tools
  local out
  out="$("$here/image.sh" "$@")"
  local tar="${out% *}" ref="${out#* }" i
  # Earlier builds of this image (its name up to the key: trainer:torch2.5.1-<key>, operator:<key>,
  # foreign-NAME:<key>) go, from the cache and from the nodes (containerd then collects their
  # content): the trainer image is 3.2 GB. An archive is one of them only where what follows its
  # stem has no '-' (the key or the date alone): foreign-debian-<key>.tar's stem also starts
  # foreign-debian-torch-<key>.tar, another image's.
  local old
  for old in "${tar%-*}"-*.tar; do
    if [[ "$old" != "$tar" && -f "$old" && "${old#"${tar%-*}"-}" != *-* ]]; then rm -f "$old"; fi
  done
  for i in 0 1; do
    node_settings "$i"
    if pid_of containerd >/dev/null; then provide_on "$tar" "$ref" "$@"; fi
  done
  echo "$ref"
}

# provide_on TAR REF ARGS...: provide's work on the node of the current settings.
provide_on() {
  local tar=$1 ref=$2 t0=$SECONDS; shift 2
  if [[ -z "$(ctr_ images ls -q "name==$ref" 2>/dev/null)" ]]; then
    if ((index > 0)); then link_blobs; fi
    import "$tar"
    log "imported $ref into $node in $((SECONDS - t0))s"
  fi
  pin "$ref"
  # The default trainer image is also the examples' image (examples/*.yaml), so that they run
  # here as written: the tag is not `latest`, so the kubelet never tries to pull it.
  if [[ $1 == trainer && $# == 1 ]]; then
    ctr_ images tag --force "$ref" "$examples_trainer" >/dev/null
  fi
  local stem="${ref%:*}:" old
  if [[ "${ref##*:}" == *-* ]]; then stem="${ref%-*}-"; fi
  for old in $(ctr_ images ls -q 2>/dev/null); do
    if [[ "$old" == "$stem"* && "$old" != "$ref" ]]; then ctr_ images rm "$old" >/dev/null || true; fi
  done
  # The CRI's own references (sha256:<config digest>) of images no name points to any more.
  ctr_ images ls 2>/dev/null | awk 'NR > 1 && $1 !~ /^sha256:/ { keep[$3] = 1 }
    NR > 1 && $1 ~ /^sha256:/ { id[$1] = $3 }
    END { for (r in id) if (!(id[r] in keep)) print r }' |
    xargs -r "$bin/ctr" --address "$sock" --namespace k8s.io images rm >/dev/null 2>&1 || true
}

# load TAR REF NAME: the archive TAR of image REF (image.sh's output) imported into every running
# node unless REF is there, and REF named NAME as well; nothing removed (hack/release.sh: the
# local cluster standing in for a registry; a pod naming NAME finds it and, its tag not latest,
# never pulls).
load() {
  [[ $(id -u) == 0 ]] || die "needs root"
  tools
  pid_of containerd >/dev/null || die "the real node is not up (make cluster-up)"
  local i
  for i in 0 1; do
    node_settings "$i"
    pid_of containerd >/dev/null || continue
    if [[ -z "$(ctr_ images ls -q "name==$2" 2>/dev/null)" ]]; then
      if ((index > 0)); then link_blobs; fi
      import "$1"
    fi
    pin "$2"
    ctr_ images tag --force "$2" "$3" >/dev/null
  done
}
