"""`exalloc roll`: hroller's question (which nodes to reboot together, in as few rounds as
possible) answered exactly, in hroller's output (docs/roll.md).

With `--greedy` it is hroller 3.0.2 itself (model/htools/hroller.py): output, errors and exit
code byte for byte. Without, the fewest rounds under hroller's rules (or, `--memory-aware`,
under a rule that checks the receiving nodes' memory instead of hroller's shared-secondary
clique), proven by a bound (solvers/strategies/roll.py), checked by `model.roll.check_plan`,
printed as hroller prints its rounds; the proof goes to stderr as a note, and into `--json`.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from programs.output import ProgramOutput

if TYPE_CHECKING:  # the program's modules load when it runs, not when cli.py adds its options
    from model.cluster import Cluster
    from model.htools.hroller import Prelude, RollerAnswer, RollerOptions
    from model.roll import RollRules
    from solvers.strategies.roll import RollPlan


def node_tags(text: str) -> tuple[str, ...]:
    """`--node-tags=T,...` as htools splits it (`sepSplit ','`)."""
    from model.htools.hroller import node_tags_option

    return node_tags_option(text)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """hroller 3.0.2's options (the backends and `--static-kvm-node-memory` shared with the
    other programs), exalloc's `--greedy`, `--memory-aware`, `--json` and solver options."""
    from programs.options import (
        SEARCH_TIME_LIMIT_S,
        greedy_option,
        json_option,
        live_source_options,
        offline_option,
        solver_options,
        static_kvm_option,
        verbosity_options,
    )
    from programs.parser import standard_options

    source = p.add_mutually_exclusive_group()  # none given: hroller's own error
    source.add_argument(
        "-t", "--text-data", dest="text_data", metavar="FILE", help="cluster snapshot (htools text)"
    )
    live_source_options(source)
    static_kvm_option(p)
    standard_options(p, "hroller", ())
    p.add_argument("arguments", nargs="*", help=argparse.SUPPRESS)  # hroller's own error
    p.add_argument(
        "-I",
        "--ialloc-src",
        dest="ialloc_src",
        metavar="FILE",
        help="read the cluster from an IAllocator request",
    )
    offline_option(p)
    p.add_argument(
        "--offline-maintenance",
        dest="offline_maintenance",
        action="store_true",
        help="instances are shut down, not migrated: only primary and secondary conflict",
    )
    verbosity_options(p)
    p.add_argument(
        "--no-headers", dest="no_headers", action="store_true", help="omit the header line"
    )
    p.add_argument(
        "--node-tags",
        dest="node_tags",
        type=node_tags,
        metavar="TAG,...",
        help="only nodes carrying one of these tags",
    )
    p.add_argument(
        "-S",
        "--save",
        dest="save",
        metavar="FILE",
        help="write the cluster as read to FILE.original (htools text format)",
    )
    p.add_argument("-G", "--group", dest="group", metavar="GROUP", help="only this group")
    p.add_argument(
        "--print-moves",
        dest="print_moves",
        action="store_true",
        help="after each round, the instances moved for it (with --memory-aware, the "
        "migrations too)",
    )
    p.add_argument(
        "--full-evacuation",
        dest="full_evacuation",
        action="store_true",
        help="also migrate drbd primaries and replace the secondaries off each round",
    )
    p.add_argument(
        "--skip-non-redundant",
        dest="skip_non_redundant",
        action="store_true",
        help="leave out nodes hosting non-redundant instances",
    )
    p.add_argument(
        "--ignore-non-redundant",
        dest="ignore_non_redundant",
        action="store_true",
        help="do not move non-redundant instances away",
    )
    p.add_argument(
        "-f", "--force", action="store_true", help="go on without a master node (a warning)"
    )
    p.add_argument(
        "--one-step-only",
        dest="one_step_only",
        action="store_true",
        help="only the first round, one node per line",
    )
    greedy_option(p, "hroller's own heuristics, its output byte for byte (no model)")
    p.add_argument(
        "--memory-aware",
        dest="memory_aware",
        action="store_true",
        help="nodes sharing a secondary may reboot together when its unallocated memory "
        "takes every instance migrating to it (docs/roll.md)",
    )
    solver_options(
        p, time_limit_default=f"{SEARCH_TIME_LIMIT_S:g} s; at worst hroller's rounds, bound shown"
    )
    json_option(p)


