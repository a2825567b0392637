"""The shapes of torch's, torchrun's and NCCL's output (``decide.torch_output``): prefixes and
whose lines they are, C++ exceptions, the failed collective, collateral errors."""

from __future__ import annotations

import pytest

from ddp_operator.decide.torch_output import Collective, Line, collateral, collective, split, thrown


def test_every_prefix_form_is_unwrapped_with_its_ranks() -> None:
    lines = split(
        "\n".join(
            [
                "[default1]:[rank3]: ValueError: bad",
                "[default1]:step 4",  # the local rank's global one, from the line above
                "[rank2]: Traceback (most recent call last):",
                '  File "t.py", line 1, in <module>',  # goes on the line above: rank 2's
                "[Rank 0] Watchdog caught collective operation timeout",  # NCCL's own words
                "[W1127 09:30:11.301 ProcessGroupNCCL.cpp:1538] Warning: not a prefix",
                "plain",
            ]
        )
    )
    assert lines == [
        Line("ValueError: bad", 3, 1),
        Line("step 4", 3, 1),
        Line("Traceback (most recent call last):", 2),
        Line('  File "t.py", line 1, in <module>', 2),
        Line("[Rank 0] Watchdog caught collective operation timeout", 0),
        Line("[W1127 09:30:11.301 ProcessGroupNCCL.cpp:1538] Warning: not a prefix"),
        Line("plain"),
    ]
    assert [line.owner for line in split("[default2]:x\ny")] == ["local2", None]


def test_a_cpp_exception_is_its_what_line_without_nccls_wrappers() -> None:
    lines = [
        "frame #3: <unknown function> + 0x129ecc (0x7f in /lib/x86_64-linux-gnu/libc.so.6)",
        "terminate called after throwing an instance of 'c10::DistBackendError'",
        "  what():  [PG ID 0 PG GUID 0(default_pg) Rank 1] Process group watchdog thread "
        "terminated with exception: [Rank 1] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=2, OpType=ALLREDUCE)",
        "Exception raised from checkTimeout at ProcessGroupNCCL.cpp:688 (most recent call first):",
    ]
    at, error = thrown(lines)
    assert at == 2
    assert error == (
        "c10::DistBackendError: Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=2, OpType=ALLREDUCE)"
    )
    assert thrown(["no exception"]) == (-1, "")


def test_the_failed_collective_and_the_scripts_line() -> None:
    lines = [
        "[E1127 ProcessGroupNCCL.cpp:685] [Rank 0] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=7, OpType=BROADCAST, NumelIn=1, NumelOut=1, Timeout(ms)=600000)",
        "[E1127 ProcessGroupNCCL.cpp:732] Stack trace of the failed collective: ",
        "#0 broadcast from /usr/local/lib/python3.12/site-packages/torch/distributed/"
        "distributed_c10d.py:2955",
        "#1 <frozen runpy> from <frozen runpy>:88",
        "#2 main from /scripts/train.py:44",
        "#3 <module> from /scripts/train.py:50",
        "",
        "#0 a stack of something else from /other.py:1",
    ]
    assert collective(lines) == Collective("BROADCAST", 7, "/scripts/train.py:44")
    assert collective(lines[:1]) == Collective("BROADCAST", 7, None)
    assert collective(["step 1"]) == Collective()


@pytest.mark.parametrize(
    ("text", "is_collateral"),
    [
        (
            "RuntimeError: [unbound_buffer.cc:81] Timed out waiting 1800000ms for recv operation",
            True,
        ),
        ("RuntimeError: [pair.cc:534] Application timeout caused pair closure", True),
        ("ncclRemoteError: A call failed possibly due to a network error", True),
        ("RuntimeError: [pair.cc:534] Connection reset by peer", True),
        ("socketProgress: Connection closed by remote peer job-worker-1<41234>", True),
        ("torch.AcceleratorError: CUDA error: device-side assert triggered", False),
        ("ValueError: bad batch 17", False),
    ],
)
def test_collateral(text: str, is_collateral: bool) -> None:
    assert collateral(text) is is_collateral
