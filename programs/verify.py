"""`exalloc verify`: a cluster-wide check through `exalloc alloc-server`, holding every node lock
and the node-allocation lock (shared) meanwhile (docs/locking.md)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from programs.options import json_option, seconds_type, service_socket_option
from service.client import call, socket_path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    service_socket_option(parser)
    parser.add_argument(
        "--hold",
        type=seconds_type,
        default=0.0,
        metavar="SECONDS",
        help="keep the locks this long",
    )
    json_option(parser)
    parser.set_defaults(no_solver=True)


@dataclass(frozen=True)
class VerifyReport:
    result: dict[str, Any]

    @property
    def exit_code(self) -> int:
        return 0 if self.result["ok"] else 1

    def text(self) -> str:
        r = self.result
        head = (
            f"verify: {r['nodes_locked']} node locks and the node-allocation lock held (shared) "
            f"for {r['held_s']:.2f} s after waiting {r['lock_wait_s']:.3f} s; "
            f"{r['commits_during']} creation(s) committed meanwhile"
        )
        body = (
            f"{r['instances']} instances ({r['creations']} created by the service), "
            f"score {r['score']:.8f}"
        )
        if r["ok"]:
            return f"{head}\n{body}; checker: ok"
        return "\n".join([head, body + "; checker: FAILED", *r["violations"]])

    def to_json(self) -> dict[str, Any]:
        return dict(self.result)


def run(args: Any) -> VerifyReport:
    """CLI entry: `exalloc verify --socket PATH [--hold S]`."""
    return VerifyReport(call(socket_path(args.socket), {"op": "verify", "hold_s": args.hold}))
