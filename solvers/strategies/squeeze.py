"""hsqueeze's plan, solved exactly (docs/squeeze.md).

`plan` decides the mode as hsqueeze does (expand when some node, offline ones included, cannot
host the minimal probe), builds the problem (`model.squeeze.build_problem`), solves it, turns
the counts into named migrations ordered into jobsets, and has the independent checker
(`model.check.check_squeeze`) judge the plan: a plan the checker refuses is an error, never an
answer. In expand mode, when even every standby node does not give enough capacity, the
fallback powers all of them on and maximises the nodes that host the probe.

Two ways to solve a problem:

* `solve_mip`: the per-node model of formulations/squeeze.py, lexicographic (nodes, moves,
  evenness). With DRBD pairs, nodes and moves are one blended stage (`_blended`, split back
  by `_unblend`); once the node count is fixed, the `stage_rows` hook adds the formulation's
  `evenness_cut`.
* `solve_decomposed` (above DECOMPOSE_NODES nodes, no DRBD pairs): the node-type aggregate
  gives the bound and each type's share, then one small packing MIP per type (`_pack_type`).
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from formulations import squeeze as form
from formulations.deadline import OutOfTime
from formulations.objective import Objective
from model.check import Move, check_squeeze
from model.errors import CheckFailedError, SolverError
from model.resources import probe_demand
from model.squeeze import (
    EXPAND,
    SHRINK,
    BuiltProblem,
    Migration,
    SqueezeAssignment,
    SqueezeProblem,
    SqueezeRequest,
    build_problem,
    fits,
    migrations,
    movable,
    not_preexisting,
    offline_candidates,
    online_candidates,
    order_moves,
)
from model.state import ClusterState
from solvers import LexResult, SolveResult, Status, Stopwatch, solve_lexicographic
from solvers.options import DEFAULT_OPTIONS, SolverOptions, answer_options
from solvers.result import relative_gap

#: Above this many nodes the single MIP is replaced by the node-type decomposition: one MIP
#: over every node stalls at that scale (docs/squeeze.md, "Scale: decomposition").
DECOMPOSE_NODES = 1200
#: The decomposition's time budget when no --time-limit is given (seconds).
DECOMPOSE_DEFAULT_BUDGET_S = 110.0


@dataclass(frozen=True)
class Solution:
    """A solved problem (empty assignment when there is no plan) with the run's figures."""

    assignment: SqueezeAssignment
    status: str
    objective: tuple[float | None, ...]
    bound: tuple[float | None, ...]
    gap: tuple[float | None, ...]
    names: tuple[str, ...]
    build_s: float
    solve_s: float
    method: str = "mip"
    solver: str = "highs"
    note: str = ""  # why there is no plan, when the time limit left no room for the model


@dataclass(frozen=True)
class SqueezePlan:
    """hsqueeze's answer, checked: the nodes to power off (mode "offline") or on ("online"),
    or nothing ("none"); the migrations in the jobsets they run in; the solver's figures per
    stage; the checker's verdict."""

    mode: str  # "offline", "online" or "none"
    nodes: tuple[str, ...]
    moves: tuple[Migration, ...]
    jobsets: tuple[tuple[Migration, ...], ...]
    offline_candidates: tuple[str, ...]
    online_candidates: tuple[str, ...]
    status: str
    objective: tuple[float | None, ...]
    bound: tuple[float | None, ...]
    gap: tuple[float | None, ...]
    stage_names: tuple[str, ...]
    build_s: float
    solve_s: float
    method: str
    solver: str = "highs"
    not_enough_capacity: bool = False
    checker: Mapping[str, Any] = field(default_factory=dict)  # "ok", "objectives"
    note: str = ""  # why the answer is not the solve's (the time limit left no plan)


# -- the single MIP ----------------------------------------------------------------------------


def _moves_cap(problem: SqueezeProblem) -> int:
    """An upper bound on the moves objective: every instance moves, DRBD at its dearest."""
    return sum(sh.total for sh in problem.shapes) + sum(
        max(c.cost for c in mi.choices) for mi in problem.mirrored if mi.choices
    )


