"""Which failure is blamed on its node (``blame``): a hardware signature or a rule with
blameNode, the node marked broken, the same worker failing there attempts in a row (a hang:
the rank that hung); never a script's own exception, an out-of-memory kill or a disruption.
Pure."""

from __future__ import annotations

from pathlib import Path

from ddp_operator.decide import blame
from ddp_operator.decide.failure_facts import STALLED, WorkerFailure
from ddp_operator.model.jobspec import resolve
from ddp_operator.model.workers import WorkerPod

from jobs import ddpjob

DATA = Path(__file__).parent / "data" / "hardware"


def output(name: str) -> str:
    return (DATA / name).read_text().split("\n", 1)[1]


def job(**policy):
    return resolve(ddpjob("j", "ns", nodes=4, failurePolicy=policy or None))


def failed(text: str, index: int = 1, node: str = "gpu-3", **kw) -> WorkerFailure:
    kw.setdefault("exit_code", 1)
    return WorkerFailure(index, f"j-worker-{index}", kw.pop("reason", "Error"), node=node,
                         message=text, **kw)  # fmt: skip


def of(failure: WorkerFailure, j=None, broken=None, in_a_row: int = 1, rule: str = "default"):
    return blame.of(j or job(), failure, rule, {}, broken or {}, in_a_row)


def test_a_cuda_ecc_error_blames_the_node_with_its_line_as_evidence():
    found = of(failed(output("cuda-ecc.log")))
    assert found == blame.Blame(
        "gpu-3",
        blame.HARDWARE,
        "j-worker-1: CUDA: uncorrectable ECC error: "
        "RuntimeError: CUDA error: uncorrectable ECC error encountered",
    )


def test_every_built_in_signature_blames_its_node():
    for name in ("xid-79.log", "xid-48.log", "nccl-cuda.log", "nccl-ib.log", "ascend-507899.log"):
        found = of(failed(output(name)))
        assert found is not None and found.reason == blame.HARDWARE, name


def test_a_value_error_blames_nothing_even_on_a_marked_node_or_again_and_again():
    bug = failed(output("value-error.log"))
    assert blame.scripts_own(bug)
    assert of(bug) is None
    assert of(bug, broken={"gpu-3": "condition SysLogsXIDError=True"}) is None
    assert of(bug, in_a_row=5) is None
    assert blame.streak(bug, "gpu-3", {}, 0) == 0


def test_an_out_of_memory_of_the_script_s_own_blames_nothing():
    gpu_oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert of(failed(gpu_oom), in_a_row=3) is None
    killed = failed("", reason="OOMKilled", exit_code=137)
    assert of(killed, broken={"gpu-3": "x"}, in_a_row=3) is None


def test_a_disruption_a_deleted_pod_and_a_stuck_restart_blame_nothing():
    evicted = failed("", reason="Evicted", disruption=True, exit_code=None)
    assert of(evicted, broken={"gpu-3": "x"}, in_a_row=3) is None
    deleted = WorkerFailure(1, "j-worker-1", "Deleted", node="gpu-3", gone=True)
    assert of(deleted, in_a_row=3) is None
    assert of(WorkerFailure(-1, "", "RestartStuck", message="stuck"), in_a_row=3) is None


def test_a_node_marked_broken_is_blamed_for_a_failure_not_the_script_s():
    crash = failed("Segmentation fault (core dumped)", exit_code=139)
    found = of(crash, broken={"gpu-3": "condition SysLogsXIDError=True: Xid 79"})
    assert found == blame.Blame(
        "gpu-3", blame.MARKED, "node gpu-3: condition SysLogsXIDError=True: Xid 79"
    )
    assert of(crash, broken={"gpu-9": "x"}) is None


def test_a_rule_with_blame_node_adds_a_signature():
    rule = {"name": "hbm", "action": "RestartGroup", "blameNode": True,
            "onMessagePattern": "HBM multi-bit error"}  # fmt: skip
    j = job(rules=[rule])
    assert j.failure_policy.rules[0].blame_node
    f = failed("RuntimeError: HBM multi-bit error on device 3")
    found = of(f, j, rule="hbm")
    assert found is not None and found.reason == blame.HARDWARE and "rule hbm" in found.evidence
    assert of(f, j, rule="default") is None  # the rule did not decide it


def test_the_same_worker_failing_on_the_same_node_twice_blames_it():
    crash = failed("Segmentation fault (core dumped)", exit_code=139)
    last = {"firstFailure": {"attempt": 0, "worker": 1, "node": "gpu-3", "reason": "Error",
                             "nodeStreak": 1}}  # fmt: skip
    assert blame.streak(crash, "gpu-3", last, 1) == 2
    assert blame.streak(crash, "gpu-4", last, 1) == 1  # another node
    other = failed("x", index=2, exit_code=139)
    assert blame.streak(other, "gpu-3", last, 1) == 1  # another worker
    assert blame.streak(crash, "gpu-3", last, 3) == 1  # not in a row
    assert of(crash, in_a_row=1) is None
    found = of(crash, in_a_row=2)
    assert found is not None and found.reason == blame.REPEATED
    assert found.evidence.startswith("worker 1 failed on node gpu-3 2 attempts in a row")
    assert of(crash, job(blameNodeAfter=0), in_a_row=9) is None  # off
    # torch's errors for a device count; a plain exit, the script's own choice, does not.
    nccl = failed("torch.distributed.DistBackendError: NCCL communicator was aborted")
    assert blame.streak(nccl, "gpu-3", last, 1) == 2
    assert blame.streak(failed("", exit_code=3), "gpu-3", last, 1) == 0
    illegal = failed("RuntimeError: CUDA error: an illegal memory access was encountered")
    assert blame.streak(illegal, "gpu-3", last, 1) == 2
    # A RuntimeError of the script's own, or one its data or sizes caused, never counts.
    for own in (
        "RuntimeError: the dataset's shard 3 is missing",
        "RuntimeError: CUDA error: device-side assert triggered",
        "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB",
    ):
        assert blame.streak(failed(own), "gpu-3", last, 1) == 0, own
        assert of(failed(own), in_a_row=5) is None, own
    assert of(crash, job(blameNodeAfter=3), in_a_row=2) is None


def test_a_hang_repeated_on_the_culprit_s_node_blames_it():
    hung = WorkerFailure(2, "j-worker-2", STALLED, message="rank 5 never joined ALLREDUCE")
    current = {2: WorkerPod("j-worker-2", 2, 0, "Running", uid="p2", node="gpu-5")}
    assert blame.node_of(hung, current) == "gpu-5"
    last = {"firstFailure": {"attempt": 3, "worker": 2, "node": "gpu-5", "reason": STALLED,
                             "nodeStreak": 1}}  # fmt: skip
    in_a_row = blame.streak(hung, "gpu-5", last, 4)
    assert in_a_row == 2
    found = blame.of(job(), hung, "default", current, {}, in_a_row)
    assert found == blame.Blame("gpu-5", blame.REPEATED_HANG,
                                "worker 2 hung on node gpu-5 2 attempts in a row")  # fmt: skip
    # A crash after a hang there is not the same story.
    crash = failed("Segmentation fault", index=2, node="gpu-5", exit_code=139)
    assert blame.streak(crash, "gpu-5", last, 4) == 1
