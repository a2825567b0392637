#!/usr/bin/env bash
# Every tool a make target will need, checked before it starts anything:
# `hack/prereqs.sh demo|test|cluster` (make demo, make test, make cluster-up and the targets
# built on it call it first; .ci/run through make test).
#   all:      make, git, Python >= 3.11 with venv (the project's .venv)
#   cluster:  the local cluster (test only without KUBECONFIG, demo unless it names another
#             cluster: hack/is-local-cluster.sh): Go >= the newest `go`
#             line of hack/cluster/*/go.mod, curl, flock, procps, openssl (the webhooks'
#             certificates of Kueue, Volcano, JobSet); and for its real node (unless
#             DDP_REAL_NODE=0), as root: iproute2, iptables, socat (realnode.sh), gcc, pkg-config
#             and libseccomp (the pinned runc is built with cgo), debootstrap and buildah
#             (image.sh), a host Python of exactly 3.11 and pip3 (it fetches the images' wheels)
#   test:     shellcheck (make lint)
#   demo:     with KUBECONFIG (another cluster), kubectl
# What is missing is installed from Debian's packages when this runs as root where apt-get is
# (DDP_PREREQS_INSTALL=0 forbids it); otherwise it stops at once, naming each missing tool and
# how to get it. Go is never installed (Debian's is too old): it must be there beforehand.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
what="${1:-}"
case "$what" in demo | test | cluster) ;; *) echo "usage: $0 demo|test|cluster" >&2; exit 2 ;; esac

say() { echo "[prereqs] $*" >&2; }

# version_ge A B: whether dotted version A >= B.
version_ge() { [[ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n 1)" == "$2" ]]; }

go_wanted() {
  sed -n 's/^go \([0-9.]*\)$/\1/p' "$root"/hack/cluster/*/go.mod | sort -V | tail -n 1
}

# What python3 is and has, asked once: "VERSION ensurepip venv" (a module it lacks is left out),
# in python_facts.
learn_python() {
  python_facts="$(python3 -c 'import sys
from importlib.util import find_spec as has
print("%d.%d" % sys.version_info[:2], *(m for m in ("ensurepip", "venv") if has(m)))' \
    2>/dev/null || true)"
}
learn_python
python_is() { # python_is MIN min|exact: python3 is MIN or newer (exact: that minor version)
  local v="${python_facts%% *}"
  [[ -n "$v" ]] || return 1
  if [[ $2 == exact ]]; then [[ "$v" == "$1" ]]; else version_ge "$v" "$1"; fi
}

# has NAME: whether the prerequisite NAME is there (most are commands of that name).
has() {
  case "$1" in
    python3) python_is 3.11 min ;;
    python3.11) python_is 3.11 exact ;;
    python3-venv) [[ " $python_facts " == *" ensurepip venv "* ]] ;;
    python3-pip) command -v pip3 >/dev/null ;;
    go)
      local v
      v="$(go env GOVERSION 2>/dev/null)" || return 1
      version_ge "${v#go}" "$(go_wanted)"
      ;;
    libseccomp) pkg-config --exists libseccomp 2>/dev/null ;;
    iptables) command -v iptables >/dev/null && command -v iptables-save >/dev/null ;;
    *) command -v "$1" >/dev/null ;;
  esac
}

# The Debian package of each prerequisite; how to get it elsewhere for those Debian lacks.
declare -A package=(
  [make]=make [git]=git [python3]=python3 [python3-venv]=python3-venv [python3-pip]=python3-pip
  [curl]=curl [flock]=util-linux [setsid]=util-linux [ip]=iproute2 [ss]=iproute2
  [iptables]=iptables [socat]=socat [gcc]=gcc [pkg-config]=pkg-config
  [libseccomp]=libseccomp-dev [debootstrap]=debootstrap [buildah]=buildah
  [shellcheck]=shellcheck [sysctl]=procps [pgrep]=procps [mount]=mount [openssl]=openssl
)
declare -A elsewhere=(
  [go]="Go $(go_wanted) or newer, from Go's own downloads (Debian's golang is too old)"
  [python3.11]="python3 must be Python 3.11 exactly for the real node's images (their wheels are fetched by it); DDP_REAL_NODE=0 leaves the real node out"
  [root]="the real node (a kubelet and containerd) needs root; DDP_REAL_NODE=0 leaves it out"
  [kubectl]="kubectl, of a version your cluster (KUBECONFIG) supports"
)

needs=(make git python3 python3-venv)
local_cluster=0
if [[ $what == cluster || -z "${KUBECONFIG:-}" ]]; then
  local_cluster=1
elif [[ $what == demo ]] && "$root/hack/is-local-cluster.sh"; then
  local_cluster=1 # KUBECONFIG names the local cluster: make demo takes the local path
fi
if [[ $local_cluster == 1 ]]; then
  needs+=(go curl flock setsid pgrep openssl)
  if [[ "${DDP_REAL_NODE:-1}" == 1 ]]; then
    needs+=(root python3.11 python3-pip ip ss iptables socat sysctl mount gcc pkg-config
      libseccomp debootstrap buildah)
  fi
fi
if [[ $what == test ]]; then needs+=(shellcheck); fi
# The demo on another cluster (KUBECONFIG) drives it with the kubectl found on the PATH.
if [[ $what == demo && $local_cluster == 0 ]]; then needs+=(kubectl); fi

missing() {
  local n
  for n in "${needs[@]}"; do
    if [[ $n == root ]]; then
      [[ $(id -u) == 0 ]] || echo root
    elif ! has "$n"; then
      echo "$n"
    fi
  done
}

mapfile -t lack < <(missing)
if ((${#lack[@]})) && [[ "${DDP_PREREQS_INSTALL:-1}" != 0 && $(id -u) == 0 ]] &&
  command -v apt-get >/dev/null; then
  pkgs=()
  for n in "${lack[@]}"; do
    if [[ -n "${package[$n]:-}" && " ${pkgs[*]} " != *" ${package[$n]} "* ]]; then
      pkgs+=("${package[$n]}")
    fi
  done
  if ((${#pkgs[@]})); then
    mkdir -p "$root/.cluster"
    log="$root/.cluster/prereqs-apt.log"
    say "installing from Debian's packages: ${pkgs[*]} (log: $log)"
    export DEBIAN_FRONTEND=noninteractive
    {
      apt-get install -y -q "${pkgs[@]}" ||
        { apt-get update -q && apt-get install -y -q "${pkgs[@]}"; }
    } >"$log" 2>&1 || say "apt-get failed (its last lines: $(tail -n 3 "$log" | tr '\n' ' '))"
    hash -r
    learn_python
    mapfile -t lack < <(missing)
  fi
fi
if ((${#lack[@]})); then
  say "make $what cannot run here; missing:"
  for n in "${lack[@]}"; do
    if [[ -n "${elsewhere[$n]:-}" ]]; then
      say "  $n: ${elsewhere[$n]}"
    else
      say "  $n: apt-get install ${package[$n]} (Debian), or your system's package of it"
    fi
  done
  exit 1
fi
