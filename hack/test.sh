#!/usr/bin/env bash
# make test: lint beside the local cluster's build, the cluster up (unless KUBECONFIG is set), the
# suite, the cluster down again if this run brought it up, then the 25 slowest tests and where
# the time went against the budget (hack/test_report.py).
# The suite runs in four pytest sessions on the one cluster, each test in namespaces of its own
# and each session with an operator of its own (docs/development/tests.md):
#   node:   the tests marked `node` (real containers on the real nodes), DDP_TEST_WORKERS of them
#           at a time (default 4; pytest-xdist, one file to a worker, the longest of the last
#           complete run first, and the files that take real-node-1 for themselves in one worker:
#           tests/harness/schedule.py): mostly waiting on pods;
#   api:    meanwhile the API server's other tests, one at a time (kwok's fake nodes; some
#           delete, silence or fill the shared fake nodes);
#   alone:  then the `serial` tests (they stop the control plane, restart real-node-0's
#           containerd, bring the cluster up again, swap the CRD, or time what load would slow)
#           and the `last` one (it takes the real nodes down), with no other cluster test;
#   host:   the tests that need no cluster, one at a time (the pure ones, `kubectl ddp local`'s
#           with torch on the host, the docs' build): beside alone, whose tests mostly wait, or,
#           where the cluster's build still runs a minute after lint, beside it (node and api
#           then wait for their end).
# DDP_TEST_WORKERS=0 runs the suite in one session instead. PYTEST_ARGS (make test
# PYTEST_ARGS=...) goes to every session; a session that selects nothing is fine (exit 5), a run
# in which no test ran is not.
set -uo pipefail
cd "$(dirname "$0")/.." || exit
bin=.venv/bin
workers="${DDP_TEST_WORKERS:-4}"
if [[ ! "$workers" =~ ^[0-9]+$ ]]; then
  echo "make test: DDP_TEST_WORKERS must be a whole number (0: one session), not '$workers'" >&2
  exit 2
fi
report=.cluster/test-report
# Each test file's seconds in the last complete run (the report writes them; a run given
# PYTEST_ARGS ran only some), read by the node session's order.
export DDP_TEST_DURATIONS="${DDP_CACHE_DIR:-$HOME/.cache/ddp-operator}/test-durations.json"
durations=()
[[ -n "${PYTEST_ARGS:-}" ]] || durations=("--durations-out=$DDP_TEST_DURATIONS")
rm -rf "$report" && mkdir -p "$report"
start=$SECONDS
step_start=$SECONDS
# busy_ticks: the machine's busy CPU time since boot (user, nice, system, irq, softirq), in ticks.
busy_ticks() { awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8; exit }' /proc/stat; }
cpu_start=$(busy_ticks)
steps=()
took() { steps+=("$1=$((SECONDS - step_start))"); step_start=$SECONDS; }
# PYTEST_ARGS as the shell reads it (quotes kept: -k "a and b"), as make's recipe did.
args=()
eval "args=(${PYTEST_ARGS:-})"

# session NAME [--quiet] [--nice] PYTEST-ARGS...: one pytest session, its results in
# $report/NAME.xml and its output in $report/NAME.log, shown as it comes but with --quiet (a
# session run beside another is shown after it); with --nice at a lower priority (nice 10,
# against this run's other processes only: see start_host). Fails with pytest's exit code, but
# for 5 (nothing selected). Shown through tee's own output: a redirection to /dev/stdout opens
# again the file this run's output goes to (make test >FILE), from its start, losing what the
# run had written there (lint, the build).
session() {
  local name=$1 shown=1 got prefix=()
  shift
  if [[ $1 == --quiet ]]; then
    shown=""
    shift
  fi
  if [[ $1 == --nice ]]; then
    prefix=(nice -n 10)
    shift
  fi
  "${prefix[@]}" "$bin/pytest" "$@" --junitxml="$report/$name.xml" "${args[@]}" 2>&1 |
    if [[ -n $shown ]]; then tee "$report/$name.log"; else cat >"$report/$name.log"; fi
  got=${PIPESTATUS[0]}
  [[ $got -eq 0 || $got -eq 5 ]] || return "$got"
}
host=""
# start_host: the tests that need no cluster, in the background (its output shown after alone's),
# at a lower priority than the serial tests' own processes (their pytest, their operators): those
# wait on timings (a node's grace, a restart's deadline). The real node's pods are another cgroup,
# and the kernel's autogroups weigh this run's processes as one: nice does not reach them.
start_host() {
  session host --quiet --nice -m "not cluster and not docker and not gpu" &
  host=$!
}

local_cluster=""
[[ -n "${KUBECONFIG:-}" ]] || local_cluster=1
build=""
if [[ -n "$local_cluster" ]]; then hack/cluster/cluster.sh build & build=$!; fi
if ! make --no-print-directory lint; then
  [[ -z "$build" ]] || wait "$build" || true
  exit 1