def roller_options(args: argparse.Namespace) -> RollerOptions:
    from model.htools.hroller import RollerOptions

    return RollerOptions(
        offline=tuple(reversed(args.offline)),  # htools prepends each -O
        offline_maintenance=args.offline_maintenance,
        skip_non_redundant=args.skip_non_redundant,
        ignore_non_redundant=args.ignore_non_redundant,
        node_tags=args.node_tags,
        group=args.group,
        full_evacuation=args.full_evacuation,
        one_step_only=args.one_step_only,
        print_moves=args.print_moves,
        verbose=args.verbose,
        no_headers=args.no_headers,
        force=args.force,
    )


def rules_of(args: argparse.Namespace) -> RollRules:
    from model.roll import RollRules

    return RollRules(
        offline_maintenance=args.offline_maintenance,
        ignore_non_redundant=args.ignore_non_redundant,
        full_evacuation=args.full_evacuation,
        memory_aware=args.memory_aware,
    )


class RollReport(ProgramOutput):
    """What `exalloc roll` prints: hroller's text, or exalloc's rounds in hroller's form."""


def _answer_report(answer: RollerAnswer, warning: str = "") -> RollReport:
    data: dict[str, Any] = {"groups": [list(r) for r in answer.rounds], "status": "greedy"}
    data["moves"] = [
        {"round": k + 1, "instance": i, "primary": p, "secondary": s}
        for k, mv in enumerate(answer.moves)
        for i, p, s in mv
    ]
    if answer.exit_code:
        data = {"error": answer.stderr.strip().splitlines()[-1]}
    return RollReport(answer.stdout, warning + answer.stderr, answer.exit_code, json=data)


def _load(args: argparse.Namespace) -> tuple[Cluster, str]:
    from programs.sources import cluster_of

    if args.ialloc_src is not None:
        from model.backends.iallocator import load_request

        return load_request(args.ialloc_src).cluster, args.ialloc_src
    if args.text_data is not None:
        from model.backends.text import load_text

        cluster = load_text(args.text_data, static_kvm_node_memory=args.static_kvm_node_memory)
        return cluster, args.text_data
    cluster, source = cluster_of(args)
    return cluster, source.label


#: The time kept for the independent check of a plan (`model.roll.check_plan`, which
#: replays every round's migrations) and the output, per instance of the cluster: 2.7 s of
#: check on bench_roll's 2,000 nodes / 6,000 instances at load 5, 3.9 s at load 6.8
#: (benchmarks/time_limits.py), 0.45-0.65 ms an instance; the plan's --time-limit share is the
#: rest.
CHECK_S_PER_INSTANCE = 7e-4


