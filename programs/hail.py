"""`exalloc hail` and `exalloc-hail`: a drop-in Ganeti iallocator (docs/hail.md).

Reads an IAllocator request (a file or `-`; `-t FILE` replaces its cluster, as hail's does),
answers it through solvers/strategies/iallocator.py (every request type on every group, each
answer checked) and prints hail's response line; `--compare` adds the real hail's answer
(programs/hail_compare.py), `--json` everything exalloc knows about the answer.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from model.backends.iallocator import (
    IAllocatorInput,
    cluster_after,
    load_request,
    parse_request,
    with_cluster,
)
from model.backends.text import save_text
from model.errors import about
from model.htools.answer import HailAnswer, jsonable, longest_stage
from model.htools.loader import loading_warning
from model.htools.nodelist import hails_node_lists
from programs.options import (
    capacity_checks_option,
    greedy_option,
    json_option,
    save_option,
    solver_options,
    static_kvm_option,
)
from programs.parser import ArgumentKind, standard_options
from service import hail_client

if TYPE_CHECKING:  # the strategy imports Pyomo: loaded by `run`, not by the parser
    from solvers.strategies.iallocator import IAllocatorOptions


@dataclass(frozen=True)
class HailReport:
    """The answer plus what --json / --compare show; exit code 0 like hail."""

    answer: HailAnswer
    compare: Mapping[str, Any] | None = None
    timing: Mapping[str, Any] = field(default_factory=dict)  # load_s, answer_s, stages
    exit_code: int = 0
    notes: tuple[str, ...] = ()  # for stderr: what exalloc does differently from hail here
    stderr: str = ""  # hail's own stderr output asked for (-p, -S), printed as it is
    run_note: str = ""  # the solver's verdict, `highs: optimal, gap 0` (stderr, --json)

    @property
    def response(self) -> str:
        return self.answer.response

    @property
    def kind(self) -> str:
        return self.answer.kind

    @property
    def placements(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        return self.answer.placements

    @property
    def runs(self) -> tuple:
        return self.answer.runs

    def text(self) -> str:
        if self.compare is None:
            return self.response
        from programs.hail_compare import compare_text

        return compare_text(self)

    def to_json(self) -> dict[str, Any]:
        a = self.answer
        out: dict[str, Any] = {
            "response": json.loads(a.response),
            "request": a.kind,
            "placements": {n: list(nodes) for n, nodes in a.placements},
            "solver": [r.__dict__ for r in a.runs],
            "solver_note": self.run_note,
            "objectives": jsonable(a.objectives),
            "timing": dict(self.timing),
        }
        if a.groups:  # an allocate: every group tried, ranked (seed 001)
            out["groups"] = jsonable(list(a.groups))
        if self.compare is not None:
            out["compare"] = jsonable(self.compare)
        return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(  # one, else hail's own error (exit 1): `requests`
        "request", nargs="*", metavar="REQUEST.json", help="IAllocator v2 request ('-' for stdin)"
    )
    parser.add_argument(
        "-t",
        "--text-data",
        dest="text_data",
        metavar="FILE",
        help="take the cluster from this text snapshot instead of the request",
    )
    parser.add_argument(
        "--compare",
        action="store_true",
        help="also run the real hail and show both answers side by side",
    )
    greedy_option(
        parser,
        "hail's own algorithm for every request, byte for byte hail 3.0's answer (no "
        "model; hail's N+1 check unless --no-capacity-checks)",
    )
    capacity_checks_option(parser)
    parser.add_argument(
        "--ignore-soft-errors",
        dest="ignore_soft_errors",
        action="store_true",
        help="like hail: ignore soft errors (N+1 reserve, vCPU ratio, tags, min disk)",
    )
    parser.add_argument(
        "--restrict-allocation-to",
        dest="restrict_allocation_to",
        type=lambda text: tuple(n for n in text.split(",") if n),
        metavar="NODE,NODE",
        help="like hail: allocate only on these nodes (wins over restrict-to-nodes)",
    )
    static_kvm_option(parser)
    _hail_only_options(parser)
    solver_options(
        parser,
        time_limit_default=f"{DEFAULT_TIME_LIMIT_S:g} s for the whole answer, as Ganeti waits",
    )
    json_option(parser)


def _print_fields(text: str) -> str:
    """hail's -p fields, but `peermap`: htools shows the peers in the order its insertions
    left them, which exalloc's node state does not keep (docs/hail.md)."""
    if "peermap" in text.lstrip("+").split(","):
        raise argparse.ArgumentTypeError("the field peermap is not supported by exalloc")
    return text


