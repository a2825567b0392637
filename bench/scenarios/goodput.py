"""S9: goodput on the real node. The same training (``goodput_train.py``: 2 workers, gloo, a
fixed step time, a checkpoint every few steps) runs to a fixed number of useful steps while
failures come on a seeded schedule (a crash, an OOM kill, a hang, an eviction: one per attempt),
under each configuration of ``goodput_job.CONFIGS``. Measured per run: ETTR (useful steps x step
time / wall time from the first create call to ``Succeeded``), the attempts used, the steps lost,
and for each hang the seconds from the hang to the group's restart; beside them, the job's own
account (``status.goodput``: its ETTR, time and steps lost; each failure's costs from its
``firstFailure``, as the watch last saw it). The pods and this process
share one clock (the real node runs on this machine), so the script's records and the job's
history, as a watch here saw it, are compared directly."""

from __future__ import annotations

import json
import statistics
import time
from datetime import datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

from kubernetes import client

from ddp_operator.model import constants as c

from cluster import log
from contenders.ours import Ours
from podwatch import Stalled
from scenarios.goodput_job import CONFIGS, EVERY, KINDS, STEP_S, Config, job, schedule
from scenarios.jobwatch import WatchThread
from scenarios.recovery import host_folder, trainer_image

HOST = Path("/tmp/ddp-bench-s9")
GATEWAY = "198.18.0.1"  # the real node's bridge on this host: its pods reach the operator there
SEED = 9
FULL = {"steps": 160, "kinds": KINDS, "configs": tuple(CONFIGS)}
QUICK = {"steps": 40, "kinds": ("crash", "hang"), "configs": ("defaults", "unmodified")}


class Reporting(Ours):
    """Ours, its progress endpoint on the real node's bridge: the workers report to it."""

    progress_host = GATEWAY


class JobHistory(WatchThread):
    """Every status one job had, as a watch saw it, with this host's clock (``time.time``)."""

    def __init__(self, ours: Ours, ns: str, name: str) -> None:
        self.ours, self.ns, self.name = ours, ns, name
        self.history: list[tuple[float, dict[str, Any]]] = []
        api = (c.GROUP, c.VERSION, c.PLURAL)
        super().__init__(ours.cluster, ns, api, field_selector=f"metadata.name={name}")

    def seen(self, event: dict[str, Any]) -> None:
        if event["type"] in ("ADDED", "MODIFIED"):
            self.history.append((time.time(), event["object"].get("status") or {}))

    def status(self, doing: str) -> dict[str, Any]:
        """The latest status; raises if the watch broke or the operator exited."""
        if self.error is not None:
            raise Stalled(f"{doing}: the job watch broke: {self.error!r}") from self.error
        if dead := self.ours.dead():
            raise Stalled(f"{doing}: {dead}")
        return self.history[-1][1] if self.history else {}

    def first(self, what: Any) -> tuple[float, dict[str, Any]] | None:
        """The first (time, status) seen for which ``what(status)``."""
        return next(((t, s) for t, s in self.history if what(s)), None)


def records(out: Path) -> list[dict[str, Any]]:
    """Every complete line the job's processes wrote, with its attempt and rank, in time order."""
    found = []
    for path in out.glob("a*-r*.jsonl"):
        attempt, rank = path.stem.removeprefix("a").split("-r")
        for line in path.read_text().splitlines(keepends=True):
            if line.endswith("\n"):  # (a line being written is read next time)
                found.append({**json.loads(line), "attempt": int(attempt), "rank": int(rank)})
    return sorted(found, key=lambda r: r["t"])


def summary(status: dict[str, Any]) -> str:
    """The job's status in a few words, for an error message."""
    conds = [
        f"{x['type']}={x['status']} ({x.get('message', '')[:200]})"
        for x in status.get("conditions") or []
        if x["status"] == "True"
    ]
    return (
        f"phase {status.get('phase')}, restarts {status.get('restarts')}, progress "
        f"{json.dumps(status.get('progress'))[:300]}, conditions {'; '.join(conds)}"
    )


def restarting(status: dict[str, Any]) -> str:
    """The message of the job's Restarting condition: why the group restarted ('' if none)."""
    conds = status.get("conditions") or []
    return next((x.get("message", "") for x in conds if x["type"] == c.COND_RESTARTING), "")


def evict(ours: Ours, ns: str, pod: str) -> None:
    """Evict a pod through the Eviction API, as a node drain does."""
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name=pod, namespace=ns))
    ours.cluster.core.create_namespaced_pod_eviction(pod, ns, body)


def reached(config: Config, status: dict[str, Any], out: Path, attempt: int) -> int | None:
    """The step ``attempt`` has reached, as the job's status says it (a script that does not
    report: as its records say, None before its first step)."""
    if config.reports:
        progress = status.get("progress") or {}
        return int(progress.get("step") or 0) if progress.get("attempt") == attempt else None
    steps = [r["step"] for r in records(out) if r["event"] == "step" and r["attempt"] == attempt]
    return max(steps) if steps else None


