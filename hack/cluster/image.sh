#!/usr/bin/env bash
# Builds the project's images from their Dockerfiles without Docker, for the real node
# (hack/cluster/realnode.sh): `image.sh trainer|operator [NAME=VALUE]...` (build arguments of the
# Dockerfile, e.g. TORCH_VERSION=2.15.0) prints the OCI archive and the image's name, one line.
# trainer: trainer_image/Dockerfile; operator: the repository's Dockerfile (`ddp-operator run`).
# `image.sh foreign NAME`: tests/images/NAME/Dockerfile, an image that carries nothing of the
# project (no ddp_operator, no .pth, no dist-info, no PYTHONPATH of ours; its build context is its
# own directory, so no COPY can take a file of ours), for the tests of what the operator does with
# images it did not make; named ddp-operator.io/foreign-NAME:<key>. Its BASE says what it starts
# from: python:X.Y-slim (the stand-in below) or ddp-operator.io/foreign-OTHER (built first).
# `image.sh base [SUITE]`: the stand-in itself (bookworm by default).
#
# The Dockerfiles stay the definition: Debian's buildah (apt-get install buildah) builds it as it
# is (`buildah bud --isolation chroot`, storage under the cache), with one difference: its BASE,
# python:X.Y-slim, comes from no registry here, so `image.sh base` makes a local stand-in, the
# Python X.Y of the Debian suite that has it (3.11: bookworm, 3.13: trixie; debootstrap minbase
# with python3 and python3-pip; `python` and `pip` in /usr/local/bin; no EXTERNALLY-MANAGED marker,
# as in python:X.Y-slim; LANG=C.UTF-8), cached by suite and the date of its packages like
# realnode.sh's test image, and passes it as --build-arg BASE.
#
# Downloads: the Dockerfile's pip runs with --no-cache-dir, so a pip cache cannot help. Instead
# what it installs (trainer: torch==TORCH_VERSION and numpy; operator: pyproject.toml's build
# requirements and dependencies; a foreign image: torch==TORCH_VERSION and numpy where its
# Dockerfile declares TORCH_VERSION), with their dependencies, is fetched once by the host's pip
# for the base's Python and glibc (whatever the host's own Python) into a wheelhouse in the cache
# (wheels/<what>-cpXY-<hash>), mounted read-only at /mnt during the build, and a pip.conf mounted
# at /etc/pip.conf makes pip install from there only (no-index, find-links): the build downloads
# nothing, and a package the Dockerfile's pip asks for beyond those fails it ("No matching
# distribution"). DDP_PIP_INDEX=1 lets pip reach the index too (it then downloads what it picks
# there even when the wheelhouse has it), trusting what the host trusts: the host's CA bundle (PIP_CERT, else Debian's) is mounted over the base's
# /etc/ssl/certs/ca-certificates.crt, which Debian's pip reads.
# buildah 1.28 leaves a mount point it made as an empty file (/etc/pip.conf, as it does
# /etc/hosts) in the last layer. The archive is cached under a key of the Dockerfile, the files
# its COPY lines name, the build arguments, the base, the wheelhouse's wheels (names and sizes),
# this script and buildah's version.
# A rebuild after a change to the files the Dockerfile copies (the progress module, the examples)
# takes the layer of torch's install from the last build: `bud --layers` keeps each step's layer
# in buildah's storage (in the cache), keyed by its line, its build arguments and its base (the
# wheelhouse mounted at /mnt is named by torch's version and index: the same line installs the
# same wheels). The foreign image debian-torch repeats those steps verbatim: it takes that layer.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cache="${DDP_CACHE_DIR:-$HOME/.cache/ddp-operator}"
storage=("--root" "$cache/buildah/storage" "--runroot" "$cache/buildah/run" "--storage-driver" overlay)

