"""`kubectl ddp`: the kubectl plugin (console script ``kubectl-ddp``)."""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from ..decide import presence
from ..manifests.builders import trainer_index
from ..model import constants as c
from ..model.jobspec import SpecError, resolve
from . import jobview, localrun, refusals, topview
from .kubeapi import Api, CRDMissing


def load_job(path: str) -> dict[str, Any]:
    """The DDPJob in a manifest file ('-' for stdin); other documents are ignored."""
    text = sys.stdin.read() if path == "-" else Path(path).read_text()
    for doc in yaml.safe_load_all(text):
        if isinstance(doc, dict) and doc.get("kind") == c.KIND:
            return doc
    raise SpecError(f"{path}: no {c.KIND} found")


def cmd_local(args: argparse.Namespace) -> int:
    body = load_job(args.file)
    meta = body.setdefault("metadata", {})
    meta.setdefault("namespace", args.namespace)
    meta.setdefault("uid", f"local-{meta.get('name', 'job')}")
    job = resolve(body)
    print(
        f"ddp local: {job.name}: {job.nodes} workers x {job.procs_per_node} processes, "
        f"backend {job.backend}",
        flush=True,
    )
    try:
        outcome = localrun.run(job)
    except KeyboardInterrupt:
        print("ddp local: interrupted; all workers stopped", file=sys.stderr)
        return 130
    verdict = "Succeeded" if outcome.succeeded else "Failed"
    stream = sys.stdout if outcome.succeeded else sys.stderr
    print(f"ddp local: {job.name} {verdict}: {outcome.message}", file=stream, flush=True)
    return outcome.exit_status


def _api(args: argparse.Namespace) -> tuple[Api, str]:
    api = Api(args.kubeconfig, args.context)
    return api, args.namespace or api.namespace


def _window() -> float:
    """How long a job may go without a word from any operator (``DDP_PICKUP_WINDOW``)."""
    return presence.window(os.environ)


