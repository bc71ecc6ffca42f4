"""`exalloc balance` without `--greedy`: the least group score within K of hbal's steps, or
with `--fewest-moves` the fewest steps to a score no worse than hbal's (docs/balance.md).

programs/balance.py owns the command line (hbal's options) and reads the cluster; this module
adds the exact mode's options and answers: parse -> solvers.strategies.balance.answer ->
model.check.check_balance (an answer failing it is refused) -> hbal's step table and `-C`
job sets for the exact steps, the proof on the last line, `--json` as issue 37 states it.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from programs.output import ProgramOutput

if TYPE_CHECKING:
    from model.backends.jobs import JobSet
    from model.balance import BalanceProblem, Step
    from model.cluster import Cluster
    from model.state import ClusterState
    from solvers.strategies.balance import BalanceAnswer


def add_exact_arguments(p: argparse.ArgumentParser) -> None:
    """The exact mode's own options (hbal's are programs/balance.py's) and the solver's."""
    import math

    from programs.options import SEARCH_TIME_LIMIT_S, number_type, solver_options

    exact = p.add_argument_group("exact balancing")
    exact.add_argument(
        "--fewest-moves",
        dest="fewest_moves",
        action="store_true",
        help="the fewest steps reaching a score no worse than hbal's (or --target-score)",
    )
    exact.add_argument(
        "--target-score",
        dest="target_score",
        type=number_type(-math.inf, strict=True),  # finite: the model's row takes no NaN/inf
        metavar="SCORE",
        help="with --fewest-moves: the score to reach instead of hbal's",
    )
    exact.add_argument(
        "--compare",
        action="store_true",
        help="run the real hbal -l K beside it (its port when Ganeti is not installed)",
    )
    solver_options(
        p, time_limit_default=f"{SEARCH_TIME_LIMIT_S:g} s; at worst hbal's own answer, gap shown"
    )


@dataclass(frozen=True)
class ExactReport(ProgramOutput):
    """What `exalloc balance` prints in its exact mode, the files it writes (-S, -C FILE) and
    -X's job sets (the exact steps as hbal's `maybeExecJobs` would submit them)."""

    files: Mapping[str, str] = field(default_factory=dict)
    job_sets: tuple[JobSet, ...] = ()


def _group(cluster: Cluster, name: str | None) -> tuple[str | None, str]:
    """The group hbal balances, as its `selectGroup` chooses it: -G's (by name or uuid), or
    the only group holding nodes (an empty group beside it does not count); else None and
    hbal's error lines (its stderr before `Error: Aborting.`)."""
    if name is None:
        with_nodes = [
            g for g in cluster.groups if any(n.group_uuid == g.uuid for n in cluster.nodes)
        ]
        if len(with_nodes) == 1:
            return with_nodes[0].uuid, ""
        return None, "Found multiple node groups:\n" + "".join(f"  {g.name}\n" for g in with_nodes)
    named = [g for g in cluster.groups if name in (g.name, g.uuid)]  # Container.findByName
    if len(named) == 1:
        return named[0].uuid, ""
    listed = "".join(f"  {g.name}\n" for g in cluster.groups)
    return None, f"Node group {name} not found. Node group list is:\n{listed}"


def _placements(problem: BalanceProblem, steps: tuple[Step, ...]) -> tuple[list, ClusterState]:
    """hbal's `Placement` of each step (model/htools/hbal.py), replayed from the start, and
    the state after the last."""
    from model.htools.hbal import Move, Placement
    from model.score import cluster_score

    state = problem.state
    out = []
    for st in steps:
        p, s = state.locations[st.instance]
        after = state.move(st.instance, st.kind, st.target, force=problem.rules.ignore_soft_errors)
        assert not isinstance(after, str), "checked by check_balance"
        np_, ns = after.locations[st.instance]
        score = cluster_score(after, problem.group_uuid)
        out.append(Placement(st.instance, p, s, np_, ns, Move(st.kind, st.target), score))
        state = after
    return out, state


