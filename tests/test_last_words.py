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
        ("j-kill", 1, "killed by SIGKILL, no exception in its output", False),
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
    assert read(json.dumps(no_stack)) == LastWords(None, BAD, BAD, exception=True)
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
    own = 'Traceback (most recent call last):\n  File "/scripts/train.py", line 13, in step\n'
    block = "rank      : 3 (local_rank: 1)\nexitcode  : 1 (pid: 12)"
    want = LastWords(1, BAD, f"{own}{BAD}\n{block}", rank=3, exception=True)
    assert read(tail) == want  # rank 2's left out


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


TORCH = Path(__file__).parent / "data" / "torch"  # constructed, not recorded: see its README
TIMEOUT = (
    "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, "
    "NumelIn=1, NumelOut=1, Timeout(ms)=20000) ran for 20032 milliseconds before timing out."
)


def log(name: str, cut: bool = False) -> str:
    """A constructed log, whole (a log read) or as the kubelet keeps it (2048 bytes, 80 lines)."""
    text = (TORCH / f"{name}.log").read_text()
    return (
        "\n".join(text.encode()[-2048:].decode(errors="ignore").splitlines()[-80:]) if cut else text
    )


@pytest.mark.parametrize("cut", [False, True])
def test_an_nccl_timeout_names_the_collective_not_a_frame(cut: bool) -> None:
    words = read(log("nccl-timeout-python", cut), exit_code=134)
    assert words.summary == f"c10::DistBackendError: {TIMEOUT}"
    assert (words.rank, words.collective.op, words.collective.seq) == (0, "ALLREDUCE", 2)
    assert words.collective.line == (None if cut else "train.py:5")  # printed 5 KB before the end
    assert words.collateral
    assert "frame #" not in words.lines and "Exception raised from" not in words.lines


def test_under_torchrun_a_signal_reads_the_ranks_own_exception() -> None:
    words = read(log("nccl-timeout-torchrun"), exit_code=1)
    assert words.summary == f"c10::DistBackendError: {TIMEOUT}"
    assert (words.rank, words.local_rank, words.collective.line) == (1, 1, "train.py:5")
    # The kubelet's cut holds no exception of the rank: the signal, nothing invented.
    cut = read(log("nccl-timeout-torchrun", cut=True), exit_code=1)
    assert cut.summary == "killed by SIGABRT, no exception in its output"
    assert (cut.rank, cut.local_rank) == (1, 1)


def test_a_remote_error_on_a_survivor_is_collateral() -> None:
    words = read(log("nccl-remote-error"), exit_code=134)
    assert words.summary.startswith("c10::DistBackendError: NCCL error: remote process exited")
    assert words.collateral and words.rank == 0
    assert words.lines.endswith(
        "socketProgress: Connection closed by remote peer job-worker-1.job.ns.svc<41234>"
    )


def test_tee_prefixes_the_deciding_ranks_block_and_no_warning() -> None:
    words = read(log("tee-value-error"), exit_code=1)
    assert (words.summary, words.rank, words.local_rank) == (BAD, 1, 1)
    assert not words.collateral
    assert "destroy_process_group" not in words.block and "ncclRemoteError" not in words.block
    assert words.block.startswith("step 0 loss 1.0000\nTraceback")  # rank 1's lines only


def test_a_signal_after_plain_output_invents_no_summary() -> None:
    words = read(log("oomkilled"), exit_code=137)
    assert words.summary == "" and words.lines.endswith("step 19 loss 0.0500")
    assert read(log("oomkilled")).summary == "step 19 loss 0.0500"  # an exit code of its own


def test_a_gloo_timeout_on_a_survivor_is_collateral() -> None:
    words = read(log("gloo-timeout"), exit_code=1)
    assert words.summary.endswith("Timed out waiting 1800000ms for recv operation to complete")
    assert words.collateral and words.rank == 1


def test_without_root_cause_the_rank_whose_error_is_no_echo_decides() -> None:
    tail = "\n".join(
        [
            f"[rank0]: {GLOO}Connection closed by peer [10.0.0.1]:1.",
            f"[rank1]: {BAD}",
            f"[rank2]: {GLOO}Application timeout caused pair closure",
        ]
    )
    words = read(tail, exit_code=1)
    assert (words.summary, words.rank, words.block) == (BAD, 1, BAD)
