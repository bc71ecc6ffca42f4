"""exalloc: exact answers to Ganeti's capacity questions and Bareon's disk layouts.

Where Ganeti's htools (hail, hsqueeze, hbal, hspace) decide greedily and Bareon's allocator
rounds a linear relaxation, exalloc solves each question exactly as a MIP (HiGHS or OR-Tools
CP-SAT), says how good the answer is (optimal, or the gap to a proven bound), checks it with an
independent checker, and shows what the greedy tool would have done.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import json
import math
import os
import sys
from collections.abc import Callable, Sequence

from model.errors import ExallocError

EXIT_OK = 0
EXIT_BAD_INPUT = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 70  # EX_SOFTWARE (sysexits.h): a bug, not bad input
REPORT_HINT = "this is a bug in exalloc: please report it with the command and its input"


def _version() -> str:
    # imported here: importlib.metadata costs 25 ms, and exalloc-hail starts once per request
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("exalloc")
    except PackageNotFoundError:  # running from a source tree that was not installed
        return "unknown"


class _VersionAction(argparse.Action):
    """--version, looked up only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        sys.stdout.write(f"exalloc {_version()}\n")
        parser.exit()


class _Parser(argparse.ArgumentParser):
    """argparse that prints usage errors as 'exalloc: error: ...' and exits 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog.split()[0]}: error: {message}\n")


# cli.py only parses, calls a program and prints; everything else lives in programs/.
PRODUCT = __doc__


def _number_type(low: float, *, strict: bool, integer: bool = False) -> Callable:
    """An argparse type: a finite number above `low` (or at least it), else a usage error."""

    def parse(text: str) -> float | int:
        try:
            value = int(text) if integer else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        too_low = value <= low if strict else value < low
        if not math.isfinite(value) or too_low:
            bound = f"greater than {low:g}" if strict else f"at least {low:g}"
            raise argparse.ArgumentTypeError(f"must be a finite number {bound}, not {text}")
        return value

    return parse


def _solver_options(parser: argparse.ArgumentParser, *, shown: bool = True) -> None:
    """Solver options of the commands that solve. They are also accepted before the command
    (older scripts put them there) but shown only on the commands that use them."""

    def text(message: str) -> str:
        return message if shown else argparse.SUPPRESS

    group = parser.add_argument_group("solver") if shown else parser
    group.add_argument(
        "--solver",
        choices=("highs", "cpsat"),
        default=argparse.SUPPRESS,
        help=text("MIP backend (default: highs)"),
    )
    group.add_argument(
        "--time-limit",
        type=_number_type(0, strict=True),
        metavar="SECONDS",
        default=argparse.SUPPRESS,
        help=text("stop after SECONDS and report the best answer found with its gap"),
    )
    group.add_argument(
        "--gap",
        type=_number_type(0, strict=False),
        metavar="REL",
        default=argparse.SUPPRESS,
        help=text("accept a relative MIP gap of REL (default 0: prove optimality)"),
    )
    group.add_argument(
        "--threads",
        type=_number_type(1, strict=False, integer=True),
        default=argparse.SUPPRESS,
        help=text("solver threads (default 1)"),
    )


def _json_option(parser: argparse.ArgumentParser, *, shown: bool = True) -> None:
    parser.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print one JSON object on stdout" if shown else argparse.SUPPRESS,
    )


def _program(name: str) -> Callable[[argparse.Namespace], object]:
    """The `run(args)` of programs/NAME.py, imported only when its command runs (start-up time)."""

    def run(args: argparse.Namespace) -> object:
        return importlib.import_module(f"programs.{name}").run(args)

    return run


def _static_kvm_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--static-kvm-node-memory",
        dest="static_kvm_node_memory",
        type=int,
        default=4096,
        metavar="MIB",
        help="node memory assumed on kvm nodes (default 4096, as htools)",
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
    _json_option(p)
    p.set_defaults(run=_run_info)


def _run_info(args: argparse.Namespace) -> object:
    from programs import info

    return info.run(args.text_data)


def _add_partition(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("partition", help="integer Bareon disk layout from a dynamic schema")
    p.add_argument(
        "--schema",
        required=True,
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
    _json_option(p)
    p.set_defaults(run=_program("partition"))


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
    _static_kvm_option(p)
    _solver_options(p)
    _json_option(p)
    p.set_defaults(run=_program("hail"))


def _add_hail_server(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "hail-server",
        help="keep exalloc loaded and answer exalloc-hail calls over a Unix socket",
        description="Answer exalloc-hail calls from a warm process (see docs/hail.md). "
        "Stops on SIGTERM or SIGINT.",
    )
    p.add_argument(
        "--socket",
        metavar="PATH",
        help="socket to listen on (default: $EXALLOC_HAIL_SOCKET, else /run/exalloc/hail.sock)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=2,
        metavar="N",
        help="calls answered at the same time (default 2)",
    )
    _solver_options(p)
    p.set_defaults(run=_program("hail_service"), make_main=_warm_main)


def _add_n1(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "n1",
        help="exact N+1 health: can every node's failure be absorbed by its group?",
        description="For every node: a plan that re-places its primaries on the rest of its "
        "group (drbd failover, migration, recreation), or the proof that none exists. "
        "See docs/n1.md.",
    )
    p.add_argument(
        "-t",
        "--text-data",
        dest="text_data",
        required=True,
        metavar="FILE",
        help="cluster: an htools text snapshot or an IAllocator request (.json)",
    )
    p.add_argument(
        "--n1",
        choices=("hard", "strict"),
        default="hard",
        help="hard: Ganeti's hard checks only, as its global N+1 (default); strict: also the "
        "vCPU ratio and exclusion tags",
    )
    p.add_argument(
        "--offline-targets",
        dest="offline_targets",
        action="store_true",
        help="let offline nodes take instances, as htools' check does (default: online only)",
    )
    p.add_argument(
        "-G", "--group", action="append", metavar="GROUP", help="only this group (repeatable)"
    )
    p.add_argument(
        "--compare", action="store_true", help="also run the real hcheck and show its counts"
    )
    p.add_argument(
        "-v", "--verbose", action="store_true", help="every node, with its plan step by step"
    )
    _solver_options(p)
    _json_option(p)
    p.set_defaults(run=_program("n1"))


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
    _static_kvm_option(p)
    _solver_options(p)
    _json_option(p)
    p.set_defaults(run=_program("squeeze"))


def _add_generate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "generate", help="write seeded synthetic snapshots, IAllocator requests and Bareon pairs"
    )
    p.add_argument("--out", required=True, metavar="DIR", help="folder to write into")
    p.add_argument("--count", type=int, default=10, help="snapshots to write (default 10)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--nodes", default="8", metavar="N|LOW-HIGH", help="nodes per snapshot")
    p.add_argument("--groups", type=int, default=1, help="node groups (default 1)")
    p.add_argument(
        "--node-types",
        dest="node_types",
        metavar="MEM:DISK:CPUS,...",
        help="node sizes to draw from, MiB:MiB:CPUs (default 32768:512000:8,"
        "65536:1048576:16,131072:2097152:32)",
    )
    p.add_argument(
        "--templates",
        default="ext,plain,drbd",
        metavar="LIST",
        help="disk templates of the instances (default ext,plain,drbd)",
    )
    p.add_argument(
        "--exclusive-storage",
        dest="exclusive_storage",
        action="store_true",
        help="dedicated nodes (exclusive storage, plain instances with spindles)",
    )
    p.add_argument(
        "--fill", type=float, default=0.5, help="share of node memory in use (default 0.5)"
    )
    p.add_argument(
        "--standby",
        type=int,
        default=0,
        metavar="N",
        help="offline nodes tagged htools:standby:auto (default 0)",
    )
    p.add_argument(
        "--requests",
        default="allocate,multi-allocate",
        metavar="LIST",
        help="IAllocator requests per snapshot: allocate,multi-allocate or none",
    )
    p.add_argument(
        "--multi-count",
        dest="multi_count",
        type=int,
        default=3,
        metavar="N",
        help="instances per multi-allocate request (default 3)",
    )
    p.add_argument("--bareon", type=int, default=0, metavar="N", help="Bareon pairs to write")
    p.add_argument(
        "--bareon-disks",
        dest="bareon_disks",
        type=int,
        default=3,
        metavar="N",
        help="disks of each generated Bareon machine (default 3)",
    )
    p.add_argument(
        "--bareon-spaces",
        dest="bareon_spaces",
        type=int,
        default=5,
        metavar="N",
        help="spaces of each generated Bareon schema (default 5)",
    )
    p.add_argument(
        "--bareon-split",
        dest="bareon_split",
        action="store_true",
        help="write each Bareon pair as schema.yaml + hw.yaml in its own folder",
    )
    p.set_defaults(run=_program("generate"))


def _add_compare(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compare", help="exalloc's exact answer beside the greedy tool's, input by input"
    )
    p.add_argument(
        "inputs",
        nargs="+",
        metavar="INPUT",
        help=".data, IAllocator .json, Bareon .yaml files, or folders or globs of them",
    )
    p.add_argument(
        "--greedy-timeout",
        dest="greedy_timeout",
        type=_number_type(0, strict=True),
        default=300.0,
        metavar="SECONDS",
        help="give up on the greedy tool after SECONDS (default 300)",
    )
    _solver_options(p)
    _json_option(p)
    p.set_defaults(run=_program("compare"))


def _add_batch(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("batch", help="solve many inputs in parallel into a resumable JSONL file")
    p.add_argument("inputs", nargs="+", metavar="DIR_OR_GLOB", help="folders, globs or files")
    p.add_argument("--out", required=True, metavar="RESULTS.jsonl", help="results (appended)")
    p.add_argument("--workers", type=int, default=2, help="local worker processes (default 2)")
    p.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="run on this Dask distributed scheduler (e.g. tcp://host:8786) instead",
    )
    p.add_argument("--compare", action="store_true", help="also run the greedy tool on every input")
    p.add_argument(
        "--greedy-timeout",
        dest="greedy_timeout",
        type=_number_type(0, strict=True),
        default=300.0,
        metavar="SECONDS",
        help="give up on the greedy tool after SECONDS (default 300)",
    )
    p.add_argument("--no-progress", dest="no_progress", action="store_true", help="no progress bar")
    _solver_options(p)
    p.set_defaults(run=_program("batch"))


def _add_report(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="plots and a summary table from batch results")
    p.add_argument("results", metavar="RESULTS.jsonl", help="what exalloc batch wrote")
    p.add_argument(
        "--out",
        required=True,
        metavar="REPORT.html|DIR",
        help="an HTML file (plots inline), or a folder for PNG files",
    )
    p.set_defaults(run=_program("report"))


_COMMANDS: Sequence[Callable[[argparse._SubParsersAction], None]] = (
    _add_info,
    _add_hail,
    _add_hail_server,
    _add_squeeze,
    _add_n1,
    _add_partition,
    _add_generate,
    _add_compare,
    _add_batch,
    _add_report,
)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="exalloc",
        description=PRODUCT,
        epilog="Run 'exalloc COMMAND --help' for a command's options.\n"
        "README.md and docs/ explain each command and how its answers are proven.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=_VersionAction, help="show the version and exit")
    parser.add_argument(
        "--debug",
        action="store_true",
        help="on an internal error, print the traceback as well",
    )
    _solver_options(parser, shown=False)
    _json_option(parser, shown=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for add in _COMMANDS:
        add(sub)
    return parser


def _solver_options_of(args: argparse.Namespace) -> object:
    """The typed solver options programs pass on (solvers.options.SolverOptions)."""
    from solvers.options import SolverOptions

    return SolverOptions(args.solver, args.time_limit, args.gap, args.threads)


def main(argv: Sequence[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    """Parse, run, print. `parser` lets a server reuse one built ahead of the call."""
    args = (parser or build_parser()).parse_args(argv)
    for key, default in _SOLVER_DEFAULTS.items():
        if not hasattr(args, key):
            setattr(args, key, default)
    args.solver_options = _solver_options_of(args)
    try:
        report = args.run(args)
        text = json.dumps(report.to_json(), indent=2) if args.json else report.text()
    except ExallocError as err:
        print(f"exalloc: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("exalloc: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001 - the last line of defence: a bug, never a traceback
        return _internal_error(err, debug=getattr(args, "debug", False))
    try:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:  # `exalloc ... | head`: the reader left, nothing more to say
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    return getattr(report, "exit_code", EXIT_OK)


def _internal_error(err: Exception, *, debug: bool) -> int:
    """One line naming the exception and where it was raised, a hint to report it, exit 70;
    the traceback only with --debug."""
    import traceback  # only on this path: exalloc-hail starts once per request

    if debug:
        traceback.print_exception(err, file=sys.stderr)
    frames = traceback.extract_tb(err.__traceback__)
    where = f" at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else ""
    what = " ".join(str(err).split())[:300]
    what = f"{type(err).__name__}: {what}" if what else type(err).__name__
    hint = "" if debug else "; rerun with --debug for the traceback"
    print(f"exalloc: internal error: {what}{where} ({REPORT_HINT}{hint})", file=sys.stderr)
    return EXIT_INTERNAL


def _warm_main() -> Callable[[list[str]], int]:
    """`main` with its parser built now: hail-server workers build it before their call."""
    return functools.partial(main, parser=build_parser())


def hail_parser() -> argparse.ArgumentParser:
    """The command line as `exalloc-hail` sees it: `exalloc hail`, named exalloc-hail."""
    parser = build_parser()
    for action in parser._subparsers._group_actions:  # noqa: SLF001 - argparse has no API
        hail = getattr(action, "choices", {}).get("hail")
        if hail is not None:
            hail.prog = "exalloc-hail"
    return parser


def hail_main(argv: Sequence[str] | None = None) -> int:
    """`exalloc-hail [OPTIONS] REQUEST.json` answered in this process (the console script,
    programs.hail_client.main, first tries a running `exalloc hail-server`)."""
    args = list(sys.argv[1:] if argv is None else argv)
    return main(["hail", *args], parser=hail_parser())


if __name__ == "__main__":
    sys.exit(main())
