"""Hardware signatures (``signatures``): each found in the output it is written from
(``tests/data/hardware``), and none in a script's own failure or a kernel's own fault. Pure."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddp_operator.decide import last_words, signatures

DATA = Path(__file__).parent / "data" / "hardware"


def output(name: str) -> str:
    """A fixture's text, its first line (where it comes from) dropped."""
    return (DATA / name).read_text().split("\n", 1)[1]


@pytest.mark.parametrize(
    ("name", "signature"),
    [
        ("cuda-ecc.log", "cuda-ecc"),
        ("xid-79.log", "gpu-fallen-off-bus"),
        ("xid-48.log", "xid-48"),
        ("nccl-cuda.log", "nccl-cuda"),
        ("nccl-ib.log", "nccl-system"),
        ("ascend-507899.log", "ascend-device-fault"),
    ],
)
def test_each_signature_is_found_in_the_output_it_is_written_from(name: str, signature: str):
    found = signatures.find(output(name))
    assert found is not None and found.name == signature
    assert "\n" not in found.line and len(found.line) <= 200


@pytest.mark.parametrize("name", ["value-error.log", "xid-13.log", "nccl-peer.log"])
def test_a_script_s_own_fault_or_a_dead_peer_carries_no_signature(name: str):
    assert signatures.find(output(name)) is None


def test_an_xid_line_alone_names_its_xid_and_only_hardware_ones_count():
    line = "NVRM: Xid (PCI:0000:3b:00): 95, pid=1, name=python, Uncontained: FBHUB. RST: No"
    assert signatures.find(line).name == "xid-95"
    assert signatures.find(line.replace(": 95,", ": 31,")) is None
    assert set(signatures.HARDWARE_XIDS) >= {48, 63, 64, 74, 79, 94, 95}


def test_the_deciding_rank_s_block_keeps_the_signature():
    words = last_words.read(output("cuda-ecc.log"), 1)
    assert words.summary == "RuntimeError: CUDA error: uncorrectable ECC error encountered"
    assert signatures.find(words.block).name == "cuda-ecc"


def test_a_long_output_is_searched_in_linear_time():
    text = ("unhandled system error " + "x" * 50 + "\n") * 2000
    assert signatures.find(text) is None
