"""Prometheus metrics of the operator (served by ``ddp-operator run --metrics-port``)."""

from __future__ import annotations

import contextlib
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

PHASES = ("Pending", "Running", "Restarting", "Suspended", "Succeeded", "Failed")

GROUP_RESTARTS = Counter("ddp_operator_group_restarts", "Whole-group restarts the operator started")
IN_PLACE_RESTARTS = Counter(
    "ddp_operator_in_place_restarts", "Group restarts done in place (also in group_restarts)"
)
REPLACEMENTS = Counter(
    "ddp_operator_worker_replacements", "Workers of elastic jobs replaced alone (no group restart)"
)
PODS_CREATED = Counter("ddp_operator_pods_created", "Worker pods created")
FAILURES = Counter(
    "ddp_operator_failures",
    "Failed attempts by their first failure's reason and the action the job took",
    ["reason", "action"],
)
LOST_SECONDS = Counter(
    "ddp_operator_failure_lost_seconds",
    "Training time failures cost (to the next attempt's first report, and the lost steps "
    "redone), by the failure's reason",
    ["reason"],
)
LOST_STEPS = Counter(
    "ddp_operator_failure_lost_steps",
    "Steps done and lost with their failed attempt (since its checkpoint), by reason",
    ["reason"],
)
NODE_BLAMES = Counter(
    "ddp_operator_node_blames",
    "Nodes a job blamed for a failure and kept out of it (status.excludedNodes), by reason",
    ["reason"],
)
API_REQUESTS = Counter(
    "ddp_operator_api_requests", "API requests made by the operator", ["verb", "code"]
)
API_ERRORS = Counter(
    "ddp_operator_api_errors",
    "API requests that failed (not counting 404/409 on purpose)",
    ["verb", "code"],
)
RECONCILE_SECONDS = Histogram(
    "ddp_operator_reconcile_seconds",
    "Duration of one reconcile pass of one job (plan and writes)",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)

PROGRESS_REPORTS = Counter(
    "ddp_operator_progress_reports",
    "Progress reports from training scripts, by result (accepted, refused, invalid, failed; "
    "busy: past the pod's review budget, stranger: from no worker pod, unauthenticated)",
    ["result"],
)
JOB = ["namespace", "job"]
JOB_PROGRESS = Gauge("ddp_job_progress_ratio", "The training's reported progress, 0 to 1", JOB)
JOB_STEP = Gauge("ddp_job_step", "The training's reported step", JOB)
JOB_ETA = Gauge("ddp_job_eta_seconds", "The training's estimated time to its last step", JOB)
JOB_REPORTED = Gauge(
    "ddp_job_progress_timestamp_seconds", "When the training last reported (Unix time)", JOB
)
JOB_METRIC = Gauge(
    "ddp_job_metric",
    "A metric the training reported (loss, samples_per_s, ...), by name",
    [*JOB, "name"],
)
JOB_GOODPUT = Gauge(
    "ddp_job_goodput_ratio",
    "The job's effective training time ratio, 1 - time its failures cost / time since its start, "
    "as of its last status write",
    JOB,
)
_reported: dict[tuple[str, str], set[str]] = {}  # the metric names each job's gauges carry


def job_progress(namespace: str, job: str, progress: Mapping[str, Any], at: float) -> None:
    """Set a job's gauges from its latest report (``status.progress``) taken at ``at``."""
    key = (namespace, job)
    names = _reported.setdefault(key, set())
    JOB_STEP.labels(*key).set(progress["step"])
    JOB_REPORTED.labels(*key).set(at)
    for gauge, field in ((JOB_PROGRESS, "percent"), (JOB_ETA, "etaSeconds")):
        if field in progress:
            gauge.labels(*key).set(progress[field] / 100 if field == "percent" else progress[field])
    for name in names - set(progress["metrics"]):
        JOB_METRIC.remove(*key, name)
    for name, value in progress["metrics"].items():
        JOB_METRIC.labels(*key, name).set(value)
    _reported[key] = set(progress["metrics"])


def forget_job(namespace: str, job: str) -> None:
    """Drop a deleted job's gauges."""
    key = (namespace, job)
    with contextlib.suppress(KeyError):
        JOB_GOODPUT.remove(*key)
    names = _reported.pop(key, None)
    if names is None:
        return
    for gauge in (JOB_PROGRESS, JOB_STEP, JOB_ETA, JOB_REPORTED):
        with contextlib.suppress(KeyError):
            gauge.remove(*key)
    for name in names:
        JOB_METRIC.remove(*key, name)


def api_call(verb: str, code: int | None, expected: Iterable[int] = ()) -> None:
    """Count one API request; errors (>= 400, other than the expected ones) separately."""
    label = str(code or 0)
    API_REQUESTS.labels(verb, label).inc()
    if code is None or (code >= 400 and code not in expected):
        API_ERRORS.labels(verb, label).inc()


class JobsByPhase(Collector):
    """``ddp_operator_jobs{phase}``: the jobs this operator tracks, by status phase."""

    def __init__(self, phases: Callable[[], Iterable[str]]):
        self.phases = phases

    def collect(self) -> Iterator[GaugeMetricFamily]:
        counts = Tally(self.phases())
        family = GaugeMetricFamily("ddp_operator_jobs", "DDPJobs by phase", labels=["phase"])
        for phase in sorted(set(PHASES) | set(counts)):
            family.add_metric([phase], counts.get(phase, 0))
        yield family


def serve(port: int, phases: Callable[[], Iterable[str]]) -> None:
    """Register the jobs gauge and serve /metrics on ``port`` (all interfaces)."""
    REGISTRY.register(JobsByPhase(phases))
    start_http_server(port)