def run(args: argparse.Namespace) -> RollReport:
    """`exalloc roll`: read, then hroller's prelude (its errors, -S), then hroller's rounds
    (`--greedy`) or the exact ones."""
    from model.errors import InputError, about
    from model.files import write_files
    from model.htools.hroller import NO_ARGUMENTS, RollerAnswer, prelude, rounds_of

    if args.arguments:
        return RollReport("", f"Error: {NO_ARGUMENTS}\n", 1, json={"error": NO_ARGUMENTS})
    if args.memory_aware and args.offline_maintenance:
        raise InputError(
            "--memory-aware counts migrations, which --offline-maintenance has none of"
        )
    if all(getattr(args, k) is None for k in ("text_data", "master", "luxi", "ialloc_src")):
        message = "failed to load data, aborting: No backend selected! Exiting."
        return RollReport("", f"Error: {message}\n", 1, json={"error": message})
    try:
        cluster, source = _load(args)
    except InputError as e:  # a request htools refuses: with --greedy, in hroller's words
        if not args.greedy or not hasattr(e, "htools_message"):
            raise
        return RollReport("", f"Error: {e.htools_message}\n", 1, json={"error": str(e)})
    options = roller_options(args)
    from model.htools.loader import loading_warning, request_warnings

    # htools' loader warns first, unless -q left the verbosity at 0 exactly (`-q -q` warns
    # again); -I's two merges warn one after the other
    warning = ""
    if args.verbose != 0:
        warning = (request_warnings if args.ialloc_src is not None else loading_warning)(cluster)
    saved: dict[str, str] = {}

    def save() -> str:
        from model.backends.text import dump_text

        path = f"{args.save}.original"
        saved[path] = dump_text(cluster)
        return f"The cluster state before hroller run has been written to file '{path}'\n"

    merges = 2 if args.ialloc_src is not None else 1  # htools' -I merges twice (prelude)
    start = prelude(cluster, options, save=save if args.save else None, merges=merges)
    write_files(saved)  # hroller writes it before it plans; nothing else is written
    if isinstance(start, RollerAnswer):
        return _answer_report(start, warning)
    if args.greedy:
        return _answer_report(rounds_of(start, options), warning)
    # hroller's rounds beside the exact ones, and a start for them; not for --memory-aware,
    # another question (its rounds are seldom a start there, and at 2,000 nodes with
    # concentrated secondaries hroller's heuristics take a third of a minute)
    greedy = None if args.memory_aware else rounds_of(start, options)
    with about(source):
        report = _exact(cluster, args, start, greedy, loaded=merges == 1)
    return replace(report, stderr=warning + report.stderr)


def _exact(
    cluster: Cluster,
    args: argparse.Namespace,
    start: Prelude,
    greedy: RollerAnswer | None,
    *,
    loaded: bool,
) -> RollReport:
    """The exact rounds; `loaded`: the prelude's cluster is the one to plan on (not so for
    `-I`, which htools merges twice: the exact answer reads the request once)."""
    from model.roll import check_plan, output_order, problem_of, round_moves
    from solvers.strategies.roll import plan

    rules = rules_of(args)
    considered = start.considered_names
    problem = problem_of(
        cluster, considered, rules, start.offline, start.loaded if loaded else None
    )
    keep = set(considered)
    ok = greedy is not None and not greedy.exit_code
    known = [[v for v in r if v in keep] for r in greedy.rounds] if ok else []
    # the plan has what the start-up, the reading and hroller's prelude left of the limit,
    # less the checker's replay and the output after it (issue 40, item 4)
    from programs import options as shared

    limited = args.solver_options.limited(shared.SEARCH_TIME_LIMIT_S)
    options = limited.left(CHECK_S_PER_INSTANCE * len(cluster.instances))
    planned = time.perf_counter()
    result = plan(problem, options, known=[known] if known else [])
    checked = time.perf_counter()
    check_plan(cluster, considered, rules, result.rounds, start.offline)
    timing = {
        "before_plan_s": round(planned - args.solver_options.started_at, 4)
        if args.solver_options.started_at is not None
        else None,
        "plan_s": round(checked - planned, 4),
        "check_s": round(time.perf_counter() - checked, 4),
    }
    if args.print_moves or args.json:  # an answer naming an instance must say which
        from model.validate import refuse_ambiguous

        moved = [s.name for r in result.rounds for s in r.steps]
        refuse_ambiguous(cluster.ambiguous_instances, moved, "the plan's moves")
    ordered = output_order(result.rounds, set(n.name for n in cluster.nodes if n.master))
    moves = [round_moves(cluster, r, swaps=rules.memory_aware) for r in ordered]
    out: list[str] = []
    if args.one_step_only:
        if not args.no_headers:
            out.append("'First Reboot Group'\n")
        if ordered:
            out += [v + "\n" for v in ordered[0].nodes]
            out += _moves_lines(moves[0], args.print_moves)
    else:
        if not args.no_headers:
            out.append("'Node Reboot Groups'\n")
        for r, mv in zip(ordered, moves, strict=True):
            out.append(",".join(r.nodes) + "\n")
            out += _moves_lines(mv, args.print_moves)
    greedy_rounds = len([r for r in greedy.rounds if r]) if ok else None
    note = _proof(result, greedy_rounds, greedy)
    if args.verbose > 1:  # where hroller prints its heuristics' line
        out.insert(0, note + "\n")
    from model.errors import printable

    # after hroller's own lines (its warnings, -S), as cli.py would print a note
    said = f"exalloc: note: {printable(note)}\n" if args.verbose == 1 else ""
    return RollReport(
        "".join(out),
        start.stderr + said,
        0,
        json={**_json(result, ordered, moves, greedy_rounds, rules), "timing": timing},
    )