def _blended(problem: SqueezeProblem, nodes: Objective, moves: Objective) -> Objective:
    """Nodes then moves as one objective, W·nodes ∓ moves with W above any moves value: the
    same optimum as the two stages, in one solve (a second stage with DRBD pair binaries
    starts without an incumbent and can stall)."""
    weight = _moves_cap(problem) + 1
    sign = -1 if nodes.sense == "max" else 1
    return Objective("nodes_then_moves", weight * nodes.expr + sign * moves.expr, nodes.sense)


def _unblend(
    problem: SqueezeProblem, res: LexResult, nodes: Objective, moves: Objective
) -> LexResult:
    """Split a blended first stage back into its two stages (values read off the plan; none
    without one, the bound on the node count still split off)."""
    stage = res.stages[0]
    cap = _moves_cap(problem)
    weight = cap + 1
    n_val = m_val = None
    if res.has_solution:
        n_val = float(round(form.stage_value(nodes)))
        m_val = float(round(form.stage_value(moves)))
    if stage.status is Status.OPTIMAL and res.has_solution:
        n_bound, m_bound = n_val, m_val
    elif stage.bound is None:
        n_bound, m_bound = None, None
    elif nodes.sense == "max":
        n_bound, m_bound = float(math.floor((stage.bound + cap) / weight)), None
    else:
        n_bound, m_bound = float(max(math.ceil((stage.bound - cap) / weight), 0)), None
    split = tuple(
        replace(stage, objective=v, bound=b, gap=relative_gap(v, b), solve_s=t)
        for v, b, t in ((n_val, n_bound, stage.solve_s), (m_val, m_bound, 0.0))
    )
    names = (nodes.name, moves.name, *res.names[1:])
    return LexResult.from_stages(names, split + res.stages[1:], res.build_s)


def solve_mip(built: BuiltProblem, options: SolverOptions = DEFAULT_OPTIONS) -> Solution:
    """The single per-node MIP, solved lexicographically.

    With DRBD pairs, nodes and moves are one blended stage (same optimum). Once the node
    count is fixed, it bounds how many nodes are on, which makes the formulation's evenness
    cut valid for the later stages (same optimum, faster proof).
    """
    problem = built.problem
    deadline = options.deadline()

    def out_of_time(why: str, build_s: float) -> Solution:  # no model in time: no plan
        return Solution(SqueezeAssignment(), "time_limit", (), (), (), (), build_s, 0.0,
                        solver=options.solver, note=why)  # fmt: skip

    # the N+1 rows with each node's load written out where the time allows (CP-SAT proves
    # more from them in a long solve), shared by the node's rows where it does not
    written = form.n1_terms(problem, shared_load=False) * SECONDS_PER_N1_TERM
    shared = deadline is not None and written > WRITTEN_OUT_SHARE * (deadline - time.perf_counter())
    terms = form.n1_terms(problem, shared_load=shared)
    need = terms * SECONDS_PER_N1_TERM  # the build and the solver's copy
    if deadline is not None and need > deadline - time.perf_counter():
        left = max(deadline - time.perf_counter(), 0.0)
        return out_of_time(
            f"the model ({terms} N+1 terms, about {need:.1f} s to build and "
            f"hand to the solver) does not fit the {left:.1f} s left",
            0.0,
        )
    try:
        with Stopwatch() as sw:
            model = form.build(problem, deadline, shared_load=shared)
            objs = form.objectives(model, problem)
    except OutOfTime as cut:
        return out_of_time(str(cut), cut.built_s)
    # the copy as the build went (a loaded machine builds and copies slower alike), and a
    # little time to solve after it
    copy = COPY_SHARE * need * max(sw.seconds / ((1 - COPY_SHARE) * need), 1.0) if need else 0
    if deadline is not None and need and copy + LEAST_SOLVE_S > deadline - time.perf_counter():
        return out_of_time(
            f"the model was built in {sw.seconds:.1f} s, too late for the solver's copy of it "
            f"(about {copy:.0f} s) and a solve",
            sw.seconds,
        )
    node_stage = bool(objs) and objs[0].name in ("nodes_freed", "nodes_powered_on")
    blend = node_stage and bool(problem.mirrored) and len(objs) > 1 and objs[1].name == "moves"
    stages = [_blended(problem, objs[0], objs[1]), *objs[2:]] if blend else objs

    def evenness_after_node_stage(k: int, _value: float) -> list:
        if k != 0 or not node_stage:
            return []
        count = round(form.stage_value(objs[0]))  # the fixed stage's plan is loaded
        decided = len(problem.decided())
        n_fixed = len(problem.nodes) - decided
        nodes_on = n_fixed + (decided - count if problem.mode == SHRINK else count)
        row = form.evenness_cut(model, problem, nodes_on)
        return [row] if row is not None else []

    res = solve_lexicographic(
        model,
        stages,
        # what the build left of the answer's deadline, less the ordering and the check after
        **options.left(AFTER_SOLVE_S).kwargs(),
        build_s=sw.seconds,
        stage_rows=evenness_after_node_stage,
        # CP-SAT starts from the cluster as it is (it found no plan at all in 7 s without)
        hint=form.current_start(model, problem) if problem.mirrored else None,
    )
    if blend and res.stages:
        res = _unblend(problem, res, objs[0], objs[1])
    if not res.has_solution:
        return Solution(
            SqueezeAssignment(),
            str(res.status),
            res.objective,
            res.bound,
            res.gap,
            res.names,
            res.build_s,
            res.solve_s,
            solver=options.solver,
        )
    assignment = form.solution(model, problem)
    moves_const = sum(sh.homeless for sh in problem.shapes)
    obj = tuple(
        (v + moves_const) if (v is not None and name == "moves") else v
        for name, v in zip(res.names, res.objective, strict=True)
    )
    bound = tuple(
        (v + moves_const) if (v is not None and name == "moves") else v
        for name, v in zip(res.names, res.bound, strict=True)
    )
    return Solution(
        assignment,
        str(res.status),
        obj,
        bound,
        res.gap,
        res.names,
        res.build_s,
        res.solve_s,
        solver=options.solver,
    )


