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

from model.errors import ExallocError, printable

EXIT_OK = 0
EXIT_BAD_INPUT = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 70  # EX_SOFTWARE (sysexits.h): a bug, not bad input
REPORT_HINT = "this is a bug in exalloc: please report it with the command and its input"


class _VersionAction(argparse.Action):
    """--version, looked up only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        from programs.version import version

        sys.stdout.write(f"exalloc {version()}\n")
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
        help=text("MIP backend (default: highs; cpsat for squeeze --move drbd|all)"),
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


def _capacity_checks_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--capacity-checks",
        dest="capacity_checks",
        choices=("exact", "greedy", "none"),
        default="exact",
        help="global N+1 check of allocations on normal groups: exact = an exact packing per "
        "node (default, docs/n1.md), greedy = hail's own, none = hail's --no-capacity-checks",
    )
    parser.add_argument(
        "--no-capacity-checks",
        dest="capacity_checks",
        action="store_const",
        const="none",
        help="hail's option: --capacity-checks none",
    )


def _static_kvm_option(
    parser: argparse.ArgumentParser,
    text: str = "node memory assumed on kvm nodes (default 4096, as htools)",
) -> None:
    parser.add_argument(
        "--static-kvm-node-memory",
        dest="static_kvm_node_memory",
        type=int,
        default=4096,
        metavar="MIB",
        help=text,
    )


# -- live clusters (docs/live.md) ---------------------------------------------------------------

LUXI_DEFAULT_HELP = "/var/run/ganeti/socket/ganeti-query"


def _live_source_options(target: argparse._ActionsContainer, *, repeatable: bool = False) -> None:
    """-m ADDRESS and -L[SOCKET]: read a running cluster as htools does (repeatable: one
    input per option, for compare and batch)."""
    action = "append" if repeatable else "store"
    target.add_argument(
        "-m",
        "--master",
        dest="master",
        action=action,
        metavar="ADDRESS",
        help="read the cluster through RAPI at ADDRESS (https://ADDRESS:5080 unless ADDRESS "
        "holds a ':', e.g. http://host:8080; file://DIR reads saved answers)",
    )
    target.add_argument(
        "-L",
        "--luxi",
        dest="luxi",
        action=action,
        nargs="?",
        const="",
        metavar="SOCKET",
        help=f"read the cluster through LUXI, at SOCKET if attached (-L/path or --luxi=/path; "
        f"default {LUXI_DEFAULT_HELP})",
    )


def _cluster_source(parser: argparse.ArgumentParser, text_help: str) -> None:
    """Exactly one of -t FILE, -m ADDRESS, -L[SOCKET] (htools: only one backend at a time)."""
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("-t", "--text-data", dest="text_data", metavar="FILE", help=text_help)
    _live_source_options(source)


def _attached_optionals(argv: Sequence[str]) -> list[str]:
    """getopt's optional arguments: a bare option never takes the next word, as argparse's
    would. htools' `-L[SOCKET]` (so `batch -L data/` reads the default socket and data/),
    hail's `--mond[=CHOICE]` (yes when bare: `hail --mond REQUEST.json`) and `-p[FIELDS]`."""
    bare = {
        "-L": "--luxi=",
        "--luxi": "--luxi=",
        "--mond": "--mond=yes",
        "-p": "--print-nodes=",
        "--print-nodes": "--print-nodes=",
    }
    return [bare.get(arg, arg) for arg in argv]


_SOLVER_DEFAULTS = {"solver": "highs", "time_limit": None, "gap": 0.0, "threads": 1, "json": False}


