"""A failed trainer's last words (``decide.last_words``), read from termination messages that real
containers left on the local cluster's real node (tests/data/termination/README.md says how each
was made), and from a few written here (NCCL's words, a CUDA OOM, an error JSON's forms)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddp_operator.decide.last_words import LIMIT, LastWords, looks_collateral, read

DATA = Path(__file__).parent / "data" / "termination"
BAD = "ValueError: bad batch 17 in shard 3"
GLOO = "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:561] "


def message(name: str) -> str:
    return json.loads((DATA / f"{name}.json").read_text())["message"]


@pytest.mark.parametrize(
    ("name", "local_rank", "summary", "collateral"),
    [
        ("a", 1, "exit code 1 (no traceback: no error file from @record)", False),
        ("b", 1, BAD, False),
        ("b-root", 1, BAD, False),
        ("b-deep", 1, BAD, False),
        ("c", 1, BAD, False),
        ("d-raise", None, BAD, False),
        ("d-exit", None, "config invalid: batch_size must be positive", False),
        ("e-oom", None, "allocating 512 MB", False),
        ("f-exit", 1, "exit code 3 (no traceback: no error file from @record)", False),
        ("f-exit-rec", 0, GLOO + "Connection closed by peer", True),
        ("g-json", None, BAD, False),
        ("h-sigterm", None, "torch.distributed.elastic.multiprocessing.api.SignalException", True),
        ("i-refused", None, "torch.distributed.DistNetworkError: The client socket", True),
        ("j-kill", 1, "Signal 9 (SIGKILL) received by PID 14", False),
        ("m0", 1, GLOO + "Connection closed by peer", True),
        ("m1", 1, BAD, False),
        ("n0", 0, BAD, False),
        ("n1", 1, GLOO + "Connection closed by peer", True),
    ],
)
def test_real_messages(name: str, local_rank: int | None, summary: str, collateral: bool) -> None:
    words = read(message(name))
    assert words.local_rank == local_rank
    assert words.summary.startswith(summary)
    assert looks_collateral(message(name)) is collateral
    assert 0 < len(words.lines) <= LIMIT
    assert "=====" not in words.lines and "To enable traceback" not in words.lines


def test_the_root_cause_is_trusted_over_torchruns_own_errors() -> None:
    # b: torchrun could not replace /dev/termination-log; its PermissionError ends the log, and
    # the other rank's collateral gloo error precedes the Root Cause block.
    text = message("b")
    assert text.rstrip().endswith("Permission denied: '/dev/termination-log'")
    words = read(text)
    assert words.summary == BAD
    assert words.lines.startswith("rank      : 1 (local_rank: 1)")
    assert words.lines.endswith(BAD)
    assert "PermissionError" not in words.lines and "Connection closed" not in words.lines
    assert "^^^" not in words.lines


def test_the_error_json_and_its_cut_head() -> None:
    words = read(message("g-json"))
    assert words.lines.startswith("Traceback (most recent call last):")
    assert words.lines.endswith(BAD)
    cut = message("g-long")  # the kubelet kept the file's last 4096 bytes
    assert len(cut.encode()) == 4096 and not cut.startswith("{")
    words = read(cut)
    assert words.summary.startswith("ail detail") and len(words.summary) <= 512
    assert '"timestamp"' not in words.lines and "\\n" not in words.lines
    assert len(words.lines) <= LIMIT


def test_error_json_forms() -> None:
    stack = f'Traceback (most recent call last):\n  File "t.py", line 3, in main\n    x()\n{BAD}\n'
    dumped = {"message": {"message": BAD, "extraInfo": {"py_callstack": stack, "timestamp": "1"}}}
    dumped["message"]["errorCode"] = 1  # torchrun's copy of the root cause's file adds it
    assert read(json.dumps(dumped)).summary == BAD
    assert read(json.dumps({"message": "the store went away"})).summary == "the store went away"
    no_stack = {"message": {"message": BAD, "extraInfo": {"timestamp": "1"}}}
    assert read(json.dumps(no_stack)) == LastWords(None, BAD, BAD)
    assert read('{"step": 17}').summary == '{"step": 17}'  # not torchrun's: a plain line


def test_empty() -> None:
    assert read(None) == read("") == read("\n  \n") == LastWords(None, "", "")
    assert not looks_collateral(None) and not looks_collateral("")


def test_a_ranks_own_lines_name_its_error_without_error_file() -> None:
    tail = "\n".join(
        [
            "[rank2]: Traceback (most recent call last):",
            '[rank2]:   File "/scripts/train.py", line 26, in main',
            f"[rank2]: {GLOO}Connection closed by peer [10.0.0.1]:1.",
            "[rank3]: Traceback (most recent call last):",
            '[rank3]:   File "/scripts/train.py", line 13, in step',
            f"[rank3]: {BAD}",
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
            "=" * 60,
            "train.py FAILED",
            "Root Cause (first observed failure):",
            "[0]:",
            "  time      : 2026-11-26_09:15:19",
            "  rank      : 3 (local_rank: 1)",
            "  exitcode  : 1 (pid: 12) ",
            "  error_file: <N/A>",
            "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
            "=" * 60,
        ]
    )
    assert read(tail) == LastWords(1, BAD, "rank      : 3 (local_rank: 1)\nexitcode  : 1 (pid: 12)")


NCCL = (
    "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/"
    "ProcessGroupNCCL.cpp:3356, remote process exited or there was a network error, NCCL version"
    " 2.21.5\nncclRemoteError: A call failed possibly due to a network error or a remote process"
    " exiting prematurely.\nLast error:\nsocketProgress: Connection closed by remote peer"
)


@pytest.mark.parametrize(
    ("text", "collateral"),
    [
        (f'Traceback (most recent call last):\n  File "t.py", line 1, in <module>\n{NCCL}', True),
        ("[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9)", True),
        ("RuntimeError: NCCL communicator was aborted on rank 1.", True),
        ("RuntimeError: [../gloo/transport/tcp/pair.cc:534] Connection reset by peer", True),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", False),
        (BAD, False),
    ],
)
def test_collateral_words(text: str, collateral: bool) -> None:
    assert looks_collateral(text) is collateral


def test_a_multiline_exception_keeps_its_lines() -> None:
    words = read(f'Traceback (most recent call last):\n  File "t.py", line 1, in <module>\n{NCCL}')
    assert words.summary.startswith("torch.distributed.DistBackendError: NCCL error in:")
    assert words.lines.endswith("socketProgress: Connection closed by remote peer")


def test_lines_keep_whole_lines_within_the_limit() -> None:
    log = "\n".join(f"step {i}: loss {i / 7:.6f}" for i in range(400))
    words = read(log)
    assert words.summary == "step 399: loss 57.000000"
    assert len(words.lines) <= LIMIT and words.lines.startswith("step ")
    assert words.lines.endswith("step 399: loss 57.000000")
    long = "x" * 5000
    assert len(read(long).lines) == LIMIT and len(read(long).summary) == 512