def cmd_status(args: argparse.Namespace) -> int:
    api, ns = _api(args)
    job, pods = api.job(ns, args.name), api.pods(ns, args.name)
    fake = api.fake_nodes(p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName"))
    events = api.pod_warnings(ns, pods)
    print(jobview.render_status(job, pods, events=events, fake_nodes=fake, window=_window()))
    return 0


def cmd_top(args: argparse.Namespace) -> int:
    api, ns = _api(args)
    namespaced = not args.all_namespaces
    try:
        while True:
            found = api.jobs(ns if namespaced else None)
            table = topview.render_top(found, datetime.now(UTC), namespaced, _window())
            if args.once:
                print(table)
                return 0
            print(f"\x1b[H\x1b[2J{table}", flush=True)  # redrawn in place
            time.sleep(args.interval)
    except KeyboardInterrupt:
        return 0


def cmd_logs(args: argparse.Namespace) -> int:
    api, ns = _api(args)
    job = api.job(ns, args.name)  # fails clearly if there is no such job
    pods = api.pods(ns, args.name)
    if not pods and (unheard := presence.unheard(job, datetime.now(UTC), _window())):
        print(unheard, file=sys.stderr)
    if args.worker is not None:
        pods = [p for p in pods if p["metadata"]["labels"].get(c.LABEL_INDEX) == str(args.worker)]
        if not pods:
            raise SpecError(f"{args.name} has no worker {args.worker}")
    lock = threading.Lock()
    failed: list[Exception] = []

    def stream(pod: dict[str, Any]) -> None:
        """One worker's log; what stops it is kept for the main thread, which says it (an
        exception of this thread alone would print a traceback and leave the exit code 0)."""
        index = pod["metadata"]["labels"].get(c.LABEL_INDEX)
        prefix = "" if args.worker is not None else f"worker-{index} | "
        container = pod["spec"]["containers"][trainer_index(pod["spec"])]["name"]
        try:
            resp = api.core.read_namespaced_pod_log(
                pod["metadata"]["name"],
                ns,
                container=container,
                follow=args.follow,
                tail_lines=args.tail,
                _preload_content=False,
            )
            for raw in resp:
                for line in raw.decode(errors="replace").splitlines():
                    with lock:
                        print(f"{prefix}{line}", flush=True)
        except Exception as exc:  # raised again below, once every worker is shown
            failed.append(exc)

    threads = [threading.Thread(target=stream, args=(p,), daemon=True) for p in pods]
    for t in threads:
        t.start()
        if not args.follow:
            t.join()  # one worker after the other, in order
    for t in threads:
        t.join()
    if failed:
        raise failed[0]
    return 0


def cmd_submit(args: argparse.Namespace) -> int:
    """Create the job. The local checks (``resolve``, a part of the CRD's) go first; where they
    find errors, the API server is asked for its list without creating anything (a dry run),
    as it is the whole list `kubectl apply` prints; theirs stands when it cannot be asked.
    Then, unless ``--no-wait``, wait for an operator's first word on the job (its status,
    normally within a second), saying so on stderr if none comes within the window."""
    body = load_job(args.file)
    try:
        resolve(body)
        found: list[str] = []
    except SpecError as exc:
        found = exc.errors
    from kubernetes.client.exceptions import ApiException

    try:
        api, ns = _api(args)
        ns = body["metadata"].get("namespace") or ns
        if found:
            api.create(ns, body, dry_run="All")
    except ApiException as exc:
        if exc.status == 422 or not found:
            raise
    except Exception:
        if not found:
            raise
    if found:  # not refused by the API server (an older CRD there), or it could not be asked
        raise SpecError(*found)
    created = api.create(ns, body)
    name = created["metadata"]["name"]
    print(f"ddpjob/{name} created in {ns}", flush=True)
    if not args.no_wait and (unheard := api.pickup(ns, name, _window())):
        print(f"kubectl ddp: {unheard}", file=sys.stderr)
    return 0


def _cluster_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", "--namespace", default=None, help="namespace (default: the context's)")
    p.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: KUBECONFIG)")
    p.add_argument("--context", default=None, help="kubeconfig context")


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="kubectl ddp", description="DDPJob tools for kubectl")
    sub = top.add_subparsers(dest="command", required=True)
    status = sub.add_parser("status", help="a job and one line per worker")
    status.add_argument("name")
    _cluster_flags(status)
    status.set_defaults(func=cmd_status)
    logs = sub.add_parser("logs", help="the trainer logs of every worker, prefixed, or of one")
    logs.add_argument("name")
    logs.add_argument("-w", "--worker", type=int, default=None, help="only this worker index")
    logs.add_argument("-f", "--follow", action="store_true", help="keep streaming")
    logs.add_argument("--tail", type=int, default=None, help="last N lines of each worker")
    _cluster_flags(logs)
    logs.set_defaults(func=cmd_logs)
    top_ = sub.add_parser("top", help="the jobs and their training's progress, live")
    top_.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
    top_.add_argument("--once", action="store_true", help="print the table once and exit")
    top_.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes")
    _cluster_flags(top_)
    top_.set_defaults(func=cmd_top)
    submit = sub.add_parser("submit", help="create a DDPJob from a manifest file")
    submit.add_argument("file", help="manifest with a DDPJob ('-' for stdin)")
    submit.add_argument(
        "--no-wait",
        action="store_true",
        help="do not wait for an operator to pick the job up (default: up to 30 s)",
    )
    _cluster_flags(submit)
    submit.set_defaults(func=cmd_submit)
    local = sub.add_parser(
        "local",
        help="run a DDPJob's workers as local processes (real torch, no cluster)",
        description=localrun.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    local.add_argument("file", help="manifest with a DDPJob ('-' for stdin)")
    local.add_argument("-n", "--namespace", default="default", help="namespace for DNS names")
    local.set_defaults(func=cmd_local)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kubectl-ddp`` console script: any failure is one line on stderr and
    a non-zero exit (1: the cluster or the API said no; 2: bad input), never a traceback."""
    args = parser().parse_args(argv)
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config import ConfigException
    from urllib3.exceptions import HTTPError

    try:
        return args.func(args)
    except CRDMissing as exc:
        return _fail(1, str(exc))
    except ApiException as exc:
        headline, errors = refusals.api_errors(exc.body)
        return _fail(1, f"{exc.status} {exc.reason}: {headline}", errors)
    except ConfigException as exc:
        return _fail(1, f"no usable kubeconfig (KUBECONFIG, --kubeconfig): {exc}")
    except HTTPError as exc:
        return _fail(1, f"cannot reach the cluster: {_unreachable(exc)}")
    except yaml.YAMLError as exc:
        return _fail(2, f"{getattr(args, 'file', '')}: not valid YAML: {exc}")
    except (KeyError, TypeError, AttributeError) as exc:
        where = getattr(args, "file", "")
        return _fail(2, f"{where}: not a valid {c.KIND} ({type(exc).__name__}: {exc})")
    except SpecError as exc:
        if len(exc.errors) < 2:
            return _fail(2, str(exc))
        where = getattr(args, "file", "")
        return _fail(2, "stdin" if where == "-" else where, exc.errors)
    except (OSError, ValueError) as exc:
        return _fail(2, str(exc))


def _fail(code: int, message: str, errors: Sequence[str] = ()) -> int:
    """Say why on stderr: one line, or a headline and one line per error."""
    said = refusals.lines(" ".join(message.split()), [" ".join(e.split()) for e in errors])
    print("\n".join(["kubectl ddp: " + said[0], *said[1:]]), file=sys.stderr)
    return code


def _unreachable(exc: Exception) -> str:
    """The server and the cause of a connection failure, without urllib3's object reprs."""
    pool = getattr(exc, "pool", None)
    server = f"{pool.scheme}://{pool.host}:{pool.port}: " if pool is not None else ""
    cause = str(getattr(exc, "reason", None) or exc)
    return server + cause.split(">: ", 1)[-1]


if __name__ == "__main__":
    sys.exit(main())