def _add_info(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("info", help="summarise a cluster (snapshot or live), like hinfo")
    _cluster_source(p, "cluster snapshot in the htools text format")
    p.add_argument(
        "-S",
        "--save",
        dest="save",
        metavar="FILE",
        help="also write the cluster as read to FILE (htools text format)",
    )
    _static_kvm_option(p)
    _json_option(p)
    p.set_defaults(run=_run_info)


def _run_info(args: argparse.Namespace) -> object:
    from programs import info

    return info.run_args(args)


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
    _capacity_checks_option(p)
    p.add_argument(
        "--ignore-soft-errors",
        dest="ignore_soft_errors",
        action="store_true",
        help="like hail: ignore soft errors (N+1 reserve, vCPU ratio, tags, min disk)",
    )
    p.add_argument(
        "--restrict-allocation-to",
        dest="restrict_allocation_to",
        type=lambda text: tuple(n for n in text.split(",") if n),
        metavar="NODE,NODE",
        help="like hail: allocate only on these nodes (wins over restrict-to-nodes)",
    )
    _static_kvm_option(p)
    _hail_only_options(p)
    _solver_options(p)
    _json_option(p)
    p.set_defaults(run=_program("hail"))


def _print_fields(text: str) -> str:
    """hail's -p fields, but `peermap`: htools shows the peers in the order its insertions
    left them, which exalloc's node state does not keep (docs/hail.md)."""
    if "peermap" in text.lstrip("+").split(","):
        raise argparse.ArgumentTypeError("the field peermap is not supported by exalloc")
    return text


def _hail_only_options(p: argparse.ArgumentParser) -> None:
    """The rest of hail 3.0's options, so that any hail command line, and any parameters
    `gnt-cluster modify --default-iallocator-params` has Ganeti pass (as `--key=value` after
    the request file), work unchanged (docs/hail.md, "Use as Ganeti's iallocator")."""
    p.add_argument("-V", "--version", action=_VersionAction, help="show the version and exit")
    p.add_argument(
        "--simulate",
        dest="simulate",
        action="append",
        metavar="SPEC",
        help="like hail: answer on empty simulated groups instead of the request's cluster, one "
        "per SPEC (policy,count,disk,memory,cpus[,spindles[,exclusive_storage]]), e.g. "
        "p,8,8T,16g,16",
    )
    p.add_argument(
        "-S",
        "--save",
        dest="save",
        metavar="FILE",
        help="like hail: write the cluster before and after the answer to FILE.pre-ialloc and "
        "FILE.post-ialloc (htools text format)",
    )
    p.add_argument(
        "-p",
        "--print-nodes",
        dest="print_nodes",
        type=_print_fields,
        metavar="FIELDS",
        help="like hail: the node list before and after the answer on stderr (-p alone: "
        "htools' default fields; -pF1,F2 those; -p+F1 the defaults and F1)",
    )
    p.add_argument(
        "-v",
        "--verbose",
        dest="verbose",
        action="count",
        default=0,
        help="like hail's (accepted; exalloc prints no request dumps)",
    )
    p.add_argument(
        "--ignore-dynu",
        dest="ignore_dynu",
        action="store_true",
        help="like hail: no dynamic utilisation (with -t, every instance's load is 0)",
    )
    p.add_argument(
        "--mond",
        dest="mond",
        nargs="?",
        const="yes",
        default="no",
        choices=("yes", "no"),
        help="hail's MonD query (accepted; exalloc reads no MonD data: answered as hail does "
        "when no MonD answers)",
    )
    p.add_argument(
        "--mond-xen",
        dest="mond_xen",
        action="store_true",
        help="hail's Xen CPU collector for --mond (accepted, as --mond)",
    )


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
    _group_cluster_source(p)
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
    p.set_defaults(run=_program("n1"), pool_prefix="pool:", no_greedy=False, print_commands=False)


def _group_cluster_source(p: argparse.ArgumentParser) -> None:
    """n1 and the super-cluster programs: a snapshot, a request, or a running cluster."""
    _cluster_source(
        p, "cluster: an htools text snapshot or an IAllocator request (.json); or -m/-L"
    )
    _static_kvm_option(p)


def _exec_option(p: argparse.ArgumentParser, text: str) -> None:
    """-X: run the plan on the live cluster through LUXI (htools' option)."""
    p.add_argument("-X", "--exec", dest="exec_jobs", action="store_true", help=text)


def _super_cluster_options(p: argparse.ArgumentParser) -> None:
    """What redistribute, compress and evacuate share (docs/groups.md)."""
    _group_cluster_source(p)
    p.add_argument(
        "-C",
        "--print-commands",
        dest="print_commands",
        action="store_true",
        help="print the Ganeti commands of the plan, in jobsets, as hbal -C",
    )
    p.add_argument(
        "--n1",
        choices=("hard", "strict"),
        default="hard",
        help="N+1 checks: hard (Ganeti's, default) or strict (also vCPU ratio, exclusion tags)",
    )
    p.add_argument(
        "--offline-targets",
        dest="offline_targets",
        action="store_true",
        help="let offline nodes take instances in the N+1 check, as htools does",
    )
    p.add_argument(
        "--pool-prefix",
        dest="pool_prefix",
        default="pool:",
        metavar="PREFIX",
        help="tag prefix naming storage pools on nodes, groups and instances (default pool:)",
    )
    p.add_argument(
        "--no-greedy",
        dest="no_greedy",
        action="store_true",
        help="skip the greedy baseline (the design's algorithm on htools' allocation)",
    )
    p.set_defaults(group=None, compare=False, verbose=False)  # compress adds them
    _solver_options(p)
    _json_option(p)


def _add_redistribute(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "redistribute",
        help="the fewest moves to healthy peer groups that make every group healthy, proven",
        description="Super-cluster redistribution (docs/groups.md).",
    )
    _super_cluster_options(p)
    _exec_option(
        p,
        "run the plan's jobs on the cluster read with -L, jobset by jobset, as the -C "
        "commands (docs/groups.md)",
    )
    p.set_defaults(run=_program("redistribute"))


def _add_compress(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compress",
        help="which groups can be emptied into their peer groups, proven, and the best plan",
        description="Super-cluster compression (docs/groups.md).",
    )
    _super_cluster_options(p)
    p.add_argument(
        "-G", "--group", action="append", metavar="GROUP", help="only this group (repeatable)"
    )
    p.add_argument(
        "--compare",
        action="store_true",
        help="also run the real hail's change-group for every group",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="more detail")
    p.set_defaults(run=_program("compress"))


def _add_evacuate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "evacuate",
        help="evacuate nodes inside their group first, then across groups, proven",
        description="Node evacuation across groups (docs/groups.md).",
    )
    _super_cluster_options(p)
    p.add_argument(
        "--nodes", required=True, metavar="A,B", help="the nodes to evacuate, comma-separated"
    )
    _exec_option(
        p,
        "run the plan's jobs on the cluster read with -L, jobset by jobset, as the -C "
        "commands (docs/groups.md)",
    )
    p.set_defaults(run=_program("evacuate"))


