"""`exalloc create`: one instance created through `exalloc alloc-server` (docs/locking.md);
the exit code says how it went (0 created, 3 temp_nores, 4 nores)."""

from __future__ import annotations

import argparse
import uuid
from dataclasses import dataclass
from typing import Any

from programs.options import json_option, seconds_type, service_socket_option
from service.client import call, socket_path

EXIT_CREATED, EXIT_TEMP_NORES, EXIT_NORES = 0, 3, 4
STATUS_EXIT = {"created": EXIT_CREATED, "temp_nores": EXIT_TEMP_NORES, "nores": EXIT_NORES}


def _int_list(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of MiB: {text!r}") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Exit codes: 0 created, 3 temp_nores (resubmit, or go to another cluster), "
        "4 nores, 1 bad request or no service, 2 usage."
    )
    service_socket_option(parser)
    parser.add_argument("--name", required=True, help="instance name")
    parser.add_argument(
        "--template", required=True, metavar="TEMPLATE", help="disk template (plain, drbd, ...)"
    )
    parser.add_argument("--memory", required=True, type=int, metavar="MIB", help="memory in MiB")
    parser.add_argument(
        "--disk", type=_int_list, default=[], metavar="MIB[,MIB]", help="disk sizes in MiB"
    )
    parser.add_argument(
        "--spindles", type=_int_list, metavar="N[,N]", help="spindles per disk (default 1 each)"
    )
    parser.add_argument(
        "--vcpus", type=int, default=1, metavar="N", help="virtual CPUs (default 1)"
    )
    parser.add_argument(
        "--spindle-use",
        dest="spindle_use",
        type=int,
        default=1,
        metavar="N",
        help="instance spindle use (default 1)",
    )
    parser.add_argument(
        "--opportunistic",
        action="store_true",
        help="lock only the nodes free now (Ganeti's opportunistic locking)",
    )
    parser.add_argument(
        "--hold",
        type=seconds_type,
        default=0.0,
        metavar="SECONDS",
        help="keep the used nodes locked this long after the commit (disk wipe and sync)",
    )
    parser.add_argument(
        "--lock-timeout",
        dest="lock_timeout",
        type=seconds_type,
        metavar="SECONDS",
        help="give up waiting for locks after SECONDS (temp_nores; default: wait)",
    )
    parser.add_argument(
        "--request-id",
        dest="request_id",
        metavar="ID",
        help="resubmitting a request with the same id answers it again, never twice",
    )
    json_option(parser)
    parser.set_defaults(no_solver=True)


@dataclass(frozen=True)
class CreateReport:
    result: dict[str, Any]

    @property
    def exit_code(self) -> int:
        return STATUS_EXIT[self.result["status"]]

    def text(self) -> str:
        r = self.result
        if r["status"] == "created":
            how = f"{r['mode']} locks: waited {r['lock_wait_s']:.3f} s"
            how += f", allocation {r['alloc_s']:.3f} s"
            if r.get("held_s"):
                how += f", held {r['held_s']:.2f} s"
            return f"created {r['name']} on {'/'.join(r['nodes'])} ({how})\ninfo: {r['info']}"
        return f"{r['status']}: {r['name']} not created: {r['info']}"

    def to_json(self) -> dict[str, Any]:
        return dict(self.result)


def create_request(args: Any) -> dict[str, Any]:
    """The create request of the command line (validated by the server)."""
    disks = list(args.disk or [])
    spindles = list(args.spindles) if args.spindles else [1] * len(disks)
    return {
        "op": "create",
        "request_id": args.request_id or str(uuid.uuid4()),
        "name": args.name,
        "template": args.template,
        "memory": args.memory,
        "disks": disks,
        "spindles": spindles,
        "vcpus": args.vcpus,
        "spindle_use": args.spindle_use,
        "opportunistic": bool(args.opportunistic),
        "hold_s": args.hold,
        "lock_timeout_s": args.lock_timeout,
    }


def run(args: Any) -> CreateReport:
    """CLI entry: `exalloc create --socket PATH --name NAME --template T --memory MIB ...`."""
    return CreateReport(call(socket_path(args.socket), create_request(args)))