# -- decomposition for very large clusters -----------------------------------------------------


def solve_decomposed(built: BuiltProblem, options: SolverOptions = DEFAULT_OPTIONS) -> Solution:
    """Aggregate by node type, then pack each type with its own small MIP.

    1. The type aggregate (lexicographic: node count, then instances changing type) gives
       the bound on the node count and each type's number of powered-on nodes and instances
       of every shape.
    2. Within a type the nodes are interchangeable but for their content, so the ones with
       the most movable instances stay on; a per-type MIP without power variables then places
       the type's share with the fewest moves. If that packing does not fit (the aggregate
       pools capacity), the next node of the type is kept on as well.
    The first stage's gap is to the aggregate's bound.
    """
    t0 = time.perf_counter()
    problem = built.problem
    with Stopwatch() as sw:
        agg = form.build_type_aggregate(problem)
        agg_objectives = form.type_aggregate_objectives(agg, problem)
    agg_res = solve_lexicographic(
        agg,
        agg_objectives,
        options.solver,
        time_limit=options.time_limit,
        threads=options.threads,
        build_s=sw.seconds,
    )
    names = ("nodes_freed" if problem.mode == SHRINK else "nodes_powered_on", "moves")
    if not agg_res.has_solution:
        return Solution(
            SqueezeAssignment(),
            str(agg_res.status),
            (None, None),
            (None, None),
            (None, None),
            names,
            sw.seconds,
            agg_res.solve_s,
            "decomposed",
            options.solver,
        )
    stage0 = agg_res.stages[0]
    bound = float(stage0.bound if stage0.bound is not None else stage0.objective)
    moves_bound = agg_res.bound[1] if len(agg_res.bound) > 1 else None
    shares = form.type_aggregate_solution(agg, problem)
    budget = options.time_limit if options.time_limit is not None else DECOMPOSE_DEFAULT_BUDGET_S
    budget = max(budget - (time.perf_counter() - t0), 1.0)
    total_nodes = sum(len(ns) for ns in shares.types)
    content: dict[int, int] = defaultdict(int)
    for sh in problem.shapes:
        for n, c in sh.counts:
            content[n] += c
    on: dict[int, bool] = {}
    y: dict[tuple[int, int], int] = {}
    build_s, solve_s, all_optimal = agg_res.build_s, agg_res.solve_s, True
    moves = float(sum(sh.homeless for sh in problem.shapes))
    shape_range = range(len(problem.shapes))
    for t, members in enumerate(shares.types):
        fixed = [n for n in members if problem.nodes[n].state == "on"]
        free = sorted(
            (n for n in members if problem.nodes[n].state != "on"),
            key=lambda n: (-content[n], n),
        )
        k = shares.powered_on[t] - len(fixed)
        limit = max(budget * len(members) / total_nodes, 1.0)
        packed: tuple[SolveResult, SqueezeAssignment] | None = None
        keep: list[int] = []
        if not fixed and k <= 0 and not any(shares.share[s, t] for s in shape_range):
            for n in members:
                on[n] = False
                moves += content[n]
            continue
        while k <= len(free):
            keep = fixed + free[:k]
            res, local, sub_s = _pack_type(problem, keep, shares.share, t, options, limit)
            packed = (res, local)
            build_s += sub_s
            solve_s += res.solve_s
            if res.has_solution:
                break
            k += 1
        if packed is None or not packed[0].has_solution:
            return Solution(
                SqueezeAssignment(),
                "infeasible",
                (None, None),
                (bound, None),
                (None, None),
                names,
                build_s,
                solve_s,
                "decomposed",
                options.solver,
            )
        res, local = packed
        all_optimal &= res.status is Status.OPTIMAL
        kept = set(keep)
        for n in members:
            on[n] = n in kept
            if n not in kept:
                moves += content[n]
        for (s, j), v in local.counts.items():
            y[s, keep[j]] = v
        moves += float(res.objective or 0.0)
    decided = problem.decided()
    if problem.mode == SHRINK:
        first = float(sum(1 for n in decided if not on[n]))
    else:
        first = float(sum(1 for n in decided if on[n]))
    gap = abs(first - bound) / max(abs(first), 1.0)
    moves_gap = None if moves_bound is None else abs(moves - moves_bound) / max(moves, 1.0)
    # optimal only when both stages meet their bounds: each type's packing minimises its own
    # moves for the aggregate's shares, which need not be the least moves overall
    proven = gap <= 1e-9 and moves_gap is not None and moves_gap <= 1e-9 and all_optimal
    status = "optimal" if proven else "feasible"
    return Solution(
        SqueezeAssignment(on, y, {}),
        status,
        (first, moves),
        (bound, moves_bound),
        (gap, moves_gap),
        names,
        build_s,
        solve_s,
        "decomposed",
        options.solver,
    )