def _add_squeeze(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("squeeze", help="power nodes down (or standby nodes up), like hsqueeze")
    _cluster_source(p, "cluster snapshot in the htools text format")
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
    _exec_option(
        p,
        "run the plan's jobs on the cluster read with -L, job set by job set, as hsqueeze -X "
        "(docs/squeeze.md)",
    )
    p.add_argument("-V", "--version", action=_VersionAction, help="show the version and exit")
    _static_kvm_option(
        p,
        "node memory assumed on kvm nodes (default 4096, as hsqueeze); text snapshots (-t)"
        " name no hypervisor, so it has no effect on them",
    )
    _solver_options(p)
    _json_option(p)
    p.set_defaults(run=_program("squeeze"))


def _add_roll(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "roll",
        help="rolling reboots in the fewest rounds, proven, like hroller",
        description="Which nodes to reboot together, in as few rounds as possible: hroller's "
        "question answered exactly (--greedy: hroller itself). See docs/roll.md.",
    )
    source = p.add_mutually_exclusive_group()
    source.add_argument(
        "-t", "--text-data", dest="text_data", metavar="FILE", help="cluster snapshot (htools text)"
    )
    _live_source_options(source)
    _static_kvm_option(p)
    importlib.import_module("programs.roll").add_arguments(p)
    _solver_options(p)
    _json_option(p)
    p.set_defaults(run=_program("roll"))


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
        nargs="*",
        metavar="INPUT",
        help=".data, IAllocator .json, Bareon .yaml files, or folders or globs of them",
    )
    _live_source_options(p, repeatable=True)
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
    p.add_argument("inputs", nargs="*", metavar="DIR_OR_GLOB", help="folders, globs or files")
    _live_source_options(p, repeatable=True)
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


