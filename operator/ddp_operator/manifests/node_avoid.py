"""The node affinity that keeps a worker pod off the nodes its job keeps out
(``decide/exclusion``). Pure.

``metadata.name NotIn [node]`` ``matchFields`` requirements, one per node (the API server takes
one value only in a node field selector's In or NotIn; a term's requirements are ANDed), added to
every term of the template's own required node affinity (the terms are ORed: each must keep the
nodes out), or as the one term where the template has none. The template's other requirements
and preferences stay as they are.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any


def requirements(nodes: Sequence[str]) -> list[dict[str, Any]]:
    """The field requirements that keep a pod off ``nodes``, one per node."""
    return [
        {"key": "metadata.name", "operator": "NotIn", "values": [node]}
        for node in sorted(set(nodes))
    ]


def keep_off(pod: dict[str, Any], nodes: Sequence[str]) -> dict[str, Any]:
    """``pod`` (a manifest, changed in place and returned) kept off ``nodes`` (none: as it
    is)."""
    if not nodes:
        return pod
    spec = pod.setdefault("spec", {})
    affinity = spec.setdefault("affinity", {})
    node = affinity.setdefault("nodeAffinity", {})
    required = node.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = [copy.deepcopy(t) for t in required.get("nodeSelectorTerms") or ()] or [{}]
    for term in terms:  # the requirements of a term are ANDed: the template's own stay
        term["matchFields"] = [*(term.get("matchFields") or ()), *requirements(nodes)]
    required["nodeSelectorTerms"] = terms
    return pod