log() { echo "[image $(date +%H:%M:%S)] $*" >&2; }
die() { log "$*"; exit 1; }
# hold PATH: this process takes PATH's lock (the file PATH.lock), kept until release or its end.
# make test builds the test images in the background while a test may ask for one: two runs of
# this script at once, each making the same wheelhouse or base in the same .tmp (a cold CI of
# 2026-12-05: pip lost its wheels to the other run's rm, FileNotFoundError). The second waits,
# then finds it made.
hold() { exec {held}>"$1.lock" && flock "$held"; }
release() { exec {held}>&-; }
buildah_() { buildah "${storage[@]}" "$@"; }
# The Debian suites whose python3 stands in for python:X.Y-slim: their Python, and their glibc's
# minor version (the newest manylinux_2_N tag their wheels may carry).
declare -A suite_python=([bookworm]=3.11 [trixie]=3.13) suite_glibc=([bookworm]=36 [trixie]=41)
# suite_of X.Y: the suite whose Python that is.
suite_of() {
  local s
  for s in "${!suite_python[@]}"; do
    if [[ "${suite_python[$s]}" == "$1" ]]; then echo "$s"; return 0; fi
  done
  die "no Debian suite here has Python $1 (${suite_python[*]})"
}
# Earlier builds are looked for there (set -e and pipefail: a missing directory would end this).
mkdir -p "$cache/images"

# remove_tree DIR: unmounts what debootstrap left mounted under DIR, then removes it without
# crossing into another file system.
remove_tree() {
  local m
  while read -r m; do
    if [[ -n "$m" ]]; then umount -l "$m" || true; fi
  done < <(awk -v p="$1" '$5 == p || index($5, p "/") == 1 { print $5 }' /proc/self/mountinfo |
    sort -r)
  rm -rf --one-file-system "$1"
}