def _real_hbal(args: argparse.Namespace, k: int) -> dict[str, Any]:
    """--compare: the real hbal -l K on the same text file, its final score and length (the
    port's answer stands in where hbal or a text file is missing, and says so)."""
    hbal = shutil.which("hbal")
    if hbal is None or getattr(args, "text_data", None) is None:
        return {"source": "port (the real hbal needs -t and Ganeti's htools)"}
    command = [hbal, "-t", args.text_data, "-l", str(k)]
    if args.group:
        command += ["-G", args.group]
    for flag, dest in (("-g", "min_gain"), ("--min-gain-limit", "min_gain_limit"),
                       ("-e", "min_score")):  # fmt: skip
        if getattr(args, dest, None) is not None:
            command += [flag, repr(getattr(args, dest))]
    for flag, on in (
        ("--no-disk-moves", not args.disk_moves),
        ("--no-instance-moves", not args.instance_moves),
        ("--restricted-migration", args.restricted_migration),
        ("--evac-mode", args.evac_mode),
        ("--ignore-soft-errors", args.ignore_soft_errors),
    ):
        if on:
            command.append(flag)
    run = subprocess.run(command, capture_output=True, text=True, timeout=3600, check=False)
    from model.balance import steps_from_hbal

    steps = steps_from_hbal(run.stdout)
    data: dict[str, Any] = {"source": "hbal", "exit_code": run.returncode, "length": len(steps)}
    for line in run.stdout.splitlines():
        if line.startswith("Cluster score improved from"):
            data["score_after"] = float(line.split()[-1])
    return data


#: The seconds --time-limit keeps for the checker's replay of the steps and the output after
#: the strategy's answer (0.15 s for both on a 200-node group, load 5), with room for load.
CHECK_RESERVE_S = 0.5