fi
took lint
# A build still running a minute after lint (a cold cache, an image to build again) has the tests
# that need no cluster start then, beside it and the cluster's start; the cluster's sessions wait
# for their end: beside those (both cores busy) the timing of some would suffer (run 28 of the
# tests page). Else they run beside the serial ones.
if [[ "$workers" -gt 0 && -n "$build" ]] && ! timeout 60 tail --pid="$build" -f /dev/null; then
  start_host
fi
if [[ -n "$build" ]]; then wait "$build" || exit 1; fi
took "build (beyond lint)${host:+, and meanwhile the tests needing no cluster}"

started=""
if [[ -n "$local_cluster" ]]; then
  # scheduler-plugins, Volcano and Kueue, needed only by their tests, build at the lowest priority
  # meanwhile; their tests wait for them (build.sh's lock) if they are not done.
  (for t in scheduler-plugins volcano kueue; do nice -n 19 hack/cluster/build.sh "$t"; done \
    >/dev/null 2>&1 &)
  # Likewise the images of tests/images/ (nothing of the project in them), for their tests, each
  # of which waits for its own only: the quickest first (debian-torch takes the trainer image's
  # torch layer, no-shell is built on it; minutes), for the six tests that wait on debian-torch;
  # trixie-torch28 (torch 2.8 for Python 3.13, about 14 minutes; 26 GiB at its peak) last. After
  # the trainer image (cluster.sh up's, taken from it: buildah builds one at a time, and one of
  # these first would hold the cluster back and install torch twice).
  ({
    nice -n 19 hack/cluster/image.sh trainer
    for f in debian-torch no-shell trixie-torch28; do
      nice -n 19 hack/cluster/image.sh foreign "$f"
    done
  } >/dev/null 2>&1 &)
  if ! hack/cluster/cluster.sh status >/dev/null 2>&1; then
    hack/cluster/cluster.sh up || exit 1
    started=1
  fi
fi
took "cluster up"

# The sessions never take the cluster down: this run does, if it brought it up. A session that
# read it as stopped (a slow /readyz) brings it up again, a no-op on a running cluster.
export DDP_KEEP_CLUSTER=1
rc=0
host_done=""
if [[ -n "$host" ]]; then
  wait "$host" || rc=$?
  host_done=1
  took "tests needing no cluster (the rest of them)"
fi
if [[ "$workers" -gt 0 ]]; then
  session node --quiet -n "$workers" --dist loadfile --no-loadscope-reorder \
    -m "node and not serial and not last and not docker and not gpu" &
  node=$!
  session api -m "cluster and not node and not serial and not last and not docker and not gpu" ||
    rc=$?
  wait "$node" || rc=$?
  echo "== the real node's tests, run meanwhile =="
  cat "$report/node.log"
  took "tests: the real node's ($workers at a time), and meanwhile the others"
  beside=""
  if [[ -z "$host" ]]; then
    start_host
    beside=", and meanwhile those needing no cluster"
  fi
  session alone -m "cluster and (serial or last) and not docker and not gpu" || rc=$?
  if [[ -z "$host_done" ]]; then wait "$host" || rc=$?; fi
  echo "== the tests needing no cluster =="
  cat "$report/host.log"
  took "tests alone (serial, last)$beside"
else
  session all -m "not docker and not gpu" || rc=$?
  took "tests in one session"
fi
if [[ -n "$started" ]]; then hack/cluster/cluster.sh down; fi
took "cluster down"
# The run's CPU, and `import torch` timed now (the least CPU-seconds of three: the first after a
# run read 6.0 where the next ones read 4.5): a unit for the run's work, still noisy (tests page).
cpu="$(($(busy_ticks) - cpu_start)),$(getconf CLK_TCK),$(nproc)"
cpu="$(awk -F, '{ printf "%.0f,%d", $1 / $2, $3 }' <<<"$cpu")"
torch_import="$(for _ in 1 2 3; do
  "$bin/python" -c 'import resource, torch
r = resource.getrusage(resource.RUSAGE_SELF)
print(f"{r.ru_utime + r.ru_stime:.2f}")' || echo 0
done | sort -g | head -n 1)"
# What real-node-1 cost, if it went down during this run (the last test takes it down).
second=()
if [[ -f .cluster/real-node-1.cpu ]] &&
  (($(stat -c %Y .cluster/real-node-1.cpu) >= $(date +%s) - SECONDS + start)); then
  second=("--second-node=$(<.cluster/real-node-1.cpu)")
fi
if ! "$bin/python" hack/test_report.py --cpu="$cpu" --torch-import="$torch_import" "${second[@]}" \
  "${durations[@]}" "$report" "$((SECONDS - start))" "${steps[@]}"; then
  [[ $rc -ne 0 ]] || rc=1
fi
exit "$rc"
