#!/usr/bin/env bash
# Creates .venv (every make target's Python environment): the project installed editable, on top
# of an environment of its dependencies (pyproject.toml's, with the test and trainer extras) kept
# in the cache (~/.cache/ddp-operator/venv-deps-<key>, key: the requirements and the Python) and
# linked in by a .pth file. A fresh clone then takes seconds instead of minutes (torch's CUDA
# wheels alone unpack ~2.5 GB); a change of the requirements makes a new one.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
python="${PYTHON:-python3}"
cache="${DDP_CACHE_DIR:-$HOME/.cache/ddp-operator}"
export PIP_DISABLE_PIP_VERSION_CHECK=1
log() { echo "[venv $(date +%H:%M:%S)] $*" >&2; }

mapfile -t reqs < <("$python" -c 'import sys, tomllib
p = tomllib.load(open("pyproject.toml", "rb"))["project"]
extras = p.get("optional-dependencies", {})
print("\n".join(p["dependencies"] + extras.get("test", []) + extras.get("trainer", [])))')
key="$( { printf '%s\n' "${reqs[@]}"; "$python" -VV; } | sha256sum | cut -c1-12)"
deps="$cache/venv-deps-$key"
if [[ ! -e "$deps/.complete" ]]; then
  mkdir -p "$cache"
  exec 9>"$cache/.venv-deps.lock"
  flock 9
  if [[ ! -e "$deps/.complete" ]]; then
    t0=$SECONDS
    log "dependencies into $deps: ${reqs[*]}"
    rm -rf "$deps"
    "$python" -m venv "$deps"
    "$deps/bin/python" -m pip install -q --upgrade pip
    "$deps/bin/python" -m pip install -q "${reqs[@]}"
    touch "$deps/.complete"
    log "dependencies installed in $((SECONDS - t0))s"
  fi
  exec 9>&-
fi
[[ -x .venv/bin/python ]] || "$python" -m venv .venv
site="$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
"$deps/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))' \
  >"$site/ddp-operator-deps.pth"
.venv/bin/python -m pip install -q --no-deps -e .
# The dependencies' commands (pytest, ruff, torchrun, ...) beside the project's: binaries as they
# are, Python scripts run by this environment's Python (which sees the project too).
for cmd in "$deps"/bin/*; do
  name="${cmd##*/}"
  case "$name" in python* | pip* | activate* | Activate*) continue ;; esac
  # The venv's own commands stay; wrappers made for an earlier dependency environment are renewed.
  if [[ -e ".venv/bin/$name" && ! -L ".venv/bin/$name" && "$name" != pytest ]] &&
    ! grep -q "/venv-deps-" ".venv/bin/$name"; then
    continue
  fi
  if head -c 2 "$cmd" | grep -q '#!'; then
    rm -f ".venv/bin/$name"
    # shellcheck disable=SC2016 # expanded when the wrapper runs
    printf '#!/bin/sh\nexec "$(dirname "$0")/python" %q "$@"\n' "$cmd" >".venv/bin/$name"
    chmod +x ".venv/bin/$name"
  else
    ln -sfn "$cmd" ".venv/bin/$name"
  fi
done
