"""exalloc's command line: parse, call a program, print. Nothing else lives here."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version

from model.errors import ExallocError

EXIT_OK = 0
EXIT_BAD_INPUT = 1
EXIT_USAGE = 2


def _version() -> str:
    try:
        return version("exalloc")
    except PackageNotFoundError:  # running from a source tree that was not installed
        return "unknown"


class _Parser(argparse.ArgumentParser):
    """argparse that prints usage errors as 'exalloc: error: ...' and exits 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"exalloc: error: {message}\n")


def _solver_options(parser: argparse.ArgumentParser) -> None:
    """Global solver options, accepted before or after the subcommand."""
    group = parser.add_argument_group("solver")
    group.add_argument(
        "--solver",
        choices=("highs", "cpsat"),
        default=argparse.SUPPRESS,
        help="MIP backend (default: highs)",
    )
    group.add_argument(
        "--time-limit",
        type=float,
        metavar="SECONDS",
        default=argparse.SUPPRESS,
        help="stop each solve after SECONDS and report the best answer with its gap",
    )
    group.add_argument(
        "--gap",
        type=float,
        metavar="REL",
        default=argparse.SUPPRESS,
        help="accept a relative MIP gap of REL (default 0: prove optimality)",
    )
    group.add_argument(
        "--threads", type=int, default=argparse.SUPPRESS, help="solver threads (default 1)"
    )
    group.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print one JSON object on stdout",
    )


_SOLVER_DEFAULTS = {"solver": "highs", "time_limit": None, "gap": 0.0, "threads": 1, "json": False}


def _add_info(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("info", help="summarise a cluster snapshot, like hinfo")
    p.add_argument(
        "-t",
        "--text-data",
        dest="text_data",
        required=True,
        metavar="FILE",
        help="cluster snapshot in the htools text format",
    )
    _solver_options(p)
    p.set_defaults(run=_run_info)


def _run_info(args: argparse.Namespace) -> object:
    from programs import info

    return info.run(args.text_data)


def _add_partition(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("partition", help="integer Bareon disk layout from a dynamic schema")
    p.add_argument(
        "--schema",
        metavar="SCHEMA.yaml",
        help="bareon-allocator dynamic schema, or a fixture file with dynamic_schema/hw_info",
    )
    p.add_argument(
        "--hw-info",
        dest="hw_info",
        metavar="HW.yaml",
        help="hardware information (not needed with a fixture file)",
    )
    p.add_argument(
        "--format",
        dest="output_format",
        choices=("allocator", "bareon", "ironic"),
        default="allocator",
        help="output document (default: allocator)",
    )
    p.add_argument("--svg", metavar="FILE", help="also draw the layout as an SVG picture")
    p.add_argument(
        "--baseline",
        choices=("lp-floor",),
        help="also solve as bareon-allocator does (LP, rounded down) and compare",
    )
    p.add_argument(
        "--leave-preferred-empty",
        action="store_true",
        help="like bareon-allocator: spaces without disk preference never use a preferred disk",
    )
    _solver_options(p)
    p.set_defaults(run=_run_partition)


def _run_partition(args: argparse.Namespace) -> object:
    from programs import partition

    return partition.run(args)


def _add_hail(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("hail", help="IAllocator: answer a Ganeti allocation request, like hail")
    p.add_argument("request", metavar="REQUEST.json", help="IAllocator v2 request ('-' for stdin)")
    p.add_argument(
        "-t",
        "--text-data",
        dest="text_data",
        metavar="FILE",
        help="take the cluster from this text snapshot instead of the request",
    )
    p.add_argument(
        "--compare",
        action="store_true",
        help="also run the real hail and show both answers side by side",
    )
    p.add_argument(
        "--static-kvm-node-memory",
        dest="static_kvm_node_memory",
        type=int,
        default=4096,
        metavar="MIB",
        help="node memory assumed on kvm (default 4096)",
    )
    _solver_options(p)
    p.set_defaults(run=_run_hail)


def _run_hail(args: argparse.Namespace) -> object:
    from programs import hail

    return hail.run(args)


def _add_squeeze(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("squeeze", help="power nodes down (or standby nodes up), like hsqueeze")
    p.add_argument(
        "-t",
        "--text-data",
        dest="text_data",
        required=True,
        metavar="FILE",
        help="cluster snapshot in the htools text format",
    )
    p.add_argument(
        "--minimal-resources",
        dest="minimal_resources",
        type=float,
        default=2.0,
        metavar="F",
        help="every node must host F x std spec, else expand (default 2.0)",
    )
    p.add_argument(
        "--target-resources",
        dest="target_resources",
        type=float,
        default=2.0,
        metavar="F",
        help="after shrinking every node hosts F x std spec (default 2.0)",
    )
    p.add_argument(
        "--move",
        choices=("ext", "drbd", "all"),
        default="ext",
        help="which instances may move (default ext: externally mirrored only)",
    )
    p.add_argument(
        "-C",
        "--print-commands",
        dest="print_commands",
        nargs="?",
        const="-",
        metavar="FILE",
        help="print the commands (or write a script to FILE)",
    )
    p.add_argument(
        "-S",
        "--save",
        dest="save",
        metavar="FILE",
        help="write FILE.original and FILE.squeezed in the text format",
    )
    p.add_argument(
        "-v",
        "--verbose",
        dest="verbose",
        action="count",
        default=1,
        help="more output (-v shows the candidates)",
    )
    p.add_argument(
        "--no-headers", dest="no_headers", action="store_true", help="omit the header line"
    )
    p.add_argument(
        "--static-kvm-node-memory",
        dest="static_kvm_node_memory",
        type=int,
        default=4096,
        metavar="MIB",
        help="node memory assumed on kvm (default 4096)",
    )
    _solver_options(p)
    p.set_defaults(run=_run_squeeze)


def _run_squeeze(args: argparse.Namespace) -> object:
    from programs import squeeze

    return squeeze.run(args)


_COMMANDS: Sequence[Callable[[argparse._SubParsersAction], None]] = (
    _add_info,
    _add_hail,
    _add_squeeze,
    _add_partition,
)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="exalloc", description=__doc__)
    parser.add_argument("--version", action="version", version=f"exalloc {_version()}")
    _solver_options(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for add in _COMMANDS:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for key, default in _SOLVER_DEFAULTS.items():
        if not hasattr(args, key):
            setattr(args, key, default)
    try:
        report = args.run(args)
        text = json.dumps(report.to_json(), indent=2) if args.json else report.text()
    except ExallocError as err:
        print(f"exalloc: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("exalloc: interrupted", file=sys.stderr)
        return 130
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return getattr(report, "exit_code", EXIT_OK)


def hail_main(argv: Sequence[str] | None = None) -> int:
    """Entry point Ganeti calls as an iallocator: `exalloc-hail [OPTIONS] REQUEST.json`."""
    args = list(sys.argv[1:] if argv is None else argv)
    return main(["hail", *args])


if __name__ == "__main__":
    sys.exit(main())