# --- the live allocation service (docs/locking.md) -----------------------------------------


def _socket_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--socket",
        metavar="PATH",
        help="the service's socket (default: $EXALLOC_ALLOC_SOCKET, else /run/exalloc/alloc.sock)",
    )


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"must be within 0..3600 seconds, not {text}")
    return value


def _int_list(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of MiB: {text!r}") from None


def _add_alloc_server(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "alloc-server",
        help="live allocation service: concurrent creations under Ganeti's locks",
        description="Keep a cluster in memory and create instances for concurrent clients "
        "(exalloc create / verify / state / loadtest) with Ganeti's node and node-allocation "
        "locks, a journal in the state directory, and exalloc's iallocator. Stops on SIGTERM or "
        "SIGINT. See docs/locking.md.",
    )
    p.add_argument(
        "-t",
        "--text-data",
        dest="text_data",
        metavar="FILE",
        help="cluster snapshot (htools text); may be left out on a restart",
    )
    _socket_option(p)
    p.add_argument(
        "--state-dir",
        dest="state_dir",
        required=True,
        metavar="DIR",
        help="where the snapshot and the journal of creations are kept",
    )
    _capacity_checks_option(p)
    _solver_options(p)
    p.set_defaults(run=_program("alloc_server"))


def _add_create(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "create",
        help="create an instance through the allocation service",
        description="Exit codes: 0 created, 3 temp_nores (resubmit, or go to another cluster), "
        "4 nores, 1 bad request or no service, 2 usage.",
    )
    _socket_option(p)
    p.add_argument("--name", required=True, help="instance name")
    p.add_argument(
        "--template", required=True, metavar="TEMPLATE", help="disk template (plain, drbd, ...)"
    )
    p.add_argument("--memory", required=True, type=int, metavar="MIB", help="memory in MiB")
    p.add_argument(
        "--disk", type=_int_list, default=[], metavar="MIB[,MIB]", help="disk sizes in MiB"
    )
    p.add_argument(
        "--spindles", type=_int_list, metavar="N[,N]", help="spindles per disk (default 1 each)"
    )
    p.add_argument("--vcpus", type=int, default=1, metavar="N", help="virtual CPUs (default 1)")
    p.add_argument(
        "--spindle-use",
        dest="spindle_use",
        type=int,
        default=1,
        metavar="N",
        help="instance spindle use (default 1)",
    )
    p.add_argument(
        "--opportunistic",
        action="store_true",
        help="lock only the nodes free now (Ganeti's opportunistic locking)",
    )
    p.add_argument(
        "--hold",
        type=_seconds,
        default=0.0,
        metavar="SECONDS",
        help="keep the used nodes locked this long after the commit (disk wipe and sync)",
    )
    p.add_argument(
        "--lock-timeout",
        dest="lock_timeout",
        type=_seconds,
        metavar="SECONDS",
        help="give up waiting for locks after SECONDS (temp_nores; default: wait)",
    )
    p.add_argument(
        "--request-id",
        dest="request_id",
        metavar="ID",
        help="resubmitting a request with the same id answers it again, never twice",
    )
    _json_option(p)
    p.set_defaults(run=_run_alloc_client("create"), no_solver=True)


def _add_verify(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "verify",
        help="cluster-wide check holding every node lock and the node-allocation lock",
    )
    _socket_option(p)
    p.add_argument(
        "--hold", type=_seconds, default=0.0, metavar="SECONDS", help="keep the locks this long"
    )
    _json_option(p)
    p.set_defaults(run=_run_alloc_client("verify"), no_solver=True)


def _add_state(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("state", help="the allocation service's cluster, locks and activities")
    _socket_option(p)
    p.add_argument(
        "-S", "--save", dest="save", metavar="FILE", help="write the cluster as an htools snapshot"
    )
    _json_option(p)
    p.set_defaults(run=_run_alloc_client("state"), no_solver=True)


def _add_loadtest(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "loadtest",
        help="many concurrent creations against the allocation service, measured",
    )
    _socket_option(p)
    p.add_argument("--clients", type=int, default=8, metavar="N", help="concurrent clients (8)")
    p.add_argument("--creations", type=int, default=40, metavar="M", help="creations (40)")
    p.add_argument(
        "--hold", type=_seconds, default=0.5, metavar="SECONDS", help="hold per creation (0.5)"
    )
    p.add_argument("--opportunistic", action="store_true", help="opportunistic locking")
    p.add_argument(
        "--retries",
        type=int,
        default=0,
        metavar="R",
        help="resubmit a temp_nores answer up to R times (default 0)",
    )
    p.add_argument(
        "--reconnect",
        type=_seconds,
        default=0.0,
        metavar="SECONDS",
        help="when the service is gone, resubmit the same request for this long (default 0)",
    )
    p.add_argument(
        "--lock-timeout", dest="lock_timeout", type=_seconds, metavar="SECONDS", help="per creation"
    )
    p.add_argument(
        "--templates", default="plain,drbd", metavar="LIST", help="disk templates (plain,drbd)"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the instance sizes (0)")
    p.add_argument("--prefix", metavar="NAME", help="instance name prefix (default: random)")
    p.add_argument("--no-progress", dest="no_progress", action="store_true", help="no progress bar")
    _json_option(p)
    p.set_defaults(run=_program("loadtest"), no_solver=True)


def _run_alloc_client(command: str) -> Callable[[argparse.Namespace], object]:
    def run(args: argparse.Namespace) -> object:
        return getattr(importlib.import_module("programs.alloc_client"), command)(args)

    return run


_COMMANDS: Sequence[Callable[[argparse._SubParsersAction], None]] = (
    _add_info,
    _add_hail,
    _add_hail_server,
    _add_squeeze,
    _add_roll,
    _add_n1,
    _add_redistribute,
    _add_compress,
    _add_evacuate,
    _add_partition,
    _add_generate,
    _add_compare,
    _add_batch,
    _add_report,
    _add_alloc_server,
    _add_create,
    _add_verify,
    _add_state,
    _add_loadtest,
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


def _solver_options_of(args: argparse.Namespace, solver_given: bool) -> object:
    """The typed solver options programs pass on (solvers.options.SolverOptions)."""
    from solvers.options import SolverOptions

    return SolverOptions(args.solver, args.time_limit, args.gap, args.threads, solver_given)


def main(argv: Sequence[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    """Parse, run, print. `parser` lets a server reuse one built ahead of the call."""
    words = sys.argv[1:] if argv is None else argv
    args = (parser or build_parser()).parse_args(_attached_optionals(words))
    solver_given = hasattr(args, "solver")
    for key, default in _SOLVER_DEFAULTS.items():
        if not hasattr(args, key):
            setattr(args, key, default)
    if not getattr(args, "no_solver", False):  # the service's clients solve nothing
        args.solver_options = _solver_options_of(args, solver_given)
    try:
        report = args.run(args)
        text = json.dumps(report.to_json(), indent=2) if args.json else report.text()
        for note in getattr(report, "notes", ()):
            print(f"exalloc: note: {printable(note)}", file=sys.stderr)
        sys.stderr.write(getattr(report, "stderr", ""))
    except ExallocError as err:  # quoted input (a name, a yaql text) cannot break the line
        print(f"exalloc: error: {printable(str(err))}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("exalloc: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001 - the last line of defence: a bug, never a traceback
        return _internal_error(err, debug=getattr(args, "debug", False))
    try:
        if text:  # empty when the program printed as it went (squeeze -X)
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
    what = printable(" ".join(str(err).split()), 300)
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