# base [SUITE]: sets base_ref, base_tar and python (its X.Y), building the archive of SUITE's
# stand-in (bookworm by default) if needed. The newest one built is used; DDP_IMAGE_DATE=YYYYMMDD
# picks (or builds) another.
base() {
  local suite=${1:-bookworm} date newest rootfs mirror t0=$SECONDS
  [[ -n "${suite_python[$suite]:-}" ]] || die "no stand-in for suite $suite (${!suite_python[*]})"
  python="${suite_python[$suite]}"
  # v2: its config's history lists its layer (ociimage.py), which bud --layers needs.
  local family=python-base-v2
  newest="$(find "$cache/images" -maxdepth 1 -name "$family-$suite-*.tar" 2>/dev/null |
    sort | tail -n 1)"
  newest="${newest##*-}"
  date="${DDP_IMAGE_DATE:-${newest%.tar}}"
  date="${date:-$(date -u +%Y%m%d)}"
  base_ref="ddp-operator.io/python-base:$python-$suite-$date-v2"
  base_tar="$cache/images/$family-$suite-$date.tar"
  [[ -f "$base_tar" ]] && return 0
  command -v debootstrap >/dev/null || die "debootstrap is missing: apt-get install debootstrap"
  mkdir -p "$cache/images"
  hold "$base_tar"
  if [[ -f "$base_tar" ]]; then release; return 0; fi
  mirror="$(awk '/^URIs:/ && $2 ~ /debian$/ {print $2; exit}' /etc/apt/sources.list.d/*.sources \
    /etc/apt/sources.list 2>/dev/null || true)"
  mirror="${mirror:-http://deb.debian.org/debian}"
  rootfs="$cache/images/$family-$suite-$date.rootfs"
  remove_tree "$rootfs"
  log "debootstrap $suite (minbase, python3, python3-pip) from $mirror"
  nice -n 10 debootstrap --variant=minbase --include=python3,python3-pip "$suite" "$rootfs" \
    "$mirror" >"$cache/images/$family-$suite-$date.log" 2>&1 || {
    remove_tree "$rootfs"
    die "debootstrap failed: $cache/images/$family-$suite-$date.log"
  }
  # What python:X.Y-slim offers a Dockerfile: `python` and `pip`, and a pip that installs as
  # root (Debian marks its Python externally managed; pip then goes to /usr/local).
  ln -s /usr/bin/python3 "$rootfs/usr/local/bin/python"
  ln -s /usr/bin/pip3 "$rootfs/usr/local/bin/pip"
  rm -f "$rootfs"/usr/lib/python3*/EXTERNALLY-MANAGED
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/* "$rootfs"/usr/share/doc/* \
    "$rootfs"/usr/share/man/* "$rootfs"/usr/share/locale/*
  python3 "$here/ociimage.py" --name "$base_ref" --rootfs "$rootfs" --gzip --cmd '["python3"]' \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --env LANG=C.UTF-8 \
    "$base_tar.tmp"
  mv "$base_tar.tmp" "$base_tar"
  remove_tree "$rootfs"
  release
  log "base $base_ref: $(du -h "$base_tar" | cut -f1) in $((SECONDS - t0))s"
}

# free_gib: the GiB free on the cache's file system.
free_gib() { df --output=avail -B1G "$cache" | tail -n 1 | tr -d ' '; }

# disk_check: warns where the file system may be too small for a build. Building the trainer
# image from nothing took 17 GiB of buildah's storage at its peak, and its archive 3 GiB more
# (torch's step: its files, the layer committed from them and that layer unpacked; 2026-11-28);
# the foreign trixie-torch28 (torch 2.8.0's CUDA 12 wheels for Python 3.13) took 26 GiB of the
# disk at its peak, with the layer's blob buildah writes under /var/tmp (2026-12-05); a fuller
# disk ends the build "no space left on device".
disk_check() {
  local need=26 free
  [[ -n "$torch" ]] || need=2
  free="$(free_gib)"
  if (( free < need )); then
    log "warning: $free GiB free under $cache; building the $image image may take $need GiB"
  fi
}

# default_arg NAME: the Dockerfile's default of its build argument NAME (empty if none).
default_arg() { sed -n "s/^ARG $1=//p" "$root/$dockerfile" | head -n 1; }

# arg NAME: the build argument NAME as given on the command line, else the Dockerfile's default.
arg() {
  local a
  for a in "${args[@]}"; do
    if [[ "${a%%=*}" == "$1" ]]; then echo "${a#*=}"; return 0; fi
  done
  default_arg "$1"
}

# fetch DIR X.Y PIP_ARGS...: DIR filled with the wheels pip picks for PIP_ARGS, once, for CPython
# X.Y on the glibc of the suite that has it: the host's pip downloads for that target whatever its
# own Python (binary wheels only, as a target's tags require). Every manylinux tag up to that glibc
# is named: pip widens manylinux2014 to 2010 and 1 but not manylinux_2_28 to the older
# manylinux_2_N (torch 2.15's nvidia-cuda-cupti has a manylinux_2_25 wheel only).
fetch() {
  local dir=$1 py=$2 t0=$SECONDS suite g platforms=(); shift 2
  [[ -d "$dir" ]] && return 0
  command -v pip3 >/dev/null || die "pip3 is missing: apt-get install python3-pip"
  mkdir -p "${dir%/*}"
  hold "$dir"
  if [[ -d "$dir" ]]; then release; return 0; fi
  suite="$(suite_of "$py")"
  for ((g = ${suite_glibc[$suite]}; g >= 5; g--)); do
    platforms+=(--platform "manylinux_2_${g}_x86_64")
  done
  log "wheelhouse (CPython $py): $*"
  rm -rf "$dir.tmp"
  nice -n 10 pip3 download --quiet --no-cache-dir --only-binary=:all: --python-version "$py" \
    --implementation cp --abi "cp${py//./}" "${platforms[@]}" --platform manylinux2014_x86_64 \
    --dest "$dir.tmp" "$@" >&2
  mv "$dir.tmp" "$dir"
  release
  log "wheelhouse $dir: $(du -sh "$dir" | cut -f1) in $((SECONDS - t0))s"
}

# wheelhouse: sets wheels, the directory of the wheels the image's pip installs (for the base's
# Python), and torch, the version it installs (empty if none). A Dockerfile installs torch where
# it declares TORCH_VERSION, unless its INSTALL_TORCH, where it has one, is not 1.
wheelhouse() {
  local index reqs
  torch="$(arg TORCH_VERSION)"
  if [[ -n "$(default_arg INSTALL_TORCH)" && "$(arg INSTALL_TORCH)" != 1 ]]; then torch=""; fi
  if [[ "$image" == operator ]]; then
    torch=""
    mapfile -t reqs < <(python3 -c 'import sys, tomllib
p = tomllib.load(open(sys.argv[1], "rb"))
print("\n".join(p["build-system"]["requires"] + p["project"]["dependencies"]))' \
      "$root/pyproject.toml")
    wheels="$cache/wheels/operator-cp${python//./}-$(printf '%s\n' "${reqs[@]}" | sha256sum |
      cut -c1-8)"
    fetch "$wheels" "$python" "${reqs[@]}"
  elif [[ -z "$torch" ]]; then
    wheels="$cache/wheels/none"
    mkdir -p "$wheels"
  else
    index="$(arg TORCH_INDEX)"
    wheels="$cache/wheels/torch-$torch-cp${python//./}-$(printf '%s' "$index" | sha256sum |
      cut -c1-8)"
    fetch "$wheels" "$python" ${index:+--index-url "$index"} "torch==$torch" numpy
  fi
}

# from_base: sets base_ref and base_tar (the image passed as BASE, built if needed) and python
# (the X.Y it runs), from the Dockerfile's own BASE: python:X.Y-slim (the trainer's, the
# operator's) stands for the Python X.Y of a Debian suite (`base`); ddp-operator.io/foreign-NAME
# for that foreign image, built first (by another run of this script: it takes the lock itself).
from_base() {
  local b out
  b="$(default_arg BASE)"
  python="$(from_python)"
  if [[ "$b" == python:* ]]; then
    base "$(suite_of "$python")"
  else
    out="$("${BASH_SOURCE[0]}" foreign "${b#ddp-operator.io/foreign-}")"
    base_tar="${out% *}" base_ref="${out#* }"
  fi
}

# from_python: the Python X.Y that $dockerfile's image runs: its BASE's, however deep.
from_python() {
  local b
  b="$(default_arg BASE)"
  case "$b" in
    python:*-slim) b="${b#python:}"; echo "${b%-slim}" ;;
    ddp-operator.io/foreign-*)
      dockerfile="tests/images/${b#ddp-operator.io/foreign-}/Dockerfile" from_python ;;
    *) die "$dockerfile: BASE $b is neither python:X.Y-slim nor ddp-operator.io/foreign-NAME" ;;
  esac
}

# The files the Dockerfile's COPY lines take from the build context (not --from a stage).
copied() {
  awk '$1 == "COPY" { from = 0; for (i = 2; i < NF; i++) {
         if ($i ~ /^--from=/) from = 1; else if ($i !~ /^--/ && !from) print $i } }' \
    "$root/$dockerfile"
}

# build: the image of $dockerfile, tagged $image; prints its archive and name.
build() {
  local key tag ref out t0=$SECONDS a files
  command -v buildah >/dev/null || die "buildah is missing: apt-get install buildah"
  [[ $(id -u) == 0 ]] || die "needs root (buildah, chroot isolation)"
  from_base
  wheelhouse
  # Those files as git sees them (not what .gitignore and .dockerignore leave out: caches).
  mapfile -t files < <(cd "$context" && copied | xargs -r git ls-files --cached --others \
    --exclude-standard -- | sort)
  key="$( {
    cat "$root/$dockerfile"
    (cd "$context" && sha256sum "${files[@]}")
    printf '%s\n' "${args[@]}" "$base_ref" "$(buildah --version)" "${DDP_PIP_INDEX:-0}"
    cat "${BASH_SOURCE[0]}"
    # The wheels by name and size: `ls -l` also counted allocated blocks, which change when the
    # file system flushes a fresh wheelhouse, and a cold run built the trainer twice.
    find "$wheels" -maxdepth 1 -type f -printf '%f %s\n' | sort
  } | sha256sum | cut -c1-12)"
  tag="$key"
  if [[ "$image" == trainer ]]; then
    tag="torch$(arg TORCH_VERSION)-$key"
    [[ "$(arg INSTALL_TORCH)" == 1 ]] || tag="base-$key"
  fi
  ref="ddp-operator.io/$image:$tag"
  out="$cache/images/$image-$tag.tar"
  if [[ -f "$out" ]]; then
    echo "$out $ref"
    return 0
  fi
  mkdir -p "$cache/buildah"
  exec 9>"$cache/buildah/.lock"
  flock 9
  # Built by another run of this script while this one waited.
  if [[ -f "$out" ]]; then
    echo "$out $ref"
    return 0
  fi
  # Containers a killed or failed build left (each holds a step's files; the lock keeps others').
  buildah_ rm --all >/dev/null 2>&1 || true
  if [[ -z "$(buildah_ images -q "$base_ref" 2>/dev/null)" ]]; then
    buildah_ pull --quiet "oci-archive:$base_tar" >/dev/null
  fi
  local build_args=(--build-arg "BASE=$base_ref") mounts=(-v "$wheels:/mnt:ro")
  if [[ "${DDP_PIP_INDEX:-0}" == 1 ]]; then
    printf '[global]\nfind-links = /mnt\n' >"$cache/buildah/pip.conf"
    mounts+=(-v "${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}:/etc/ssl/certs/ca-certificates.crt:ro")
  else
    printf '[global]\nno-index = true\nfind-links = /mnt\n' >"$cache/buildah/pip.conf"
  fi
  mounts+=(-v "$cache/buildah/pip.conf:/etc/pip.conf:ro")
  for a in "${args[@]}"; do build_args+=(--build-arg "$a"); done
  log "buildah bud $dockerfile ${build_args[*]} -> $ref"
  disk_check
  local build_log="$cache/buildah/build-$image.log"
  # --force-rm: a failed step's container goes too (it held the step's files, gigabytes).
  nice -n 10 buildah "${storage[@]}" bud --layers --force-rm --isolation chroot --pull=never \
    --identity-label=false \
    "${build_args[@]}" "${mounts[@]}" \
    -f "$root/$dockerfile" -t "$ref" "$context" >"$build_log" 2>&1 || {
    # The cause is in the log's last lines (e.g. "no space left on device"): CI shows only ours.
    tail -n 4 "$build_log" | cut -c1-600 >&2
    die "buildah bud failed (the end of its log is above; df: $(free_gib) GiB free): $build_log"
  }
  local t1=$SECONDS
  rm -f "$out.tmp"
  nice -n 10 buildah "${storage[@]}" push --quiet "$ref" "oci-archive:$out.tmp:$ref" >&2
  mv "$out.tmp" "$out"
  # The image stays in buildah's storage, with its steps' layers: the next build's cache (an rmi
  # takes an image's unnamed steps with it). Its earlier builds go (and their steps not shared).
  local old
  for old in $(buildah_ images --format '{{.Name}}:{{.Tag}}' 2>/dev/null); do
    if [[ "$old" == "ddp-operator.io/$image:"* && "$old" != "$ref" ]]; then
      buildah_ rmi "$old" >/dev/null || true
    fi
  done
  log "image $ref: $(du -h "$out" | cut -f1), built in $((t1 - t0))s, archived in $((SECONDS - t1))s"
  echo "$out $ref"
}

usage() {
  echo "usage: $0 base [SUITE] | trainer [NAME=VALUE]... | operator | foreign NAME" >&2
  exit 2
}

image="${1:-}"
shift || true
args=("$@")
# The build context: the repository (the Dockerfiles' COPY lines name its files).
context="$root"
case "$image" in
  base) [[ $(id -u) == 0 ]] || die "needs root"; base "$@"; echo "$base_tar $base_ref" ;;
  trainer) dockerfile=trainer_image/Dockerfile; build ;;
  operator) dockerfile=Dockerfile; build ;;
  foreign)
    if (($# != 1)) || [[ ! "$1" =~ ^[a-z0-9][a-z0-9.-]*$ ]]; then usage; fi
    dockerfile="tests/images/$1/Dockerfile"
    [[ -f "$root/$dockerfile" ]] || die "no $dockerfile"
    # Its own directory: nothing of the project is there to take.
    image="foreign-$1" context="$root/tests/images/$1" args=()
    build
    ;;
  *) usage ;;
esac