def _proof(result: RollPlan, greedy_rounds: int | None, greedy: RollerAnswer | None) -> str:
    """One line: the rounds, their status and what proves the bound."""
    why = [f"clique of {len(result.clique)}"]
    if result.memory_bound:
        why.append(f"memory of {result.memory_node}: {result.memory_bound}")
    if result.bound > max(len(result.clique), result.memory_bound):
        why.append(f"{result.solver}: no plan of {result.bound - 1}")
    text = f"{result.objective} rounds, {result.status}, bound {result.bound} ({'; '.join(why)})"
    if result.method == "model":
        text += (
            f"; start {result.start_rounds}; {result.solver} {result.build_s:.2f} s build, "
            f"{result.solve_s:.2f} s solve"
        )
        if result.cuts:
            text += f", {result.cuts} rounds cut"
    if greedy_rounds is not None:
        return text + f"; hroller: {greedy_rounds}"
    if greedy is None:
        return text  # --memory-aware: hroller answers another question
    return text + f"; hroller: {greedy.stderr.strip().splitlines()[-1]}"


def _moves_lines(moves: Sequence[tuple[str, str, str | None]], shown: bool) -> list[str]:
    if not shown:
        return []
    return [f"  {i} {p}\n" if s is None else f"  {i} {p} {s}\n" for i, p, s in moves]


def _json(
    result: RollPlan,
    ordered: Sequence,
    moves: Sequence,
    greedy_rounds: int | None,
    rules: RollRules,
) -> dict[str, Any]:
    return {
        "groups": [list(r.nodes) for r in ordered],
        "status": result.status,
        "objective": result.objective,
        "bound": result.bound,
        "gap": result.gap,
        "clique": list(result.clique),
        "memory_bound": result.memory_bound,
        "memory_node": result.memory_node,
        "moves": [
            {"round": k + 1, "kind": s.kind, "instance": s.name, "from": s.source, "to": s.target}
            for k, r in enumerate(ordered)
            for s in r.steps
        ],
        "placements": [
            {"round": k + 1, "instance": i, "primary": p, "secondary": s}
            for k, mv in enumerate(moves)
            for i, p, s in mv
        ],
        "hroller_rounds": greedy_rounds,
        "start_rounds": result.start_rounds,
        "method": result.method,
        "solver": result.solver,
        "build_s": result.build_s,
        "solve_s": result.solve_s,
        "seconds": result.seconds,
        "cuts": result.cuts,
        "exact_packings": result.packings,
        "rules": {
            "memory_aware": rules.memory_aware,
            "full_evacuation": rules.full_evacuation,
            "offline_maintenance": rules.offline_maintenance,
            "ignore_non_redundant": rules.ignore_non_redundant,
        },
    }
