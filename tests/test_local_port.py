"""commands/local_port.py: the rendezvous port a local run takes, held against other local runs
(even two starting at once, before either binds it) and against any other program's listener."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from ddp_operator.commands import local_port
from ddp_operator.model.jobspec import resolve

from harness.operator import free_port
from jobs import ddpjob


def job_on(port: int):
    return resolve(ddpjob("j", "ns", nodes=2, masterPort=port))


def test_a_free_port_is_the_jobs_own() -> None:
    port = free_port()
    with local_port.reserved(job_on(port)) as (job, moved):
        assert job.master_port == port and moved is None


def test_a_port_another_local_run_holds_moves_the_second_run_and_says_so() -> None:
    port = free_port()
    with (
        local_port.reserved(job_on(port)) as (first, _),
        local_port.reserved(job_on(port)) as (second, moved),
    ):
        assert first.master_port == port != second.master_port, (first, second)
        assert moved == (
            f"warning: the rendezvous port {port} (spec.masterPort) is in use on this "
            f"machine; this run uses {second.master_port}"
        )
    with local_port.reserved(job_on(port)) as (again, moved):  # given back at the block's end
        assert again.master_port == port and moved is None


HOLDER = """
import sys
from ddp_operator.commands import local_port
from ddp_operator.model.jobspec import resolve
sys.path.insert(0, sys.argv[2])
from jobs import ddpjob
job = resolve(ddpjob("h", "ns", nodes=1, masterPort=int(sys.argv[1])))
with local_port.reserved(job) as (held, moved):
    print(held.master_port, moved, flush=True)
    sys.stdin.read()
"""


def test_a_port_held_by_a_run_in_another_process_moves_this_one() -> None:
    port = free_port()
    here = str(Path(__file__).parent)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(port), here],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().split() == [str(port), "None"]
        with local_port.reserved(job_on(port)) as (job, moved):
            assert job.master_port != port and moved, (job.master_port, moved)
    finally:
        holder.communicate("", timeout=30)


def test_a_port_another_program_listens_on_moves_the_run() -> None:
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with local_port.reserved(job_on(port)) as (job, moved):
            assert job.master_port != port and moved, (job.master_port, moved)
