"""The progress endpoint the training scripts report to (``ddp_operator.progress``), and who
sent a report: the API server's TokenReview of the pod-bound token the report carries.

``POST /v1/namespaces/<ns>/ddpjobs/<job>/progress`` with ``Authorization: Bearer <token>``, the
token the kubelet projected into the pod for the audience ``PROGRESS_AUDIENCE``. aiohttp is
kopf's own web server (its liveness endpoint): no new dependency.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from ..model import constants as c
from .kube import Kube

REVIEWED_FOR = 60.0  # seconds a token's review is reused
MAX_REVIEWS = 10_000  # tokens remembered at most
MAX_BODY = 16 * 1024
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


def sender_of(review: dict[str, Any]) -> Sender:
    """The pod a TokenReview's answer names, or why none."""
    status = review.get("status") or {}
    if not status.get("authenticated"):
        return Sender(refused=f"the token is not valid: {status.get('error') or 'rejected'}")
    user = status.get("user") or {}
    parts = (user.get("username") or "").split(":")
    extra = user.get("extra") or {}
    pod, uid = (extra.get(POD_NAME) or [""])[0], (extra.get(POD_UID) or [""])[0]
    if len(parts) != 4 or parts[:2] != ["system", "serviceaccount"] or not pod or not uid:
        return Sender(refused="the token is no pod's service account token")
    return Sender(namespace=parts[2], pod=pod, pod_uid=uid)


class TokenReviewer:
    """TokenReviews of report tokens, each answer reused for REVIEWED_FOR seconds."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self._seen: dict[str, tuple[float, Sender]] = {}

    async def sender(self, token: str) -> Sender:
        key = hashlib.sha256(token.encode()).hexdigest()
        now = time.monotonic()
        hit = self._seen.get(key)
        if hit is not None and hit[0] > now:
            return hit[1]
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token, "audiences": [c.PROGRESS_AUDIENCE]},
        }
        data = await self.kube._call(
            "create_tokenreview", "POST", "/apis/authentication.k8s.io/v1/tokenreviews", body
        )
        who = sender_of(json.loads(data))
        if len(self._seen) >= MAX_REVIEWS:
            self._seen = {k: v for k, v in self._seen.items() if v[0] > now}
            if len(self._seen) >= MAX_REVIEWS:
                self._seen.clear()
        self._seen[key] = (now + REVIEWED_FOR, who)
        return who


Accept = Callable[[str, str, Sender, Any], Awaitable[tuple[int, str]]]


def app(
    reviewer: TokenReviewer, accept: Accept, ready: Callable[[], bool] = lambda: True
) -> web.Application:
    """The endpoint: a report's sender reviewed, then ``accept(namespace, job, sender,
    payload)`` answers with an HTTP status and a message. ``/readyz`` answers 200 while this
    replica takes reports (``ready``: not a paused standby), else 503, for a Service to send
    them to the active replica only."""

    async def readyz(_: web.Request) -> web.Response:
        if ready():
            return web.Response(text="ok\n")
        return web.Response(status=503, text="a standby: another replica is active\n")

    async def post(request: web.Request) -> web.Response:
        auth = request.headers.get("Authorization", "")
        if not auth.startswith("Bearer "):
            return web.Response(status=401, text="a report needs the pod's progress token\n")
        try:
            payload = json.loads(await request.read())
        except ValueError as exc:
            return web.Response(status=400, text=f"the report is no JSON: {exc}\n")
        try:
            sender = await reviewer.sender(auth.removeprefix("Bearer ").strip())
        except Exception as exc:  # (the API server's answer goes to the sender)
            return web.Response(status=503, text=f"cannot review the token: {exc}\n")
        if sender.refused:
            return web.Response(status=401, text=sender.refused + "\n")
        ns, name = request.match_info["namespace"], request.match_info["name"]
        status, message = await accept(ns, name, sender, payload)
        return web.Response(status=status, text=message + "\n", content_type="text/plain")

    application = web.Application(client_max_size=MAX_BODY)
    application.router.add_post(ROUTE, post)
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
