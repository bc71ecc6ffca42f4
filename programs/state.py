"""`exalloc state`: the allocation service's cluster, locks and running activities, and with
`-S` its cluster as an htools snapshot (docs/locking.md)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from model.files import write_file
from programs.options import json_option, save_option, service_socket_option
from service.client import call, socket_path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    service_socket_option(parser)
    save_option(parser, "write the cluster as an htools snapshot")
    json_option(parser)
    parser.set_defaults(no_solver=True)


@dataclass(frozen=True)
class StateReport:
    result: dict[str, Any]
    saved: str | None = None

    def text(self) -> str:
        r = self.result
        lines = [
            f"{r['nodes']} nodes, {r['instances']} instances "
            f"({r['creations']} created by the service)",
            f"cluster score {r['score']:.8f}"
            + (
                f", allocation vector {list(r['allocation_vector'])}"
                if r["allocation_vector"] is not None
                else ""
            ),
            "checker: ok" if r["check_ok"] else "checker: FAILED; " + "; ".join(r["violations"]),
        ]
        for what in sorted(r["activities"].values()):
            lines.append(f"running: {what}")
        for lock in r["locks"]:
            owners = ", ".join(lock["owners"]) or "-"
            pending = ", ".join(f"{n} {m}" for m, n in lock["pending"])
            lines.append(
                f"lock {lock['name']}: {lock['mode'] or 'free'} by {owners}"
                + (f"; waiting: {pending}" if pending else "")
            )
        if self.saved:
            lines.append(f"wrote {self.saved}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in self.result.items() if k != "text"}
        if self.saved:
            out["saved"] = self.saved
        return out


def run(args: Any) -> StateReport:
    """CLI entry: `exalloc state --socket PATH [-S FILE]`."""
    result = call(socket_path(args.socket), {"op": "state", "text": bool(args.save)})
    if args.save:
        write_file(args.save, result["text"])
    return StateReport(result, args.save)