def drive(
    ours: Ours,
    hist: JobHistory,
    out: Path,
    config: Config,
    failures: list[dict[str, Any]],
    t0: float,
    budget: float,
) -> tuple[float, dict[int, dict[str, Any]]]:
    """Run the job to ``Succeeded``, evicting where the schedule says; (when it succeeded, the
    evictions done by attempt). Fails at once, saying why, if the job fails, a hang is not ended
    within ``config.hang_ends_in`` s, or the whole run outlasts ``budget`` s."""
    name, ns = hist.name, hist.ns
    doing = f"S9 {config.name}: {name} -> Succeeded"
    evictions = {f["attempt"]: f for f in failures if f["kind"] == "evict"}
    evicted: dict[int, dict[str, Any]] = {}
    restarts = 0
    while True:
        status = hist.status(doing)
        if status.get("phase") == "Succeeded":
            succeeded = hist.first(lambda s: s.get("phase") == "Succeeded")
            assert succeeded is not None  # the latest status says so
            return succeeded[0], evicted
        if status.get("phase") == "Failed":
            raise Stalled(f"{doing}: the job failed: {summary(status)}")
        now, attempt = time.time(), int(status.get("restarts") or 0)
        if attempt > restarts:
            restarts = attempt
            why = restarting(status)
            log(f"S9 {config.name}: restart {attempt} at {now - t0:.1f} s: {why[:160]}")
        step = reached(config, status, out, attempt)
        due = evictions.get(attempt)
        if due is not None and attempt not in evicted and step is not None and step >= due["step"]:
            pod = f"{name}-worker-{due['worker']}"
            evict(ours, ns, pod)
            evicted[attempt] = {"t": time.time(), "status_step": step}
            log(f"S9 {config.name}: evicted {pod} at step {step} of attempt {attempt}")
        for hang in (r for r in records(out) if r["event"] == "hang" and r["attempt"] >= attempt):
            if now - hang["t"] > config.hang_ends_in:
                raise Stalled(
                    f"{doing}: worker {hang['rank']} hung at step {hang['step']} of attempt "
                    f"{hang['attempt']} {now - hang['t']:.0f} s ago and the group was not "
                    f"restarted (stall detection {config.stall}, gloo timeout "
                    f"{config.gloo_timeout} s): {summary(status)}"
                )
        if now - t0 > budget:
            raise Stalled(f"{doing}: not done in {budget:.0f} s: {summary(status)}")
        time.sleep(0.1)


def measure(
    config: Config,
    hist: JobHistory,
    out: Path,
    failures: list[dict[str, Any]],
    evicted: dict[int, dict[str, Any]],
    steps: int,
    t0: float,
    t_done: float,
) -> dict[str, Any]:
    """One run's figures from the script's records and the job's history."""
    recs = records(out)
    final = hist.history[-1][1]
    came = {(r["attempt"], r["event"]) for r in recs} | {(a, "evict") for a in evicted}
    missed = [f for f in failures if (f["attempt"], f["kind"]) not in came]
    if missed:
        raise Stalled(f"S9: scheduled failures that never came: {missed} ({summary(final)})")
    done = [r for r in recs if r["event"] == "step"]
    if max(r["step"] for r in done) != steps:
        raise Stalled(f"S9: the records end before step {steps} ({summary(final)})")
    restarts: list[dict[str, Any]] = []
    for k in range(1, int(final.get("restarts") or 0) + 1):
        seen = hist.first(lambda s, k=k: int(s.get("restarts") or 0) >= k)
        assert seen is not None  # the final status has k restarts: a status before it did
        restarts.append({"attempt": k, "t": seen[0], "message": restarting(seen[1])})
    hangs = []
    for f in (f for f in failures if f["kind"] == "hang"):
        hung = _one(recs, lambda r, a=f["attempt"]: r["event"] == "hang" and r["attempt"] == a)
        restart = _one(restarts, lambda r, a=f["attempt"]: r["attempt"] == a + 1)
        again = _one(done, lambda r, a=f["attempt"]: r["attempt"] > a)
        hangs.append(
            {
                **f,
                "detect_s": round(restart["t"] - hung["t"], 2),
                "to_next_step_s": round(again["t"] - hung["t"], 2),
                "restart_message": restart["message"],
            }
        )
    ledger = final.get("goodput") or {}
    per_step = [b["t"] - a["t"] for a, b in pairwise(done) if a["attempt"] == b["attempt"]]
    wall = t_done - t0
    return {
        "config": config.title,
        "wall_s": round(wall, 2),
        "ettr": round(steps * STEP_S / wall, 4),
        "attempts": int(final.get("restarts") or 0) + 1,
        "counted_restarts": final.get("countedRestarts"),
        "steps_run": len(done),
        "steps_lost": len(done) - steps,
        "step_s_measured": round(statistics.median(per_step), 3),
        # wall time neither useful nor lost work: starts, detection, restarts
        "idle_s": round(wall - len(done) * STEP_S, 2),
        "hang_detect_s": statistics.median(h["detect_s"] for h in hangs) if hangs else None,
        "hangs": hangs,
        # whether each hang's restart named the worker that hung (its pod's name)
        "culprit_named": int(all(f"worker-{h['worker']}" in h["restart_message"] for h in hangs))
        if hangs
        else None,
        "restarts": [{**r, "t": round(r["t"] - t0, 2)} for r in restarts],
        "evictions": {a: {**e, "t": round(e["t"] - t0, 2)} for a, e in evicted.items()},
        "job_ettr": ledger.get("ratio"),
        "job_clock": {
            "start_s": _since(final.get("startTime"), t0),
            "completion_s": _since(final.get("completionTime"), t0),
            "start_step": ledger.get("startStep"),
            "last_step": (final.get("progress") or {}).get("step"),
            "step_s": (final.get("progress") or {}).get("stepSeconds"),
        },
        "job_lost_s": ledger.get("lostSeconds"),
        "job_steps_lost": ledger.get("stepsLost"),
        "costs": costs(hist, failures),
    }