def _hail_only_options(parser: argparse.ArgumentParser) -> None:
    """The rest of hail 3.0's options, so that any hail command line, and any parameters
    `gnt-cluster modify --default-iallocator-params` has Ganeti pass (as `--key=value` after
    the request file), work unchanged (docs/hail.md, "Use as Ganeti's iallocator")."""
    standard_options(parser, "hail", (ArgumentKind("file", 1, 1),))
    parser.add_argument(
        "--simulate",
        dest="simulate",
        action="append",
        metavar="SPEC",
        help="like hail: answer on empty simulated groups instead of the request's cluster, one "
        "per SPEC (policy,count,disk,memory,cpus[,spindles[,exclusive_storage]]), e.g. "
        "p,8,8T,16g,16",
    )
    save_option(
        parser,
        "like hail: write the cluster before and after the answer to FILE.pre-ialloc and "
        "FILE.post-ialloc (htools text format)",
    )
    parser.add_argument(
        "-p",
        "--print-nodes",
        dest="print_nodes",
        type=_print_fields,
        metavar="FIELDS",
        help="like hail: the node list before and after the answer on stderr (-p alone: "
        "htools' default fields; -pF1,F2 those; -p+F1 the defaults and F1)",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        dest="verbose",
        action="count",
        default=0,
        help="like hail: -v prints the request read, -v -v the cluster too (Haskell's `show` "
        "of them, on stderr)",
    )
    parser.add_argument(
        "--ignore-dynu",
        dest="ignore_dynu",
        action="store_true",
        help="like hail: no dynamic utilisation (with -t, every instance's load is 0)",
    )
    parser.add_argument(
        "--mond",
        dest="mond",
        nargs="?",
        const="yes",
        default="no",
        choices=("yes", "no"),
        help="hail's MonD query (accepted; exalloc reads no MonD data: answered as hail does "
        "when no MonD answers)",
    )
    parser.add_argument(
        "--mond-xen",
        dest="mond_xen",
        action="store_true",
        help="hail's Xen CPU collector for --mond (accepted, as --mond)",
    )


def options_of(args: Any) -> IAllocatorOptions:
    from solvers.strategies.iallocator import IAllocatorOptions

    solver = args.solver_options
    if solver.time_limit is None:
        solver = solver.limited(DEFAULT_TIME_LIMIT_S)
    return IAllocatorOptions(
        solver=solver,
        capacity_checks=args.capacity_checks,
        ignore_soft_errors=args.ignore_soft_errors,
        restrict_to_nodes=args.restrict_allocation_to,
        greedy=args.greedy,
    )


#: Every request is answered within a bound, even without --time-limit: Ganeti waits for its
#: iallocator, and no input may keep it waiting (docs/reliability.md, "Time"). The client and
#: the server share the number (service.hail_client, which imports nothing heavy).
DEFAULT_TIME_LIMIT_S = hail_client.DEFAULT_TIME_LIMIT_S  # 60 s


def _save(inp: IAllocatorInput, ans: HailAnswer, prefix: str) -> list[str]:
    """hail's `-S FILE`: the cluster before and after the answer in the text format, and
    the line hail prints about each (maybeSaveData)."""
    after = cluster_after(inp, dict(ans.placements))
    lines = []
    for suffix, when, cluster in (
        ("pre-ialloc", "before", inp.cluster),
        ("post-ialloc", "after", after),
    ):
        path = f"{prefix}.{suffix}"
        save_text(cluster, path)
        lines.append(f"The cluster state {when} iallocator run has been written to file '{path}'\n")
    return lines


