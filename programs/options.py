"""The command-line options several programs share, declared once (as htools' `CLI.hs` declares
`oDataFile`, `oLuxiSocket`, `oPrintCommands`... for every `Program/*.hs` to pick from).

Each program declares its own arguments in its `add_arguments(parser)`, next to the code that
reads them, and takes the shared groups from here: where the cluster comes from (`-t`, `-m`,
`-L`), the solver (`--solver --time-limit --gap --threads`), the output (`--json`, `-S`, `-C`),
`--capacity-checks`, `--static-kvm-node-memory`, `-X`, the live service's `--socket`. The
getopt-style optional arguments htools takes (`-L[SOCKET]`, `--mond[=CHOICE]`, `-p[FIELDS]`)
are rewritten by `attached_optionals` before argparse sees them.

The parser classes `cli.py` builds its command line with are programs/parser.py. This module is
imported on every in-process start of `exalloc-hail` (docs/hail.md, "Start-up"): it imports
argparse and nothing heavier.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from typing import Any

NO_ARGUMENTS = "This program doesn't take any arguments."


def no_arguments_option(parser: argparse.ArgumentParser) -> None:
    """A program that takes no positional argument refuses one as htools does (`CLI.exitErr`:
    exit 1, not a usage error): the words are kept here, `refuse_arguments` says so."""
    parser.add_argument("arguments", nargs="*", help=argparse.SUPPRESS)


def refuse_arguments(args: argparse.Namespace) -> None:
    """htools' `Error: This program doesn't take any arguments.`, exit 1."""
    if getattr(args, "arguments", None):
        from model.errors import HtoolsError

        raise HtoolsError(NO_ARGUMENTS)


def number_type(low: float, *, strict: bool, integer: bool = False) -> Callable[[str], Any]:
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


# -- the solver and the output ------------------------------------------------------------------

#: What a command that declares no solver option (or was given none) reads.
SOLVER_DEFAULTS = {
    "solver": "highs",
    "time_limit": None,
    "gap": 0.0,
    "threads": 1,
    "json": False,
    "progress": False,
}


#: The exact searches of hbal's and hroller's questions (`balance`, `roll`) end even without
#: --time-limit: htools answers them in seconds, and a script or a cron job must get its plan,
#: while K moves or the fewest rounds can be a proof of hours. What the limit cuts is said
#: (status, bound, gap); the plan is never worse than the htools one the search starts from.
#: (hail's own 60 s, as Ganeti waits, is service.hail_client's.)
SEARCH_TIME_LIMIT_S = 60.0


def solver_options(
    parser: argparse.ArgumentParser, *, shown: bool = True, time_limit_default: str = ""
) -> None:
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
        type=number_type(0, strict=True),
        metavar="SECONDS",
        default=argparse.SUPPRESS,
        help=text(
            "stop after SECONDS and report the best answer found with its gap"
            + (f" (default {time_limit_default})" if time_limit_default else "")
        ),
    )
    group.add_argument(
        "--gap",
        type=number_type(0, strict=False),
        metavar="REL",
        default=argparse.SUPPRESS,
        help=text("accept a relative MIP gap of REL (default 0: prove optimality)"),
    )
    group.add_argument(
        "--threads",
        type=number_type(1, strict=False, integer=True),
        default=argparse.SUPPRESS,
        help=text("solver threads (default 1)"),
    )
    group.add_argument(
        "--progress",
        action="store_true",
        default=argparse.SUPPRESS,
        help=text(
            "show the solve's progress on stderr (stage, best, bound, gap, elapsed); the "
            "default when stderr is a terminal, except in exalloc-hail"
        ),
    )


def settle_solver_options(args: argparse.Namespace, started_at: float | None = None) -> None:
    """Fill the solver options a command line left out and, unless the program solves nothing
    (`no_solver`), put the typed `solvers.options.SolverOptions` programs pass on in
    `args.solver_options`, its deadline counted from `started_at` (a perf_counter value: the
    process's start for a command line, `solvers.options.process_started`; None: now)."""
    solver_given = hasattr(args, "solver")
    for key, default in SOLVER_DEFAULTS.items():
        if not hasattr(args, key):
            setattr(args, key, default)
    if not getattr(args, "no_solver", False):  # the service's clients solve nothing
        from solvers.options import SolverOptions, answer_options

        args.solver_options = answer_options(
            SolverOptions(args.solver, args.time_limit, args.gap, args.threads, solver_given),
            started_at,
        )


def json_option(parser: argparse.ArgumentParser, *, shown: bool = True) -> None:
    parser.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print one JSON object on stdout" if shown else argparse.SUPPRESS,
    )


def save_option(parser: argparse.ArgumentParser, text: str) -> None:
    """`-S FILE`: htools' `--save`; what is written there is each program's (`text`)."""
    parser.add_argument("-S", "--save", dest="save", metavar="FILE", help=text)


def print_commands_option(parser: argparse.ArgumentParser, text: str, *, to_file: bool) -> None:
    """`-C`: the plan as Ganeti commands; `to_file`: htools' `-C[FILE]` (hsqueeze, hbal)."""
    if to_file:
        parser.add_argument(
            "-C",
            "--print-commands",
            dest="print_commands",
            nargs="?",
            const="-",
            metavar="FILE",
            help=text,
        )
    else:
        parser.add_argument(
            "-C", "--print-commands", dest="print_commands", action="store_true", help=text
        )


def exec_option(parser: argparse.ArgumentParser, text: str) -> None:
    """-X: run the plan on the live cluster through LUXI (htools' option)."""
    parser.add_argument("-X", "--exec", dest="exec_jobs", action="store_true", help=text)


# -- the cluster and its arithmetic -------------------------------------------------------------


def capacity_checks_option(parser: argparse.ArgumentParser) -> None:
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


def _static_kvm_mib(text: str) -> int:
    """oStaticKvmNodeMemory: `tryRead "static node memory"` (Haskell's `reads`, its message: a
    bad value is htools' 'Error while parsing command line arguments', exit 1). Imports only
    when the option is given (exalloc-hail's start-up, tests/test_cli.py)."""
    from model.backends.text import read_int
    from programs.parser import HtoolsValueError

    try:
        return read_int(text, "static node memory")
    except ValueError as e:
        raise HtoolsValueError(str(e)) from None


def static_kvm_option(
    parser: argparse.ArgumentParser,
    text: str = "node memory assumed on kvm nodes (default 4096, as htools)",
) -> None:
    parser.add_argument(
        "--static-kvm-node-memory",
        dest="static_kvm_node_memory",
        type=_static_kvm_mib,
        default=4096,
        metavar="MIB",
        help=text,
    )


LUXI_DEFAULT_HELP = "/var/run/ganeti/socket/ganeti-query"


def live_source_options(target: argparse._ActionsContainer, *, repeatable: bool = False) -> None:
    """-m ADDRESS and -L[SOCKET]: read a running cluster as htools does (docs/live.md;
    repeatable: one input per option, for compare and batch)."""
    action = "append" if repeatable else "store"
    again = "; repeat the option for more clusters, each one input" if repeatable else ""
    target.add_argument(
        "-m",
        "--master",
        dest="master",
        action=action,
        metavar="ADDRESS",
        help="read the cluster through RAPI at ADDRESS (https://ADDRESS:5080 unless ADDRESS "
        f"holds a ':', e.g. http://host:8080; file://DIR reads saved answers){again}",
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
        f"default {LUXI_DEFAULT_HELP}){again}",
    )


def htools_source_options(parser: argparse.ArgumentParser) -> None:
    """An htools program's backends, as `ExtLoader.loadExternalData` takes them: -t FILE,
    -m ADDRESS, -L[SOCKET] and -I FILE (an IAllocator request's cluster). None, or more than
    one of the first three, is htools' own error, exit 1 (programs.sources.htools_cluster),
    not a usage error."""
    parser.add_argument(
        "-t", "--text-data", dest="text_data", metavar="FILE", help="the cluster data FILE"
    )
    live_source_options(parser)
    parser.add_argument(
        "-I",
        "--ialloc-src",
        dest="ialloc_src",
        metavar="FILE",
        help="the cluster of an IAllocator request FILE",
    )
    static_kvm_option(parser)


class _Quiet(argparse.Action):
    """-q: one less verbosity (htools' -v and -q move one counter)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, ns: argparse.Namespace, *_: Any) -> None:
        setattr(ns, self.dest, getattr(ns, self.dest, 1) - 1)


def verbosity_options(parser: argparse.ArgumentParser, verbose_help: str = "more output") -> None:
    """htools' -v and -q (`oVerbose`, `oQuiet`): one counter, 1 by default."""
    parser.add_argument(
        "-v", "--verbose", dest="verbose", action="count", default=1, help=verbose_help
    )
    parser.add_argument("-q", "--quiet", dest="verbose", action=_Quiet, help="less output")


def offline_option(parser: argparse.ArgumentParser) -> None:
    """htools' -O NODE (`oOfflineNode`, repeatable): treat NODE as offline."""
    parser.add_argument(
        "-O",
        "--offline",
        dest="offline",
        action="append",
        default=[],
        metavar="NODE",
        help="treat NODE as offline (repeatable; a unique prefix of a name will do)",
    )


def print_nodes_option(
    parser: argparse.ArgumentParser, where: str = "", *, text: str | None = None
) -> None:
    """htools' -p[FIELDS] (`oPrintNodes`): the node list, its fields attached (getopt's
    optional argument: `attached_optionals`); `text` replaces the help where the program
    says more (hspace's phases, hbal's before and after)."""
    parser.add_argument(
        "-p",
        "--print-nodes",
        dest="print_nodes",
        nargs="?",
        const="",
        metavar="FIELDS",
        help=text
        or f"print the node list{where} (-pFIELDS or --print-nodes=FIELDS; + adds to the "
        "default fields)",
    )


def max_length_option(
    parser: argparse.ArgumentParser, text: str, value_type: Callable[[str], int] = int
) -> None:
    """htools' -l N (`oMaxSolLength`): -1, the default, is no limit; what N counts (moves,
    instances) is the program's, said in `text`; `value_type` reads N (a stand-in's may
    refuse it in htools' words)."""
    parser.add_argument(
        "-l", "--max-length", dest="max_length", type=value_type, default=-1, metavar="N",
        help=text,
    )  # fmt: skip


def greedy_option(parser: argparse.ArgumentParser, text: str) -> None:
    """`--greedy`: the htools program's own algorithm instead of the exact model, each
    program saying which (`text`)."""
    parser.add_argument("--greedy", action="store_true", help=text)


def ignore_dynu_option(parser: argparse.ArgumentParser) -> None:
    """htools' --ignore-dynu (`oIgnoreDyn`): no dynamic utilisation (`clearDynU`)."""
    parser.add_argument(
        "--ignore-dynu",
        dest="ignore_dynu",
        action="store_true",
        help="ignore dynamic utilisation (every instance's load is 0)",
    )


def cluster_source(parser: argparse.ArgumentParser, text_help: str) -> None:
    """Exactly one of -t FILE, -m ADDRESS, -L[SOCKET] (htools: only one backend at a time)."""
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("-t", "--text-data", dest="text_data", metavar="FILE", help=text_help)
    live_source_options(source)


def group_cluster_source(parser: argparse.ArgumentParser) -> None:
    """n1 and the super-cluster programs: a snapshot, a request, or a running cluster."""
    cluster_source(
        parser, "cluster: an htools text snapshot or an IAllocator request (.json); or -m/-L"
    )
    static_kvm_option(parser)


def greedy_timeout_option(parser: argparse.ArgumentParser) -> None:
    """How long batch and compare wait for the real greedy tool."""
    parser.add_argument(
        "--greedy-timeout",
        dest="greedy_timeout",
        type=number_type(0, strict=True),
        default=300.0,
        metavar="SECONDS",
        help="give up on the greedy tool after SECONDS (default 300)",
    )


# -- the live allocation service (docs/locking.md) ----------------------------------------------


def service_socket_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--socket",
        metavar="PATH",
        help="the service's socket (default: $EXALLOC_ALLOC_SOCKET, else /run/exalloc/alloc.sock)",
    )


def seconds_type(text: str) -> float:
    """An argparse type: seconds within 0..3600 (a hold, a lock time-out)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"must be within 0..3600 seconds, not {text}")
    return value


# -- getopt's optional arguments ----------------------------------------------------------------


def attached_optionals(argv: Sequence[str]) -> list[str]:
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
