"""The markers that say a node's accelerator is broken (``node_health``): read from their text,
found on a Node's conditions, taints and labels. Pure."""

from __future__ import annotations

import pytest

from ddp_operator.model import node_health


def node(conditions=(), taints=(), labels=None) -> dict:
    return {
        "metadata": {"name": "gpu-3", "labels": labels or {}},
        "spec": {"taints": list(taints)},
        "status": {"conditions": list(conditions)},
    }


DEFAULTS = node_health.parse_all(node_health.DEFAULT_MARKERS)


def test_the_defaults_read_nvsentinel_npd_eks_and_hyperpod():
    xid = {"type": "SysLogsXIDError", "status": "True", "message": "Xid 79 on GPU 3"}
    assert (
        node_health.broken(node([xid]), DEFAULTS)
        == "condition SysLogsXIDError=True: Xid 79 on GPU 3"
    )
    assert node_health.broken(node([{**xid, "status": "False"}]), DEFAULTS) is None
    deadlock = {"type": "KernelDeadlock", "status": "True", "reason": "DockerHung"}
    assert "KernelDeadlock" in node_health.broken(node([deadlock]), DEFAULTS)
    eks = {"type": "AcceleratedHardwareReady", "status": "False"}
    assert node_health.broken(node([eks]), DEFAULTS) == "condition AcceleratedHardwareReady=False"
    assert node_health.broken(node([{**eks, "status": "True"}]), DEFAULTS) is None
    hyperpod = "sagemaker.amazonaws.com/node-health-status"
    bad = node(labels={hyperpod: "UnschedulablePendingReplacement"})
    assert node_health.broken(bad, DEFAULTS) == f"label {hyperpod}=UnschedulablePendingReplacement"
    assert node_health.broken(node(labels={hyperpod: "Schedulable"}), DEFAULTS) is None
    ready = {"type": "Ready", "status": "True"}
    assert node_health.broken(node([ready]), DEFAULTS) is None


def test_a_taint_marker_and_parsing():
    markers = node_health.parse_all(["taint:nvidia.com/gpu-xid-error,condition:GpuMemWatch=True"])
    assert [m.text for m in markers] == [
        "taint:nvidia.com/gpu-xid-error",
        "condition:GpuMemWatch=True",
    ]
    tainted = node(
        taints=[{"key": "nvidia.com/gpu-xid-error", "value": "79", "effect": "NoSchedule"}]
    )
    assert node_health.broken(tainted, markers) == "taint nvidia.com/gpu-xid-error=79"


@pytest.mark.parametrize("bad", ["condition:X", "label:k", "nothing", "taint:", "cond:X=True"])
def test_a_marker_that_cannot_be_read_is_refused(bad: str):
    with pytest.raises(node_health.MarkerError):
        node_health.parse(bad)


def test_the_operator_refuses_a_marker_it_cannot_read(capsys):
    from ddp_operator.commands import cli

    with pytest.raises(SystemExit) as exited:
        cli.main(["run", "-A", "--broken-node-marker", "condition:SysLogsXIDError"])
    assert exited.value.code == 2
    assert "--broken-node-marker: 'condition:SysLogsXIDError'" in capsys.readouterr().err