def _pack_type(
    problem: SqueezeProblem,
    keep: list[int],
    share: Mapping[tuple[int, int], int],
    t: int,
    options: SolverOptions,
    time_limit: float,
) -> tuple[SolveResult, SqueezeAssignment, float]:
    """Place type t's share of every shape on the kept nodes with the fewest moves: the
    per-node model over the kept nodes, all on (their local indices in the assignment)."""
    local = {n: j for j, n in enumerate(keep)}
    shapes = []
    for s, sh in enumerate(problem.shapes):
        counts = tuple((local[n], c) for n, c in sh.counts if n in local)
        shapes.append(replace(sh, counts=counts, homeless=share[s, t] - sum(c for _, c in counts)))
    sub = SqueezeProblem(
        mode=problem.mode,
        nodes=tuple(replace(problem.nodes[n], state="on") for n in keep),
        shapes=tuple(shapes),
        fixed_tag_counts={
            (local[n], e): c for (n, e), c in problem.fixed_tag_counts.items() if n in local
        },
    )
    with Stopwatch() as sw:
        model = form.build(sub)
        objs = form.objectives(model, sub)
        moves = [o for o in objs if o.name == "moves"]
    # nothing can move (no moves stage): any placement of the share will do, the least
    # utilisation picks one; the moves are then 0
    stage = moves[0] if moves else next(o for o in objs if o.name == "max_memory_percent")
    lex = solve_lexicographic(
        model,
        [stage],
        options.solver,
        time_limit=time_limit,
        mip_gap=options.gap,
        threads=options.threads,
        build_s=sw.seconds,
    )
    res = lex.stages[0]
    if res.has_solution and not moves:
        res = replace(res, objective=0.0)
    assignment = form.solution(model, sub) if res.has_solution else SqueezeAssignment()
    return res, assignment, sw.seconds


# -- hsqueeze's plan ---------------------------------------------------------------------------