def _stderr(inp: IAllocatorInput, ans: HailAnswer, args: Any) -> str:
    """What hail prints on stderr for `-p` and `-S`, in its order: the node list before,
    the line on the cluster saved before, the node list after, the line on the one after."""
    where = dict(ans.placements)
    fields = args.print_nodes
    lists = ("", "") if fields is None else hails_node_lists(inp, where, fields)
    saved = _save(inp, ans, args.save) if args.save else ["", ""]
    return lists[0] + saved[0] + lists[1] + saved[1]


def _notes(args: Any) -> tuple[str, ...]:
    """hail's options that exalloc accepts without doing what hail does."""
    if args.mond == "yes":
        return ("--mond: no MonD data is read; answered as hail answers when no MonD responds",)
    return ()


def request_path(words: list[str]) -> str:
    """The one request file, or hail's error (`wrapReadRequest`, exit 1)."""
    from model.errors import HtoolsError

    if not words:
        raise HtoolsError("This program needs an input file.")
    if len(words) > 1:
        raise HtoolsError("Only one argument is accepted (the input file)")
    return words[0]


def run(args: Any) -> HailReport:
    """CLI entry: `exalloc hail REQUEST.json [-t FILE] [--compare]`."""
    from solvers.strategies.iallocator import answer

    args.request = request_path(args.request)
    opts = options_of(args)
    kvm = args.static_kvm_node_memory
    # the backend (highspy or ortools, and Pyomo) is imported at the first solve: most
    # requests build no model, and Ganeti waits for the whole call (issue 40, item 12)
    start = time.perf_counter()
    text = None
    if args.request == "-":
        text = sys.stdin.read()
        inp = parse_request(text, "<stdin>", static_kvm_node_memory=kvm)
    else:
        inp = load_request(args.request, static_kvm_node_memory=kvm)
    read = inp  # the request's own cluster: the indices hail's -v dump shows
    said = loading_warning(inp.cluster)  # IAlloc.readRequest's warnings, at any verbosity
    if args.text_data or args.simulate:  # a simulation wins, as in htools' ExtLoader
        from model.backends.simu import simulated_cluster
        from model.backends.text import load_text

        if args.simulate:  # htools' getopt keeps the last --simulate first: group-01
            cluster, source = simulated_cluster(args.simulate[::-1]), "the simulated cluster"
        else:
            cluster, source = load_text(args.text_data), args.text_data
        if args.ignore_dynu:  # hail clears the loads of data read from a file (`clearDynU`)
            cluster = cluster.without_dynamic_util()
        inp = with_cluster(inp, cluster, source)
        said += loading_warning(cluster)  # ExtLoader.loadExternalData's
    # hail prints these before it answers; exalloc before what the answer prints (-p, -S)
    if args.verbose:  # htools counts from 1: -v is 2
        from model.htools.show import hail_dump

        said += hail_dump(read, inp.cluster, args.verbose + 1, simulated=bool(args.simulate))
    loaded = time.perf_counter()
    # the time limit bounds the whole call, reading included (issue 40, item 4)
    if opts.solver.deadline_at is not None:  # what the start-up and the reading left
        opts = replace(opts, solver=opts.solver.left(least_s=0.1))
    elif opts.solver.time_limit is not None:  # an answer begun without a deadline
        limit = opts.solver.time_limit
        opts = replace(opts, solver=opts.solver.within(max(limit - (loaded - start), 0.1)))
    with about("<stdin>" if args.request == "-" else args.request):
        report = HailReport(answer(inp, opts))
    timing = {"load_s": loaded - start, "answer_s": time.perf_counter() - loaded}
    if report.answer.stages:
        timing["stages"] = dict(report.answer.stages)
        timing["longest_stage"] = longest_stage(report.answer.stages)
    shown = said + _stderr(inp, report.answer, args)
    run_note = report.answer.note
    notes = (*_notes(args), *([run_note] if run_note else []))
    report = HailReport(report.answer, timing=timing, notes=notes, stderr=shown, run_note=run_note)
    if args.compare:
        from programs.hail_compare import with_comparison

        report = with_comparison(report, inp, args.request, text, args, kvm)
    return report