def run_exact(
    args: argparse.Namespace, cluster: Cluster, loaded: Cluster | None = None
) -> ExactReport:
    """The exact answer for the group, checked, in hbal's format; with -S the files hbal
    writes (`loaded`, the cluster as read, is FILE.original; the group after the exact steps
    FILE.balanced), with -C FILE hbal's script of the exact job sets, and -X's job sets."""
    from model.backends.text import dump_text, printf_g, show_list
    from model.balance import BalanceProblem, BalanceRules
    from model.check import check_balance
    from model.errors import CheckFailedError
    from model.htools.hbal import (
        format_cmds,
        movable_instances,
        naming_of,
        optimal_score,
        scope_of,
        solution_line,
        split_jobs,
        step_commands,
    )
    from model.htools.hbal_program import (
        SH_TEMPLATE,
        balanced_snapshot,
        group_check,
        loaded_header,
        lookup_names,
        placement_job_sets,
        score_text,
        split_warning,
        suffix_line,
        totals,
        views,
    )
    from model.htools.nodelist import parse_fields
    from model.space import with_node_status
    from model.state import node_states
    from programs import options as shared
    from solvers.strategies.balance import answer

    # hbal's checks in hbal's order, each before anything is written (hbal.hs main): unknown
    # --select-instances / --exclude-instances names (mergeData), a wrong -O name
    # (setNodeStatus), an empty cluster (checkCluster), then FILE.original and the group
    known = [i.name for i in cluster.instances]
    selected, wrong_sel = lookup_names(known, list(args.select_instances))
    excluded, wrong_ex = lookup_names(known, list(args.exclude_instances))
    if wrong_sel or wrong_ex:
        shown = show_list([*wrong_sel, *wrong_ex])
        message = f"failed to load data, aborting: Unknown instance(s): {shown}"
        return ExactReport("", f"Error: {message}\n", 1, {"error": message})
    verbose = getattr(args, "verbose", 1)
    header = loaded_header(cluster, loaded) if verbose > 1 else ""
    # -O (a unique prefix of a name will do), --max-cpu, --min-disk as hbal applies them
    # (CLI.setNodeStatus)
    state = node_states(cluster)
    offline, wrong = lookup_names(list(state.nodes), list(getattr(args, "offline", ()) or ()))
    if wrong:
        message = f"wrong node name(s) set as offline: {', '.join(wrong)}"
        return ExactReport(header, f"Error: {message}\n\n", 1, {"error": message})  # hbal's \n\n
    if not cluster.instances:  # nothing to balance, nothing written: hbal's exit 0
        return ExactReport(header + "Cluster is empty, exiting.\n", "", 0, _empty_json())
    split = split_warning(state) if verbose > 1 else ""
    loaded_line = (
        header
        + f"Loaded {len(cluster.nodes)} nodes, {len(cluster.instances)} instances\n"
        + (suffix_line(cluster) if verbose > 1 else "")
    )
    files: dict[str, str] = {}
    saved = split
    save = getattr(args, "save", None)
    if save:  # hbal writes FILE.original before it selects the group
        files[f"{save}.original"] = dump_text(loaded or cluster)
        saved += f"The cluster state before balancing has been written to file '{save}.original'\n"
    uuid, why = _group(cluster, args.group)
    if uuid is None:
        text = saved + why + "Error: Aborting.\n"
        message = why.splitlines()[0].split(". Node group list")[0].rstrip(":")
        return ExactReport(loaded_line, text, 1, {"error": message}, files=files)
    state = with_node_status(
        state, offline, getattr(args, "max_cpu", None), getattr(args, "min_disk", 0.0) or 0.0
    )
    rules = BalanceRules(
        no_disk_moves=not args.disk_moves,
        no_instance_moves=not args.instance_moves,
        restricted_migration=args.restricted_migration,
        evac_mode=args.evac_mode,
        ignore_soft_errors=args.ignore_soft_errors,
        select_instances=frozenset(selected) or None,  # the full names lookupName found
        exclude_instances=frozenset(excluded),
        # hbal's stopping rules: its answer's length is K without -l
        min_gain=getattr(args, "min_gain", BalanceRules.min_gain),
        min_gain_limit=getattr(args, "min_gain_limit", BalanceRules.min_gain_limit),
        min_score=getattr(args, "min_score", BalanceRules.min_score),
    )
    problem = BalanceProblem(state, uuid, 0, rules)
    max_steps = None if args.max_length < 0 else args.max_length
    ans, greedy = answer(
        problem,
        max_steps=max_steps,
        # what the start-up and the reading left of the limit, less the check and the output
        # after it (0.15 s on benchmarks/time_limits.py's 200-node group; issue 40, item 4)
        options=args.solver_options.limited(shared.SEARCH_TIME_LIMIT_S).left(CHECK_RESERVE_S),
        fewest=args.fewest_moves,
        target_score=args.target_score,
    )
    k = len(greedy) if max_steps is None else max_steps
    problem = BalanceProblem(state, uuid, k, rules)
    checked_at = time.perf_counter()
    report = check_balance(problem, ans.steps)
    if report.violations:
        raise CheckFailedError(
            "balance: the answer fails the checker: " + "; ".join(str(v) for v in report.violations)
        )
    placements, final = _placements(problem, ans.steps)
    check_s = time.perf_counter() - checked_at
    pool = movable_instances(state, rules.select_instances or (), rules.exclude_instances)
    scope = scope_of(state, uuid, pool)
    naming = naming_of(state, scope)
    group_name = next(g.name for g in cluster.groups if g.uuid == uuid)
    fields = getattr(args, "print_nodes", None)
    print_nodes = None if fields is None else tuple(parse_fields(fields))
    print_instances = getattr(args, "print_instances", False)
    out = [
        loaded_line,
        f"Group size {len(scope.nodes)} nodes, {len(scope.instances)} instances\n",
        f"Selected node group: {group_name}\n",
        group_check(state, scope, verbose, rules.ignore_soft_errors),
    ]
    saved += views(cluster, state, scope, print_instances, print_nodes, "Initial")
    out.append(score_text("Initial", state, scope, ans.score_before, verbose))
    opt_cv = optimal_score(state, scope)
    # hbal's early exit: nothing to gain over N+1's optimum, no -C commands, no FILE.balanced
    well_balanced = not placements and ans.score_before - opt_cv < rules.min_score
    if well_balanced:
        out.append(
            f"Cluster is already well balanced (initial score {printf_g(ans.score_before)},\n"
            f"optimum score due to N+1 reservations {printf_g(opt_cv)},\n"
            f"minimum score {printf_g(rules.min_score)}).\nNothing to do, exiting\n"
        )
    else:
        out.append("Trying to minimize the CV...\n")
        out += [solution_line(plc, pos, naming) + "\n" for pos, plc in enumerate(placements, 1)]
        if placements:
            out.append(score_text("Final", final, scope, ans.score, verbose, ans.score_before))
        else:
            out.append("No solution found\n")
        if verbose >= 1:
            out.append(f"Solution length={len(placements)}\n")
    job_sets = split_jobs(placements)
    sets = job_sets[:1] if args.first_job_group else job_sets
    if args.print_commands is not None and not well_balanced:  # as hbal: even for no step
        cmds = format_cmds(
            [[step_commands(state, placements[k], naming) for k in js] for js in sets]
        )
        if args.print_commands in ("", "-"):  # hbal's saveBalanceCommands on stdout
            out.append(
                "\nFirst set of jobs:\n"
                if args.first_job_group
                else "\nCommands to run to reach the above solution:\n"
            )
            out += [f"  {line}\n" for line in cmds.splitlines() if line != "  check"]
        else:  # -CFILE: hbal's script
            files[args.print_commands] = SH_TEMPLATE + cmds
            out.append(f"The commands have been written to file '{args.print_commands}'\n")
    if save and not well_balanced:
        files[f"{save}.balanced"] = dump_text(
            balanced_snapshot(loaded or cluster, final, scope, reported_memory=False)
        )
        saved += f"The cluster state after balancing has been written to file '{save}.balanced'\n"
    if not well_balanced:
        saved += views(cluster, final, scope, print_instances, print_nodes, "Final")
        if verbose > 3:
            out.append(totals(state, final, scope))
    objective = "steps" if ans.objective == "steps" else "score"
    proof = (
        f"exact ({objective}, K={k}): {ans.status}"
        + ("" if ans.bound is None else f", bound {ans.bound:.8f}")
        + ("" if ans.gap is None else f", gap {100 * ans.gap:.4f}%")
        + f"; build {ans.build_s:.2f} s, solve {ans.solve_s:.2f} s"
        + f"; hbal's port: {len(greedy)} step(s)"
    )
    notes = "".join(f"note: {n}\n" for n in ans.notes)
    data = _json(ans, placements, job_sets, k)
    data["timing"] = {**dict(ans.stages_s), "check_s": round(check_s, 4)}
    if args.compare:
        data["hbal"] = _real_hbal(args, k)
    plan = tuple(placement_job_sets(state, placements, sets)) if placements else ()
    return ExactReport("".join(out), saved + notes + proof + "\n", 0, data, (), files, plan)