#: The backend for problems with DRBD pair moves when the user names none. On generated
#: clusters (`benchmarks/bench_squeeze.py --drbd`, docs/squeeze.md) CP-SAT proved 32-node
#: cases in 5-12 s where HiGHS took 108 s or stopped unproven at 120 s, and at 64 nodes it
#: proved 39 nodes freed where HiGHS had 21 (bound 46) at 120 s; equal at 16 nodes.
MIRRORED_SOLVER = "cpsat"

#: The build of the model and its copy into the solver per term of its N+1 rows (most of a
#: model with DRBD pairs): 12.9 s of build and 8.2 s of CP-SAT's copy for 1,012,376 terms on
#: bench_squeeze's 64 nodes with 62 drbd pairs at load 5.4, 2.1e-5 s a term, when each row
#: held its node's whole load; COPY_SHARE of it is the copy, weighed again once the model is
#: built. With the load shared (formulations/squeeze.py `define_n1`) the same cluster has
#: 35,536 such terms and the whole model builds in 0.7-0.8 s at load 4, so the estimate
#: (0.7 s) now errs on neither side by much.
SECONDS_PER_N1_TERM = 2e-5

#: The share of the time left that the N+1 rows written out (each node's load in each of its
#: rows) may take to build and copy; past it they share each node's load (formulations/
#: squeeze.py `define_n1`). On bench_squeeze's 64 nodes / 62 drbd pairs the written-out rows
#: proved 39 nodes freed in 120 s (bound 39), the shared ones found 39 with bound 41; under 30
#: s only the shared ones leave CP-SAT the time to find a plan at all. A quarter: written out
#: from a limit of about 85 s there.
WRITTEN_OUT_SHARE = 0.25
COPY_SHARE = 0.4
LEAST_SOLVE_S = 2.0  # a solve given less than this after the copy finds no plan at that size

#: The seconds a solve leaves for the ordering of the moves and the independent check after
#: it (0.1-0.3 s on 64 nodes with 62 drbd pairs; benchmarks/time_limits.py).
AFTER_SOLVE_S = 0.5


def _solve(built: BuiltProblem, options: SolverOptions) -> Solution:
    if len(built.node_names) > DECOMPOSE_NODES and not built.problem.mirrored:
        return solve_decomposed(built, options)
    if built.problem.mirrored and not options.solver_given:
        options = replace(options, solver=MIRRORED_SOLVER)
    return solve_mip(built, options)


def _plain(values: Mapping[str, Any]) -> dict[str, Any]:
    """The checker's figures as JSON numbers (ints and strings kept, the rest as floats)."""
    return {
        k: (v if isinstance(v, (int, str)) or v is None else float(v)) for k, v in values.items()
    }


