"""`kubectl ddp`: the kubectl plugin (console script ``kubectl-ddp``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from . import constants as c
from . import localrun
from .jobspec import SpecError, resolve


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


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="kubectl ddp", description="DDPJob tools for kubectl")
    sub = top.add_subparsers(dest="command", required=True)
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
    """Entry point of the ``kubectl-ddp`` console script."""
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except (SpecError, OSError, ValueError) as exc:
        print(f"kubectl ddp: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
