"""The progress endpoint the training scripts report to (``ddp_operator.progress``), and who
sent a report: the API server's TokenReview of the pod-bound token the report carries.

``POST /v1/namespaces/<ns>/ddpjobs/<job>/progress`` with ``Authorization: Bearer <token>``, the
token the kubelet projected into the pod for the audience ``PROGRESS_AUDIENCE``; also Kubeflow
Trainer's ``POST /apis/trainer.kubeflow.org/v1alpha1/namespaces/<ns>/trainjobs/<job>/status``
(``decide/kubeflow_status``: Hugging Face's ``KubeflowCallback`` posts there), answered 200 with
a JSON body when taken, as Kubeflow's own server does. aiohttp is
kopf's own web server (its liveness endpoint): no new dependency.

Whoever reaches the endpoint can send anything, so nothing of a request is read before its
token is reviewed, and a review is asked of the API server only for a token that names a worker
pod of a job the operator runs, sent from that pod's address (``report_gate``): a stranger's
requests cost a header's parsing, never a review. Each pod's new tokens are bounded by a budget
of its own (``report_gate.ReviewBudget``; past it: 429), so no sender can hold another's reports
back. A review's answer is reused for REVIEWED_FOR seconds; a token the API server vouched for
is reviewed again without the budget.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from ..decide import kubeflow_status, report_gate
from ..model import constants as c
from ..model.workers import WorkerPod
from . import metrics
from .kube import Kube

REVIEWED_FOR = 60.0  # seconds a token's review is reused
MAX_REVIEWS = 10_000  # tokens remembered at most
MAX_BODY = 16 * 1024
JWT = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")
POD_NAME = "authentication.kubernetes.io/pod-name"
POD_UID = "authentication.kubernetes.io/pod-uid"
ROUTE = "/v1/namespaces/{namespace}/ddpjobs/{name}/progress"


@dataclass(frozen=True)
class Sender:
    """Who a token stands for: a service account's pod, or nobody (``refused`` says why)."""

    namespace: str = ""
    pod: str = ""
    pod_uid: str = ""
    refused: str = ""
    stranger: bool = False  # refused before any review: no worker pod of ours sent it


def sender_of(review: dict[str, Any]) -> Sender:
    """The pod a TokenReview's answer names, or why none."""
    status = review.get("status") or {}
    if not status.get("authenticated"):
        return Sender(refused=f"the token is not valid: {status.get('error') or 'rejected'}")
    if c.PROGRESS_AUDIENCE not in (status.get("audiences") or ()):
        return Sender(refused=f"the token is not for the audience {c.PROGRESS_AUDIENCE}")
    user = status.get("user") or {}
    parts = (user.get("username") or "").split(":")
    extra = user.get("extra") or {}
    pod, uid = (extra.get(POD_NAME) or [""])[0], (extra.get(POD_UID) or [""])[0]
    if len(parts) != 4 or parts[:2] != ["system", "serviceaccount"] or not pod or not uid:
        return Sender(refused="the token is no pod's service account token")
    return Sender(namespace=parts[2], pod=pod, pod_uid=uid)


class Busy(Exception):
    """The sender's pod has too many new tokens to review now: to be sent again later."""


Worker = Callable[[str], WorkerPod | None]


