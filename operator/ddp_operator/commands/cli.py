"""`ddp-operator run`: the operator's command line (kopf inside)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

import kopf

from ..decide import report_gate
from ..manifests import helpers_pod
from ..model import node_health


def parser() -> argparse.ArgumentParser:
    """The argument parser of ``ddp-operator``."""
    top = argparse.ArgumentParser(prog="ddp-operator", description=__doc__)
    sub = top.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the operator until interrupted")
    scope = run.add_mutually_exclusive_group(required=True)
    scope.add_argument(
        "-n",
        "--namespace",
        action="append",
        dest="namespaces",
        metavar="NS",
        help="watch this namespace (repeatable; globs like 'team-*' allowed)",
    )
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="watch every namespace")
    run.add_argument(
        "--liveness",
        metavar="URL",
        default=None,
        help="serve a liveness endpoint, e.g. http://0.0.0.0:8080/healthz",
    )
    run.add_argument(
        "--log-format", choices=["full", "plain", "json"], default="full", help="log format"
    )
    run.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    run.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only")
    run.add_argument(
        "--peering",
        metavar="NAME",
        default=None,
        help="coordinate with other replicas through this kopf peering object (hot standby); "
        "without it the operator runs standalone",
    )
    run.add_argument(
        "--priority",
        type=int,
        default=0,
        help="peering priority: the highest-priority replica is active",
    )
    run.add_argument(
        "--peering-lifetime",
        type=int,
        default=60,
        metavar="SECONDS",
        help="how long a replica that stopped announcing itself is taken for alive: a standby "
        "takes over this long after the active replica is lost (default: 60, kopf's)",
    )
    run.add_argument(
        "--metrics-port",
        type=int,
        default=0,
        metavar="PORT",
        help="serve Prometheus metrics on this port (0: off)",
    )
    run.add_argument(
        "--api-concurrency",
        type=int,
        default=32,
        metavar="N",
        help="concurrent API requests (pod creations) at most",
    )
    run.add_argument(
        "--network-isolation",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="give each job a NetworkPolicy (only its own pods reach its pods) unless its "
        "spec.network.isolation says otherwise (default: on)",
    )
    run.add_argument(
        "--progress-address",
        metavar="HOST:PORT",
        default=None,
        help="serve the endpoint training scripts report progress to (ddp_operator.progress), "
        "e.g. 0.0.0.0:8090 (default: off)",
    )
    run.add_argument(
        "--progress-url",
        metavar="URL",
        default=None,
        help="the endpoint's URL as worker pods reach it, e.g. "
        "http://ddp-operator.ddp-system.svc:8090 (default: http://<the address>)",
    )
    run.add_argument(
        "--progress-trusted-sources",
        metavar="CIDR,...",
        default="",
        help="networks whose reports are reviewed though they do not come from the address of "
        "the pod their token names: a proxy, or a network that rewrites pods' source "
        "addresses (SNAT); loopback always is; reports from anywhere else must come from a "
        "worker pod's own address (default: none)",
    )
    run.add_argument(
        "--helpers-image",
        metavar="IMAGE",
        default=os.environ.get("DDP_HELPERS_IMAGE", ""),
        help="the image the operator's helpers (progress, checkpoints, the stacks watch, "
        "Lightning's callback, the in-place watch) come from to every worker: the operator's "
        "own (the chart sets it; default: $DDP_HELPERS_IMAGE; empty: none delivered)",
    )
    run.add_argument(
        "--helpers-delivery",
        choices=helpers_pod.MODES,
        default=helpers_pod.MODES[0],
        help="how: an init container copying them (any cluster), or an image volume "
        "(Kubernetes 1.35+ with containerd 2.1+ or CRI-O 1.31+; default: %(default)s)",
    )
    run.add_argument(
        "--broken-node-marker",
        action="append",
        metavar="MARKER",
        default=None,
        help="a node condition, taint or label that says a node's accelerator is broken: "
        "condition:<Type>=<Status>, taint:<key> or label:<key>=<value>|<value>; repeated or "
        "comma-separated; new workers avoid such nodes, and a failure on one blames it "
        "(default: NVSentinel's, node-problem-detector's, EKS's and HyperPod's, "
        "docs/concepts/restarts.md#bad-nodes; 'none': no Node is read)",
    )
    run.add_argument(
        "--taint-blamed-nodes",
        type=float,
        metavar="SHARE",
        default=0.0,
        help="taint a node a job blamed ddp-operator.io/suspect=true:NoSchedule, for every "
        "workload, while fewer than SHARE (0 to 1) of the cluster's nodes carry it "
        "(default: 0, no node is tainted; the job's own pods avoid it anyway)",
    )
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ddp-operator`` console script."""
    top = parser()
    args = top.parse_args(argv)
    everywhere = (args.progress_address or "").rpartition(":")[0] in ("", "0.0.0.0", "[::]")
    if args.progress_address and everywhere and not args.progress_url:
        top.error("--progress-url is needed: --progress-address listens on every interface")
    try:
        cidrs = [x for x in args.progress_trusted_sources.split(",") if x.strip()]
        trusted = [str(n) for n in report_gate.networks(cidrs)]
    except ValueError as exc:
        top.error(f"--progress-trusted-sources: {exc}")
    if not 0.0 <= args.taint_blamed_nodes <= 1.0:
        top.error("--taint-blamed-nodes: a share of the nodes, from 0 to 1")
    given = args.broken_node_marker or list(node_health.DEFAULT_MARKERS)
    try:
        markers = [] if given == ["none"] else [m.text for m in node_health.parse_all(given)]
    except node_health.MarkerError as exc:
        top.error(f"--broken-node-marker: {exc}")
    from ..act import handlers, namespace_observer  # noqa: F401  (registers the handlers)
    from ..act.standby import standby

    if args.peering is not None:
        try:
            standby.capture()
        except RuntimeError as exc:
            top.error(str(exc))

    kopf.configure(
        verbose=args.verbose,
        quiet=args.quiet,
        log_format=kopf.LogFormat[args.log_format.upper()],
    )
    if not args.verbose:
        # kopf logs every handler call; our own lines say what changed.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    namespace_observer.install()
    kopf.run(
        clusterwide=args.all_namespaces,
        namespaces=args.namespaces or (),
        standalone=args.peering is None,
        peering_name=args.peering,
        priority=args.priority,
        liveness_endpoint=args.liveness,
        memo=kopf.Memo(
            api_concurrency=args.api_concurrency,
            peering_lifetime=args.peering_lifetime,
            metrics_port=args.metrics_port,
            clusterwide=args.all_namespaces,
            network_isolation=args.network_isolation,
            helpers_image=args.helpers_image,
            helpers_delivery=args.helpers_delivery,
            broken_node_markers=markers,
            taint_blamed_nodes=args.taint_blamed_nodes,
            progress_address=args.progress_address,
            progress_trusted=trusted,
            progress_url=args.progress_url
            or (f"http://{args.progress_address}" if args.progress_address else None),
        ),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
