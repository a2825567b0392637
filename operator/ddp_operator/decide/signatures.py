"""Hardware signatures: the lines in a failed rank's output that say its node's accelerator
broke, not its script. Pure; ``blame`` reads them on the deciding rank's block
(``LastWords.block``) and on its last lines.

Each signature is built in, with a fixture of the output it is written from
(``tests/test_signatures.py``). A failure-policy rule with ``blameNode: true`` adds more, in RE2
(``model/failure_policy``). What no signature matches blames nothing by its words: a Python
exception of the script's own (``ValueError``), a CUDA out-of-memory, an illegal memory access
of a kernel (Xid 13, 31, 43 are the application's).

The patterns are the operator's own, fixed and short (no nested repeats): Python's ``re`` runs
them in time linear in the text, on at most ``last_words.LIMIT`` characters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# NVIDIA's Xid catalogue (docs.nvidia.com/deploy/xid-errors): the Xids that mean the GPU, its
# memory, its NVLink or its driver's hold on it failed (48 double-bit ECC, 63/64 row remapping,
# 74 NVLink, 79 fallen off the bus, 92 high single-bit ECC rate, 94/95 contained/uncontained
# ECC, 119/120 GSP, 140 unrecovered ECC). 13, 31, 43 (a kernel's fault) are left out.
HARDWARE_XIDS = frozenset((48, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140))


@dataclass(frozen=True)
class Signature:
    """One hardware signature: its name (the evidence says it), what it means, its pattern,
    and a second one the output must also hold (None: none)."""

    name: str
    means: str
    pattern: re.Pattern[str]
    also: re.Pattern[str] | None = None


SIGNATURES = (
    Signature(
        "cuda-ecc",
        "CUDA: uncorrectable ECC error",
        re.compile(r"uncorrectable ECC error encountered"),
    ),
    Signature(
        "cuda-nvlink",
        "CUDA: uncorrectable NVLink error",
        re.compile(r"uncorrectable NVLink error detected"),
    ),
    Signature(
        "gpu-fallen-off-bus",
        "the GPU has fallen off the bus",
        re.compile(r"(?i)GPU has fallen off the bus"),
    ),
    Signature(
        "nccl-cuda",
        "NCCL: unhandled CUDA error",
        re.compile(r"unhandled cuda error"),
    ),
    Signature(
        "nccl-system",
        "NCCL: unhandled system error of the device (CUDA, NVML or the NIC)",
        re.compile(r"unhandled system error"),
        re.compile(r"NCCL WARN [^\n]*(?:Cuda failure|NVML|nvml|ibv_|IBV_|mlx5)"),
    ),
    Signature(
        "ascend-device-fault",
        "Ascend: the device faulted (driver internal error, HDC disconnect)",
        re.compile(r"\[driver error:internal error\]|\[hdc disconnect\]|\b507899\b|\b507901\b"),
    ),
)

_XID = re.compile(r"NVRM: Xid \(PCI:[0-9A-Fa-f:.]+\): (\d+),|\bXid (\d+)\b")


@dataclass(frozen=True)
class Found:
    """A signature found: its name, what it means and the line it was found on (trimmed)."""

    name: str
    means: str
    line: str


def _line(text: str, start: int) -> str:
    begin = text.rfind("\n", 0, start) + 1
    end = text.find("\n", start)
    return text[begin : end if end >= 0 else len(text)].strip()[:200]


def find(text: str) -> Found | None:
    """The first hardware signature in ``text`` (a rank's block), or None."""
    for sig in SIGNATURES:
        if (match := sig.pattern.search(text)) is not None and (
            sig.also is None or sig.also.search(text) is not None
        ):
            return Found(sig.name, sig.means, _line(text, match.start()))
    for match in _XID.finditer(text):
        xid = int(match.group(1) or match.group(2))
        if xid in HARDWARE_XIDS:
            return Found(f"xid-{xid}", f"NVIDIA Xid {xid}", _line(text, match.start()))
    return None