def _empty_json() -> dict[str, Any]:
    """--json for a cluster without instances (hbal's "Cluster is empty"): nothing to move,
    trivially optimal, in the shape of every other answer."""
    return {
        "score_before": 0.0,
        "score_after": 0.0,
        "bound": 0.0,
        "gap": 0.0,
        "status": "optimal",
        "objective": "score",
        "max_steps": 0,
        "build_s": 0.0,
        "solve_s": 0.0,
        "notes": ["the cluster is empty"],
        "steps": [],
        "jobsets": [],
        "timing": {},
    }


def _json(ans: BalanceAnswer, placements: list, job_sets: list, k: int) -> dict[str, Any]:
    """issue 37's shape: score_before, score_after, bound, gap, status, steps, jobsets."""
    from model.htools.hbal import move_text

    return {
        "score_before": ans.score_before,
        "score_after": ans.score,
        "bound": ans.bound,
        "gap": ans.gap,
        "status": ans.status,
        "objective": ans.objective,
        "max_steps": k,
        "build_s": ans.build_s,
        "solve_s": ans.solve_s,
        "notes": list(ans.notes),
        "steps": [
            {
                "instance": p.instance,
                "from": [p.old_primary, p.old_secondary],
                "to": [p.primary, p.secondary],
                "move": move_text(p.move, p.primary, p.secondary),
                "score": p.score,
            }
            for p in placements
        ],
        "jobsets": [[placements[i].instance for i in js] for js in job_sets],
    }