def plan(
    state: ClusterState, request: SqueezeRequest, options: SolverOptions = DEFAULT_OPTIONS
) -> SqueezePlan:
    """Decide the mode, solve, order and check: hsqueeze's answer for the cluster `state`.
    The time limit is one deadline for all of it (the command line's, from the process's
    start; else from now): the model's build, each solve, the ordering and the check."""
    if options.deadline_at is None and options.time_limit is not None:
        options = answer_options(options, None)
    cluster = state.cluster
    std = cluster.cluster_policy.std
    min_probe = probe_demand(std, request.minimal_resources)
    target_probe = probe_demand(std, request.target_resources)
    move = request.move
    off_cands = offline_candidates(cluster, move)
    on_cands = online_candidates(cluster)
    expand = not all(fits(st, min_probe) for st in state.nodes.values())
    not_enough = False
    if expand:
        probe = min_probe
        built = build_problem(state, EXPAND, probe, move, decided=on_cands)
        sol = _solve(built, options)
        if sol.status == "infeasible":
            not_enough = True
            built = build_problem(
                state, EXPAND, probe, move, decided=(), always_on=on_cands, soft_probe=True
            )
            sol = _solve(built, options)
    else:
        probe = target_probe
        # candidates holding instances that may not move cannot be emptied
        fixed_nodes = {i.primary for i in cluster.instances if not movable(i, move)}
        decided = [n for n in off_cands if n not in fixed_nodes]
        built = build_problem(state, SHRINK, probe, move, decided=decided)
        sol = _solve(built, options)
        if sol.status == "infeasible" and any(sh.homeless for sh in built.problem.shapes):
            # the instances left on offline nodes cannot all be taken in: leave them there,
            # as hsqueeze does, and free what can be freed around them
            built = build_problem(state, SHRINK, probe, move, decided=decided, rehome=False)
            sol = _solve(built, options)
    if not sol.assignment.on:
        if sol.status == "infeasible" and not expand:
            sol = replace(sol, assignment=SqueezeAssignment())
        elif sol.status == "time_limit" and not expand:
            sol = _nothing_powered_off(sol)
        elif sol.status not in ("infeasible", "optimal", "feasible"):
            # optimal or feasible without power states: a cluster without nodes, nothing to do
            why = f": {sol.note}" if sol.note else ""
            raise SolverError(
                f"no plan found ({sol.status}{why}); allow more time with --time-limit"
            )

    names = built.node_names
    power = sol.assignment.on
    if expand:
        decided_on = [names[n] for n in built.problem.decided() if power.get(n)]
        nodes = on_cands if not_enough else decided_on
        off: list[str] = []
        on = list(nodes)
        mode = "online"
    else:
        freed = {names[n] for n in built.problem.decided() if power and not power[n]}
        nodes = [n for n in off_cands if n in freed]
        off, on = list(nodes), []
        mode = "offline" if nodes else "none"
    moves = migrations(cluster, built, sol.assignment) if (power and (expand or nodes)) else []
    jobsets = order_moves(state.powered(off=off, on=on), moves)
    moves = [mv for js in jobsets for mv in js]

    report = check_squeeze(
        state,
        off,
        [Move(m.instance, m.target, m.secondary) for m in moves],
        # nothing powered down: the cluster stays as it is, which hosts the minimal probe
        # everywhere (else the mode is expand); the target probe is what a shrink leaves room
        # for, and with no shrink there is none to hold it to
        min_probe if mode == "none" else probe,
        powered_on_nodes=on,
        copy_moves=move == "all",
    )
    violations = not_preexisting(cluster, report.violations, moves)
    if not_enough:  # the probe cannot fit everywhere: only the plan itself must hold
        violations = tuple(v for v in violations if v.kind != "probe")
    if violations and mode != "none":
        raise CheckFailedError("independent check failed: " + "; ".join(str(v) for v in violations))

    # nothing to power off or on: no stage answered a question, so none is reported, its
    # bound and gap no more than its objective (issue 40, item 10: "objective": [] beside
    # "bound": [0.0])
    reported = mode != "none" or power or sol.status == "time_limit"
    objective = sol.objective if reported else ()
    return SqueezePlan(
        mode=mode,
        nodes=tuple(nodes),
        moves=tuple(moves),
        jobsets=tuple(tuple(js) for js in jobsets),
        offline_candidates=tuple(off_cands),
        online_candidates=tuple(on_cands),
        status=sol.status,
        objective=tuple(objective),
        bound=tuple(sol.bound) if reported else (),
        gap=tuple(sol.gap) if reported else (),
        stage_names=sol.names if reported else (),
        build_s=sol.build_s,
        solve_s=sol.solve_s,
        method=sol.method,
        solver=sol.solver,
        not_enough_capacity=not_enough,
        checker={"ok": not violations, "objectives": _plain(report.objectives)},
        note=sol.note,
    )


def _nothing_powered_off(sol: Solution) -> Solution:
    """A shrink whose solve found no plan before the time limit: the cluster as it is, the
    answer that is always there (the minimal probe fits every node, else the mode would be
    expand), with nothing freed and no move, status time_limit and the bound the solve
    reached, rather than an error (issue 40: "no plan found" on 64 nodes with drbd moves
    under 10 s, where the operator's question has an honest answer, "not in this time")."""
    trivial = {"nodes_freed": 0.0, "moves": 0.0}
    names, bound = sol.names, sol.bound
    if not names:  # no model was built: the stages it would have had, no bound
        names, bound = tuple(trivial), (None, None)
    objective = tuple(trivial.get(n) for n in names)
    gap = tuple(relative_gap(v, b) for v, b in zip(objective, bound, strict=True))
    why = sol.note or "the solver found no plan"
    return replace(
        sol,
        assignment=SqueezeAssignment(),
        objective=objective,
        bound=bound,
        gap=gap,
        names=names,
        note=f"{why} within the time limit: nothing powered off",
    )
