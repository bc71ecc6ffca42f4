"""`exalloc hail-server`: answer `exalloc-hail` calls from a process that imported everything once.

Parse -> choose the socket -> `service.hail_server.serve` until SIGTERM/SIGINT. This module
owns what is hail's in the warm process: the modules a call needs and the requests a fresh
worker rehearses; the pre-forked workers, the protocol and its limits are the service's
(service/hail_server.py, docs/reliability.md "hail-server").
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from programs.options import solver_options
from service.hail_client import DEFAULT_SOCKET, socket_path
from service.hail_server import ServerReport, serve
from service.sockets import ServerError

#: Modules a call needs, imported before the workers are forked.
WARM_MODULES = (
    "pyomo.core",
    "programs.hail",
    "solvers.strategies.iallocator",  # programs.hail imports it only when it answers
    "formulations.dedicated",
    "solvers.highs_backend",
    "solvers.cpsat_backend",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Answer exalloc-hail calls from a warm process (see docs/hail.md). "
        "Stops on SIGTERM or SIGINT."
    )
    parser.add_argument(
        "--socket",
        metavar="PATH",
        help="socket to listen on (default: $EXALLOC_HAIL_SOCKET, else /run/exalloc/hail.sock)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=2,
        metavar="N",
        help="calls answered at the same time (default 2)",
    )
    solver_options(parser)


def run(args: Any) -> ServerReport:
    """CLI entry: `exalloc hail-server [--socket PATH] [--workers N]`."""
    path = args.socket or socket_path() or DEFAULT_SOCKET
    if args.workers < 1:
        raise ServerError(f"--workers must be at least 1, not {args.workers}")
    return serve(path, args.workers, log=sys.stderr, make_main=args.make_main, warm_up=warm_up)


def warm_up() -> list[str]:
    """Import what a call needs, so that workers start with it loaded; return small
    requests a fresh worker answers once before its call (see `rehearse`)."""
    import importlib
    import json

    for name in WARM_MODULES:
        importlib.import_module(name)
    from model.generate import DEDICATED_IPOLICY, ClusterSpec, generate_cluster, generate_request

    spec = ClusterSpec(
        nodes=6, exclusive_storage=True, ipolicy=DEDICATED_IPOLICY, templates=("plain", "drbd")
    )
    cluster = generate_cluster(spec, seed=1)
    return [json.dumps(generate_request(cluster, seed)) for seed in range(4)]
