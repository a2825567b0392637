"""Who may cost the API server a TokenReview: a progress report is reviewed only when it can come
from a worker pod of a job the operator runs, and each such pod has a review budget of its own.

A service account token is a JWT whose payload names the pod it is bound to
(``kubernetes.io.pod``). That payload is read here unverified, only to pick the pod the sender
claims to be: the claim must name a worker pod the operator's watch knows, and the request must
come from that pod's own address (or from a network the operator was told to trust: loopback
always, a proxy or a network that rewrites pods' addresses; or the watch has not seen the
pod's address yet). Anything else is refused before any review, at the cost of parsing one
header. What the API server's review then says decides (``progress_server.sender_of``); the
claim only routes the request to a budget: the pod's own for what comes from its address, which
no stranger can spend, and one it shares with whoever else names it (from a trusted network).
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..model.workers import WorkerPod

MAX_TOKEN = 8 * 1024  # bytes of a token read at most (a pod's is about 1 KB)
REVIEWS_PER_SECOND = 0.1  # a pod's new tokens reviewed, after its burst: one each 10 s
REVIEWS_BURST = 5  # a pod's first tokens: its own, then each renewal (80% of its lifetime)
MAX_BUDGETS = 100_000  # pods' budgets kept at most
LOOPBACK = ("127.0.0.0/8", "::1/128")  # always trusted: the operator's own pod or host
OWN, SHARED = "own", "shared"  # a pod's budgets: from its own address, from anywhere else

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class Claim:
    """The pod a token says it is bound to (unverified)."""

    namespace: str
    pod: str
    pod_uid: str


def claim_of(token: str) -> Claim | None:
    """The pod a service account token's payload names, or None if it names none."""
    parts = token.split(".")
    if len(token) > MAX_TOKEN or len(parts) != 3:
        return None
    try:
        raw = base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4))
        payload: Any = json.loads(raw)
    except (binascii.Error, ValueError, RecursionError):  # (JSON nested past the stack)
        return None
    k8s = payload.get("kubernetes.io") if isinstance(payload, dict) else None
    pod = k8s.get("pod") if isinstance(k8s, dict) else None
    if not isinstance(pod, dict):
        return None
    ns, name, uid = k8s.get("namespace"), pod.get("name"), pod.get("uid")
    if not all(isinstance(x, str) and x for x in (ns, name, uid)):
        return None
    return Claim(ns, name, uid)


def networks(cidrs: Iterable[str]) -> tuple[Network, ...]:
    """Parsed CIDRs (ValueError naming the bad one)."""
    found = []
    for cidr in cidrs:
        try:
            found.append(ipaddress.ip_network(cidr.strip(), strict=False))
        except ValueError as exc:
            raise ValueError(f"not a network: {cidr!r} ({exc})") from None
    return tuple(found)


def _address(source: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        address = ipaddress.ip_address(source.split("%")[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        return address.ipv4_mapped
    return address


def refusal(
    source: str,
    claim: Claim | None,
    worker: Callable[[str], WorkerPod | None],
    trusted: tuple[Network, ...],
) -> tuple[str, str]:
    """Why a request from ``source`` with a token claiming ``claim`` gets no review ('' if it
    may have one), and the budget it is charged to: the claimed pod's own (``OWN``: it comes
    from that pod's address, which no one else can send from) or the budget its claim shares
    with everyone else who names that pod (a trusted network, or before the watch has seen the
    pod's address). ``worker``: the worker pod of a job the operator runs with that UID, if
    any."""
    if claim is None:
        return "the token names no pod (not a pod's service account token)", ""
    pod = worker(claim.pod_uid)
    if pod is None or pod.name != claim.pod:
        return f"pod {claim.namespace}/{claim.pod} is no worker of a job this operator runs", ""
    address = _address(source)
    if address is not None and address in {_address(ip) for ip in pod.ips}:
        return "", f"{claim.pod_uid}/{OWN}"
    if not pod.ips:  # its first report may outrun the watch
        return "", f"{claim.pod_uid}/{SHARED}"
    if address is not None and any(address in n for n in trusted if n.version == address.version):
        return "", f"{claim.pod_uid}/{SHARED}"
    return (
        f"the report comes from {source or 'an unknown address'}, not pod {claim.pod}'s address",
        "",
    )


class ReviewBudget:
    """A token bucket for each key (a pod's budget, ``refusal``): its new tokens reviewed,
    ``burst`` at once, then ``per_second``. One key's budget is no other's."""

    def __init__(self, per_second: float = REVIEWS_PER_SECOND, burst: int = REVIEWS_BURST) -> None:
        self.per_second, self.burst = per_second, burst
        self._left: dict[str, tuple[float, float]] = {}  # pod UID -> (reviews left, at)

    def spend(self, key: str, now: float) -> bool:
        """Take one review from the key's bucket, if one is left."""
        left, at = self._left.get(key, (float(self.burst), now))
        left = min(float(self.burst), left + max(0.0, now - at) * self.per_second)
        if left < 1:
            self._left[key] = (left, now)
            return False
        if len(self._left) >= MAX_BUDGETS and key not in self._left:
            self._prune(now)
        self._left[key] = (left - 1, now)
        return True

    def _prune(self, now: float) -> None:
        """Forget full buckets (a forgotten pod starts full: nothing is lost)."""
        full = self.burst / self.per_second
        self._left = {u: (n, t) for u, (n, t) in self._left.items() if now - t < full}
        if len(self._left) >= MAX_BUDGETS:
            self._left.clear()
