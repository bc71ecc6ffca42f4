"""`exalloc alloc-server`: the live allocation service on a Unix socket (docs/locking.md).

Parse -> open the state directory (replaying its journal) -> `service.server.Server` serves
until SIGTERM/SIGINT, creating instances with `service.allocation.AllocationService` and
exalloc's iallocator (`service.iallocator`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from model.backends.text import parse_text
from model.errors import InputError
from programs.options import capacity_checks_option, service_socket_option, solver_options
from service.allocation import AllocationService
from service.client import socket_path
from service.iallocator import iallocator_answer
from service.journal import Journal
from service.server import Server, ServerReport


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Keep a cluster in memory and create instances for concurrent clients "
        "(exalloc create / verify / state / loadtest) with Ganeti's node and node-allocation "
        "locks, a journal in the state directory, and exalloc's iallocator. Stops on SIGTERM or "
        "SIGINT. See docs/locking.md."
    )
    parser.add_argument(
        "-t",
        "--text-data",
        dest="text_data",
        metavar="FILE",
        help="cluster snapshot (htools text); may be left out on a restart",
    )
    service_socket_option(parser)
    parser.add_argument(
        "--state-dir",
        dest="state_dir",
        required=True,
        metavar="DIR",
        help="where the snapshot and the journal of creations are kept",
    )
    capacity_checks_option(parser)
    solver_options(parser)


def run(args: Any) -> ServerReport:
    """CLI entry: `exalloc alloc-server -t FILE --socket PATH --state-dir DIR`."""
    text = None
    if args.text_data:
        try:
            text = Path(args.text_data).read_text(encoding="utf-8", errors="surrogateescape")
        except OSError as exc:
            raise InputError(f"cannot read: {exc.strerror}", source=args.text_data) from None
        parse_text(text, args.text_data)  # errors name the file given, not the stored copy
    journal = Journal.open(args.state_dir, text)
    options, checks = args.solver_options, args.capacity_checks
    service = AllocationService(journal, lambda c, r: iallocator_answer(c, r, options, checks))
    try:
        return Server(service, socket_path(args.socket), sys.stderr).serve()
    finally:
        journal.close()
