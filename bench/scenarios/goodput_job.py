"""S9's plan, pure: the configurations compared, the seeded failure schedule, and the DDPJob that
runs ``goodput_train.py`` on the real node (the script's text handed over as ``python3 -c``, as
S7's is; its checkpoint and records in a host folder)."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddp_operator.model import constants as c

from scenarios.recovery import ON_REAL_NODE

SCRIPT = (Path(__file__).parent / "goodput_train.py").read_text()
STEP_S = 0.5  # each step's time: compute, the all_reduce, then sleep for the rest
EVERY = 10  # a checkpoint every EVERY steps
WORKERS = 2
MEMORY = "1Gi"  # the trainer's limit: "oom" touches 2 GiB
KINDS = ("crash", "oom", "hang", "evict")
STALL_TIMEOUT = 30  # seconds: the least spec.stallDetection.timeoutSeconds, to fit the bench
SLACK = 60  # seconds past a hang's expected end before the bench says it did not end


@dataclass(frozen=True)
class Config:
    """One way of running the same job: its restart strategy, stall detection, the script's
    gloo timeout (``init_process_group(timeout=)``: gloo's own end to a hang), and whether it
    reports its progress."""

    name: str
    strategy: str
    stall: dict[str, Any]
    gloo_timeout: int
    reports: bool = True  # False: the script as it would be with no progress code (no report)

    @property
    def hang_ends_in(self) -> int:
        """Seconds after which a hang must have been ended (by the operator or by gloo)."""
        on = self.stall.get("enabled", True)
        return (self.stall["timeoutSeconds"] if on else self.gloo_timeout) + SLACK

    @property
    def title(self) -> str:
        """In words, for the table: "InPlace, stall detection 30 s"."""
        if self.stall.get("enabled", True):
            said = "" if self.reports else ", no progress reported"
            return f"{self.strategy}, stall detection {self.stall['timeoutSeconds']} s{said}"
        return f"{self.strategy}, stall detection off, gloo timeout {self.gloo_timeout} s"


ON = {"enabled": True, "timeoutSeconds": STALL_TIMEOUT}
CONFIGS = {
    # gloo's timeout well past the stall timeout: the operator must be first
    "defaults": Config("defaults", c.RESTART_IN_PLACE, ON, 600),
    "stall-off": Config("stall-off", c.RESTART_IN_PLACE, {"enabled": False}, 90),
    "recreate": Config("recreate", c.RESTART_RECREATE, ON, 600),
    # the script with no progress code: hangs found from the workers' processes (issue 54)
    "unmodified": Config("unmodified", c.RESTART_IN_PLACE, ON, 600, reports=False),
}


def schedule(seed: int, steps: int, kinds: Sequence[str]) -> list[dict[str, Any]]:
    """One failure per attempt, in an order and at steps and workers the seed fixes: attempt i
    fails near step (i + 1) x steps / (n + 1). Each comes at least 4 steps after the previous one
    (its attempt has reported), and 2 x EVERY + 4 after an eviction (the bench evicts once the
    job's status shows the step; the status is written every 5 s, so it may act 10 steps late)."""
    rng = random.Random(seed)
    order = list(kinds)
    rng.shuffle(order)
    span = steps // (len(order) + 1)
    found: list[dict[str, Any]] = []
    for attempt, kind in enumerate(order):
        at = (attempt + 1) * span + rng.randint(-span // 4, span // 4)
        if found:
            prev = found[-1]
            at = max(at, prev["step"] + (2 * EVERY + 4 if prev["kind"] == "evict" else 4))
        worker = rng.randrange(WORKERS)
        found.append({"attempt": attempt, "step": at, "kind": kind, "worker": worker})
    if found and found[-1]["step"] >= steps:
        raise ValueError(f"{steps} steps are too few for {len(order)} failures: {found}")
    return found


def job(
    name: str,
    ns: str,
    image: str,
    config: Config,
    failures: list[dict[str, Any]],
    steps: int,
    out: Path,
) -> dict[str, Any]:
    """The DDPJob: 2 workers x 1 process (gloo, ``env://``), its host folder ``out``."""
    env = {
        "S9_OUT": str(out),
        "S9_STEPS": str(steps),
        "S9_STEP_S": str(STEP_S),
        "S9_EVERY": str(EVERY),
        "S9_FAILURES": json.dumps(failures),
        "S9_GLOO_TIMEOUT": str(config.gloo_timeout),
        "S9_REPORT": "1" if config.reports else "0",
        "DDP_PROGRESS_INTERVAL": "1",  # a report a second: the status follows every step
    }
    container = {
        "name": "trainer",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python3", "-c", SCRIPT],
        "env": [{"name": k, "value": v} for k, v in env.items()],
        "resources": {"limits": {"memory": MEMORY}},
        "volumeMounts": [{"name": "out", "mountPath": str(out)}],
    }
    spec = {
        **ON_REAL_NODE,
        "terminationGracePeriodSeconds": 5,
        "containers": [container],
        "volumes": [{"name": "out", "hostPath": {"path": str(out), "type": "Directory"}}],
    }
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "nodes": WORKERS,
            "procsPerNode": 1,
            "backend": "gloo",
            "backoffLimit": 10,
            "restartStrategy": config.strategy,
            "stallDetection": config.stall,
            "template": {"spec": spec},
        },
    }