COSTS = (
    "reason",
    "lastStep",
    "resumeStep",
    "stepsLost",
    "detectedSeconds",
    "runningAgainSeconds",
    "firstStepSeconds",
)


def costs(hist: JobHistory, failures: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each scheduled failure's costs as the job recorded them (its ``firstFailure`` of that
    attempt, the last version seen: the recovery times come after it)."""
    last: dict[int, dict[str, Any]] = {}
    for _, status in hist.history:
        first = status.get("firstFailure") or {}
        if "attempt" in first:
            last[int(first["attempt"])] = first
    found = []
    for f in failures:
        first = last.get(f["attempt"])
        if first is None:
            raise Stalled(f"S9: the job recorded no failure of attempt {f['attempt']} ({f})")
        found.append({"kind": f["kind"], **{k: first.get(k) for k in COSTS}})
    return found


def _since(stamp: str | None, t0: float) -> float | None:
    """A status time, in seconds after ``t0`` (this host's clock; the API server's times have
    whole seconds)."""
    if not stamp:
        return None
    return round(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() - t0, 2)


def _one(items: list[dict[str, Any]], what: Any) -> dict[str, Any]:
    """The first item for which ``what(item)``; a run that succeeded has it, else it says so."""
    found = next((x for x in items if what(x)), None)
    if found is None:
        raise Stalled(f"S9: nothing in {items} for a hang's measure")
    return found


def one(
    ours: Ours, ns: str, image: str, config: Config, failures: list[dict[str, Any]], steps: int
) -> dict[str, Any]:
    """One run of the job under ``config``, to ``Succeeded``; its figures."""
    name = f"s9-{config.name}"
    out = host_folder(HOST / name)
    body = job(name, ns, image, config, failures, steps, out)
    budget = (
        180
        + 3 * steps * STEP_S
        + sum(config.hang_ends_in if f["kind"] == "hang" else 60 for f in failures)
    )
    hist = JobHistory(ours, ns, name)
    try:
        time.sleep(0.3)  # the watch is open before the job is made
        t0 = time.time()
        api = ours.cluster.custom
        made = api.create_namespaced_custom_object(c.GROUP, c.VERSION, ns, c.PLURAL, body)
        if made["spec"].get("stallDetection") != config.stall:
            raise Stalled(
                f"S9 {config.name}: the API server dropped spec.stallDetection "
                f"({made['spec'].get('stallDetection')}): apply this tree's crds/"
            )
        t_done, evicted = drive(ours, hist, out, config, failures, t0, budget)
        return measure(config, hist, out, failures, evicted, steps, t0, t_done)
    finally:
        hist.close()
        ours.drop(ns)  # the job's pods go, whether it succeeded or not


def goodput(ours: Reporting, quick: bool, configs: tuple[str, ...] | None = None) -> dict[str, Any]:
    """S9: the same job and failure schedule under each configuration (quick: the defaults, a
    shorter schedule), one after the other; each run's figures."""
    plan = QUICK if quick else FULL
    steps = int(plan["steps"])
    failures = schedule(SEED, steps, plan["kinds"])
    image = trainer_image()
    ns = ours.namespace("s9")
    runs: dict[str, Any] = {}
    for name in configs or plan["configs"]:
        config = CONFIGS[name]
        log(f"S9 {name}: {steps} steps x {STEP_S} s, failures {failures}")
        runs[name] = run = one(ours, ns, image, config, failures, steps)
        back = ", ".join(f"{x['kind']} {x['firstStepSeconds']} s" for x in run["costs"])
        log(
            f"S9 {name}: ETTR {run['ettr']:.3f} ({run['wall_s']:.1f} s, {run['attempts']} "
            f"attempts, {run['steps_lost']} steps lost); hang -> restart {run['hang_detect_s']} s; "
            f"the job's ETTR {run['job_ettr']}, {run['job_lost_s']} s lost; back: {back}"
        )
    return {
        "seed": SEED,
        "steps": steps,
        "step_s": STEP_S,
        "every": EVERY,
        "failures": failures,
        "runs": runs,
    }
