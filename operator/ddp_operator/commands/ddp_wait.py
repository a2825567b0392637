#!/usr/bin/env python3
"""ddp-wait: wait for the rendezvous master, then exec the training command (trainer images).

    ddp-wait [--timeout SECONDS] -- COMMAND [ARGS...]

Waits, with a deadline and a log line every few seconds, until MASTER_ADDR resolves and, on
workers other than worker 0 (NODE_RANK != 0), until MASTER_PORT on it accepts connections. Then
replaces itself with COMMAND. After the deadline it exits 124, saying what it waited for.
Standard library only, so it runs in any image with a Python.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time

EXIT_TIMEOUT = 124


def log(message: str) -> None:
    print(f"ddp-wait: {message}", file=sys.stderr, flush=True)


def resolves(host: str) -> str | None:
    """The first address ``host`` resolves to, or None."""
    try:
        return socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)[0][4][0]
    except OSError:
        return None


def accepts(host: str, port: int, timeout: float = 2.0) -> bool:
    """Whether a TCP connection to host:port succeeds."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait(what: str, check, deadline: float, every: float) -> bool:
    """Poll ``check`` until true or the deadline; log progress every ``every`` seconds."""
    next_log = 0.0
    while True:
        if check():
            return True
        now = time.monotonic()
        if now >= deadline:
            return False
        if now >= next_log:
            log(f"waiting for {what} ({deadline - now:.0f}s left)")
            next_log = now + every
        time.sleep(min(0.5, max(0.0, deadline - now)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ddp-wait", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--timeout",
        type=float,
        default=float(os.environ.get("DDP_WAIT_TIMEOUT", "600")),
        help="seconds to wait in all (default: DDP_WAIT_TIMEOUT or 600)",
    )
    parser.add_argument("--log-every", type=float, default=10.0, help=argparse.SUPPRESS)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")
    host = os.environ.get("MASTER_ADDR", "")
    port = int(os.environ.get("MASTER_PORT", "29500"))
    rank = os.environ.get("NODE_RANK", "0")
    deadline = time.monotonic() + args.timeout
    if host:
        if not wait(
            f"master address {host} to resolve", lambda: resolves(host), deadline, args.log_every
        ):
            log(f"gave up after {args.timeout:.0f}s: master address {host} does not resolve")
            return EXIT_TIMEOUT
        log(f"master address {host} resolves to {resolves(host)}")
        if rank != "0":
            what = f"master port {host}:{port} to accept connections"
            if not wait(what, lambda: accepts(host, port), deadline, args.log_every):
                log(f"gave up after {args.timeout:.0f}s: {host}:{port} does not accept connections")
                return EXIT_TIMEOUT
            log(f"master {host}:{port} accepts connections")
    else:
        log("MASTER_ADDR is not set; not waiting")
    log(f"exec {' '.join(command)}")
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        log(f"cannot run {command[0]}: {exc}")
        return 127
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
