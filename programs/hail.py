"""`exalloc hail` and `exalloc-hail`: a drop-in Ganeti iallocator (docs/hail.md).

Reads an IAllocator request (a file or `-`; `-t FILE` replaces its cluster, as hail's does),
answers it through solvers/strategies/iallocator.py (every request type on every group, each
answer checked) and prints hail's response line; `--compare` adds the real hail's answer
(programs/hail_compare.py), `--json` everything exalloc knows about the answer.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from model.backends.iallocator import (
    IAllocatorInput,
    cluster_after,
    load_request,
    parse_request,
    with_cluster,
)
from model.backends.text import save_text
from model.errors import about
from model.htools.answer import HailAnswer, jsonable, split_run_note
from model.htools.nodelist import hails_node_lists
from programs import hail_client
from solvers.strategies.iallocator import IAllocatorOptions, answer


@dataclass(frozen=True)
class HailReport:
    """The answer plus what --json / --compare show; exit code 0 like hail."""

    answer: HailAnswer
    compare: Mapping[str, Any] | None = None
    timing: Mapping[str, float] = field(default_factory=dict)  # load_s, answer_s (in process)
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
        if self.compare is not None:
            out["compare"] = jsonable(self.compare)
        return out


def options_of(args: Any) -> IAllocatorOptions:
    solver = args.solver_options
    if solver.time_limit is None:
        solver = solver.within(DEFAULT_TIME_LIMIT_S)
    return IAllocatorOptions(
        solver=solver,
        capacity_checks=args.capacity_checks,
        ignore_soft_errors=args.ignore_soft_errors,
        restrict_to_nodes=args.restrict_allocation_to,
    )


#: Every request is answered within a bound, even without --time-limit: Ganeti waits for its
#: iallocator, and no input may keep it waiting (docs/reliability.md, "Time"). The client and
#: the server share the number (programs.hail_client, which imports nothing heavy).
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


def run(args: Any) -> HailReport:
    """CLI entry: `exalloc hail REQUEST.json [-t FILE] [--compare]`."""
    opts = options_of(args)
    kvm = args.static_kvm_node_memory
    # the backend would be imported at the first solve; importing it here keeps the start-up
    # cost (highspy or ortools) out of the per-request timing
    importlib.import_module(f"solvers.{opts.solver.solver}_backend")
    start = time.perf_counter()
    text = None
    if args.request == "-":
        text = sys.stdin.read()
        inp = parse_request(text, "<stdin>", static_kvm_node_memory=kvm)
    else:
        inp = load_request(args.request, static_kvm_node_memory=kvm)
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
    loaded = time.perf_counter()
    with about("<stdin>" if args.request == "-" else args.request):
        report = HailReport(answer(inp, opts))
    timing = {"load_s": loaded - start, "answer_s": time.perf_counter() - loaded}
    shown = _stderr(inp, report.answer, args)
    response, run_note = split_run_note(report.answer.response)
    plain = replace(report.answer, response=response)
    notes = (*_notes(args), *([run_note] if run_note else []))
    report = HailReport(plain, timing=timing, notes=notes, stderr=shown, run_note=run_note)
    if args.compare:
        from programs.hail_compare import with_comparison

        report = with_comparison(report, inp, args.request, text, args, kvm)
    return report