class TokenReviewer:
    """TokenReviews of report tokens, each answer reused for REVIEWED_FOR seconds; only for a
    token that names a worker pod of a job the operator runs (``worker``: the pod with a UID,
    if so), sent from its address or a ``trusted`` network (loopback always), within its pod's
    ``budget``."""

    def __init__(
        self,
        kube: Kube,
        worker: Worker,
        trusted: tuple[report_gate.Network, ...] = (),
        budget: report_gate.ReviewBudget | None = None,
    ) -> None:
        self.kube, self.worker = kube, worker
        self.trusted = report_gate.networks(report_gate.LOOPBACK) + trusted
        self.budget = budget or report_gate.ReviewBudget()
        self._seen: dict[str, tuple[float, Sender]] = {}
        self._good: set[str] = set()  # tokens a review found a pod's: never held by the budget

    async def sender(self, token: str, source: str) -> Sender:
        """Who ``token``, sent from the address ``source``, stands for; Busy past its pod's
        budget of new reviews."""
        if not JWT.fullmatch(token):
            return Sender(refused="the token is no service account token (not a JWT)")
        claim = report_gate.claim_of(token)
        refused, budget = report_gate.refusal(source, claim, self.worker, self.trusted)
        if refused:
            return Sender(refused=refused, stranger=True)
        assert claim is not None  # (refused otherwise)
        key = hashlib.sha256(token.encode()).hexdigest()
        now = time.monotonic()
        hit = self._seen.get(key)
        if hit is not None and hit[0] > now:
            return hit[1]
        if key not in self._good and not self.budget.spend(budget, now):
            raise Busy(f"too many new tokens of pod {claim.pod} to review: send again")
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token, "audiences": [c.PROGRESS_AUDIENCE]},
        }
        data = await self.kube._call(
            "create_tokenreview", "POST", "/apis/authentication.k8s.io/v1/tokenreviews", body
        )
        who = sender_of(json.loads(data))
        if not who.refused and who.pod_uid != claim.pod_uid:  # (a signed payload: never)
            who = Sender(refused=f"the token is bound to pod {who.pod}, not {claim.pod}")
        if not who.refused:
            if len(self._good) >= MAX_REVIEWS:
                self._good.clear()
            self._good.add(key)
        if len(self._seen) >= MAX_REVIEWS:
            self._seen = {k: v for k, v in self._seen.items() if v[0] > now}
            if len(self._seen) >= MAX_REVIEWS:
                self._seen.clear()
        self._seen[key] = (now + REVIEWED_FOR, who)
        return who


Accept = Callable[[str, str, Sender, Any, bool, datetime], Awaitable[tuple[int, str]]]


def app(
    reviewer: TokenReviewer, accept: Accept, ready: Callable[[], bool] = lambda: True
) -> web.Application:
    """The endpoint: a report's sender reviewed, then ``accept(namespace, job, sender,
    payload, kubeflow, received)`` answers with an HTTP status and a message (``kubeflow``: a
    status update of Kubeflow Trainer's protocol; ``received``: when it came, before its
    review, which may take the API server a while: the report's time). ``/readyz`` answers 200
    while this replica takes reports (``ready``: not a paused standby), else 503, for a Service
    to send them to the active replica only."""

    async def readyz(_: web.Request) -> web.Response:
        if ready():
            return web.Response(text="ok\n")
        return web.Response(status=503, text="a standby: another replica is active\n")

    async def post(request: web.Request) -> web.Response:
        received = datetime.now(UTC)
        auth = request.headers.get("Authorization", "")
        if not auth.startswith("Bearer "):
            return web.Response(status=401, text="a report needs the pod's progress token\n")
        try:  # the sender first: nothing else of the request is read for a stranger
            token = auth.removeprefix("Bearer ").strip()
            sender = await reviewer.sender(token, request.remote or "")
        except Busy as exc:
            metrics.PROGRESS_REPORTS.labels("busy").inc()
            return web.Response(status=429, text=f"{exc}\n", headers={"Retry-After": "1"})
        except Exception as exc:  # (the API server's answer goes to the sender)
            return web.Response(status=503, text=f"cannot review the token: {exc}\n")
        if sender.stranger:
            metrics.PROGRESS_REPORTS.labels("stranger").inc()
            return web.Response(status=403, text=sender.refused + "\n")
        if sender.refused:
            metrics.PROGRESS_REPORTS.labels("unauthenticated").inc()
            return web.Response(status=401, text=sender.refused + "\n")
        try:
            payload = json.loads(await request.read())
        except ValueError as exc:
            return web.Response(status=400, text=f"the report is no JSON: {exc}\n")
        ns, name = request.match_info["namespace"], request.match_info["name"]
        kubeflow = request.match_info.route.resource is not None and (
            request.match_info.route.resource.canonical == kubeflow_status.ROUTE
        )
        status, message = await accept(ns, name, sender, payload, kubeflow, received)
        if kubeflow and status < 300:  # Kubeflow's server: 200 and a JSON body
            return web.json_response({"message": message}, status=200)
        return web.Response(status=status, text=message + "\n", content_type="text/plain")

    application = web.Application(client_max_size=MAX_BODY)
    application.router.add_post(ROUTE, post)
    application.router.add_post(kubeflow_status.ROUTE, post)
    application.router.add_get("/readyz", readyz)
    return application


async def serve(
    address: str, reviewer: TokenReviewer, accept: Accept, ready: Callable[[], bool] = lambda: True
) -> web.AppRunner:
    """Serve the endpoint on ``address`` (host:port) until the runner is cleaned up."""
    host, _, port = address.rpartition(":")
    runner = web.AppRunner(app(reviewer, accept, ready), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host or "0.0.0.0", int(port)).start()
    return runner
