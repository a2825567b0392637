#!/usr/bin/env bash
# make test: lint beside the local cluster's build, the cluster up (unless KUBECONFIG is set), the
# suite in two pytest sessions, the cluster down again if this run brought it up, then where the
# time went against the budget (hack/test_report.py).
# The suite: first every test not marked `serial` or `last`, its files spread over
# DDP_TEST_WORKERS pytest-xdist workers (3; 0 runs it all in one session) that share the cluster,
# each with its own namespaces and operator; then, alone, the `serial` tests (they stop, silence or
# fill what every test shares) and the `last` ones (they take the real node down).
# PYTEST_ARGS (make test PYTEST_ARGS=...) goes to both sessions.
set -uo pipefail
cd "$(dirname "$0")/.." || exit
bin=.venv/bin
workers="${DDP_TEST_WORKERS:-3}"
report=.cluster/test-report
rm -rf "$report" && mkdir -p "$report"
start=$SECONDS
step_start=$SECONDS
steps=()
took() { steps+=("$1=$((SECONDS - step_start))"); step_start=$SECONDS; }
read -r -a args <<<"${PYTEST_ARGS:-}"

local_cluster=""
[[ -n "${KUBECONFIG:-}" ]] || local_cluster=1
build=""
if [[ -n "$local_cluster" ]]; then hack/cluster/cluster.sh build & build=$!; fi
if ! make --no-print-directory lint; then
  [[ -z "$build" ]] || wait "$build" || true
  exit 1
fi
took lint
if [[ -n "$build" ]]; then wait "$build" || exit 1; fi
took "build (beyond lint)"

started=""
if [[ -n "$local_cluster" ]]; then
  # scheduler-plugins, Volcano and Kueue, needed only by their tests, build at the lowest priority
  # meanwhile; their tests wait for them (build.sh's lock) if they are not done.
  (for t in scheduler-plugins volcano kueue; do nice -n 19 hack/cluster/build.sh "$t"; done \
    >/dev/null 2>&1 &)
  if ! hack/cluster/cluster.sh status >/dev/null 2>&1; then
    hack/cluster/cluster.sh up || exit 1
    started=1
  fi
fi
took "cluster up"

# pytest's exit 5 (nothing selected) is fine for one session: hack/test_report.py fails a run
# that ran no test at all.
rc=0
session() {
  local name=$1
  shift
  "$bin/pytest" "$@" --junitxml="$report/$name.xml" "${args[@]}"
  local got=$?
  [[ $got -eq 0 || $got -eq 5 ]] || rc=$got
}
if [[ "$workers" -gt 0 ]]; then
  session parallel -n "$workers" --dist loadgroup -m "not docker and not gpu and not serial and not last"
  took "tests in parallel ($workers workers)"
  session alone -m "not docker and not gpu and (serial or last)"
  took "tests alone (serial, last)"
else
  session all -m "not docker and not gpu"
  took "tests in one session"
fi

if [[ -n "$started" ]]; then hack/cluster/cluster.sh down; fi
took "cluster down"
if ! "$bin/python" hack/test_report.py "$report" "$((SECONDS - start))" "${steps[@]}"; then
  [[ $rc -ne 0 ]] || rc=1
fi
exit "$rc"
