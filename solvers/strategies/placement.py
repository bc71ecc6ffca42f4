"""Joint placement, solved: most instances, then the least cluster score (docs/placement.md).

The strategy around formulations/placement.py:

1. `placed` (max), then `on_last_resort` (min), as lexicographic stages fixed in turn;
2. the score by outer approximation: planes at the cluster as it is (and at a given plan, e.g.
   hail's one-by-one answer), then rounds of solve → the checker computes the true score of the
   solution (`model.check.check_allocation`) → planes at that solution, until the model's lower
   bound meets the best true score (optimal), or the time is up (best plan, with its gap);
3. with a capacity check (exact global N+1, `ExactN1`), a plan that leaves a node of its group
   without an evacuation plan is cut off with every plan holding its part that breaks the group
   alone (adding load never restores redundancy) and the round is solved again; a plan the
   judge refuses (a node evacuation's moves) is cut off alone;
4. when the cuts leave no plan at the stages' optimum, the model is built again with every cut
   and the stages are solved again (`RELAXED`).

Every plan returned passed the checker; its score is the checker's, never the model's.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from formulations import batch as batch_form
from formulations import placement as form
from formulations.deadline import OutOfTime
from model.check import check_allocation
from model.errors import CheckFailedError
from model.placement import PlacementProblem, score_is_finite
from model.resources import InstanceDemand
from model.spread import SpreadBound, spread_bounds, values_at
from model.state import ClusterState
from solvers import Status, Stopwatch
from solvers.lexicographic import fixing_bounds, open_session
from solvers.options import DEFAULT_OPTIONS, SolverOptions
from solvers.strategies.descent import Plan, improve

#: Relative gap between the model's bound and the best true score at which the score counts as
#: proven optimal (the solvers' own tolerance is 1e-6; the score is a float sum of 20 terms).
SCORE_GAP = 1e-6
MAX_ROUNDS = 200
#: Time cap of an early score round (doubled every 8 rounds).
ROUND_SECONDS = 0.5
#: Rounds in a row whose solution repeats a plan already scored without raising the bound:
#: the planes no longer move, the rest of the gap is score the model does not carry
#: (docs/placement.md "Limits"), and further rounds cannot close it.
STALLED_ROUNDS = 5
#: Beyond this many shared drbd pairs the reserve is summed on every pair (exact, larger).
MAX_SHARED_PAIRS = 16
#: placements (kind, node, role) no plan may hold all of (`form.not_all_of`)
Held = list[tuple[str, str, str]]


#: Placement variables above which the score rounds run HiGHS without presolve. On a 200-node
#: group evacuating 40 instances (13,000 binaries, 400,000 nonzeros) presolve alone outlasted
#: each round's time, so no round reached an LP bound; without it the rounds bound the score
#: (docs/placement.md, "Figures"). Small models keep presolve.
PRESOLVE_OFF_ABOVE = 5000


@dataclass(frozen=True)
class JointPlan:
    """The best plan found and what is proven about it."""

    placements: Plan
    placed: int
    score: float | None  # the checker's score after the plan
    bound: float | None  # a lower bound on the least score among plans placing `placed`
    status: str
    rounds: int
    build_s: float
    solve_s: float
    cuts: int = 0  # plans cut off by the capacity check
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def gap(self) -> float | None:
        if self.score is None or self.bound is None:
            return None
        return max(0.0, self.score - self.bound) / max(abs(self.score), 1.0)


def true_score(
    state: ClusterState,
    demands: Mapping[str, InstanceDemand],
    plan: Plan,
    group: str | None,
) -> tuple[float | None, list[str]]:
    """The checker's verdict on a plan: its score, and its violations (empty when valid)."""
    placements = [(demands[name], p, s) for name, (p, s) in plan.items()]
    # a group the request names may be unallocable: hail places there when asked to
    report = check_allocation(state, placements, group=group, requested_group=group)
    return report.objectives["score"], [str(v) for v in report.violations]


def _expand(
    kinds: Mapping[str, list[str]], solution: Mapping[str, list[tuple[str, str | None]]]
) -> Plan:
    """Kind placements -> instance placements (a kind's members in order)."""
    plan: Plan = {}
    for kind, spots in solution.items():
        for name, spot in zip(kinds[kind], spots, strict=False):
            plan[name] = spot
    return plan


def place_jointly(
    state: ClusterState,
    problem: PlacementProblem,
    demands: Mapping[str, InstanceDemand],
    members: Mapping[str, list[str]],
    *,
    group: str | None,
    options: SolverOptions = DEFAULT_OPTIONS,
    start: Plan | None = None,
    capacity_check: Callable[[ClusterState, Plan], Sequence[str] | None] | None = None,
    judge: Callable[[Plan], tuple[float | None, list[str]]] | None = None,
    refused: Sequence[Held] = (),
) -> JointPlan:
    """Solve `problem` (its kinds' members named by `members`); `start` is a known plan (hail's
    one-by-one answer) whose point gets planes first and which the answer never falls behind;
    `capacity_check(state, plan)` returns the nodes of a group whose redundancy the plan breaks
    (None or empty when it holds). `judge(plan)` replaces the checker's verdict on new
    instances (`true_score`) when the plan is something else (moves of existing instances):
    a plan it rejects is cut off, not an error. `refused`: placements no plan may hold all
    of (plans cut off by an earlier solve of the same request)."""

    def verdict(plan: Plan) -> tuple[float | None, list[str]]:
        if judge is not None:
            return judge(plan)
        return true_score(state, demands, plan, group)

    began = time.perf_counter()
    if not score_is_finite(problem):  # a NaN or infinite metric: the known plan stands
        why = "the cluster score is not finite (a metric is 0/0 or x/0): not modelled"
        if start:
            score, _ = verdict(start)
            return JointPlan(dict(start), len(start), score, None, "feasible", 0, 0.0, 0.0,
                             notes=(why,))  # fmt: skip
        return JointPlan({}, 0, None, None, "infeasible", 0, 0.0, 0.0, notes=(why,))
    deadline = None if options.time_limit is None else began + options.time_limit
    everyone = sum(k.count for k in problem.batch.instances)
    kind_of = {name: kind for kind, names in members.items() for name in names}

    def admitted(plan: Plan) -> tuple[float | None, list[str]]:
        """The verdict, and a plan the model does not hold (a placement outside its
        candidates) or that breaks a group's N+1 redundancy refused."""
        score, bad = verdict(plan)
        if not bad:
            bad = _outside(problem, plan, kind_of)
        if not bad and capacity_check is not None:
            bad = [f"{n} not N+1 redundant" for n in capacity_check(state, plan) or ()]
        return score, bad

    notes: list[str] = []
    if start and _outside(problem, start, kind_of):
        # a plan the model does not hold (say, a move htools forces that the model does not
        # know): nothing is known from it
        notes.append("the start is outside the model's candidates")
        start = None
    # a start that breaks N+1 is no plan of the model either
    start_score, start_bad = admitted(start) if start else (None, ["no start"])
    start_ok = start is not None and len(start) == everyone and not start_bad
    if start_ok and start_score is not None:
        limit = options.time_limit
        seconds = DESCENT_SECONDS if limit is None else min(DESCENT_SECONDS, DESCENT_SHARE * limit)
        # when the time left after the descent is too short for the model to give a bound
        # (`MODEL_SECONDS_PER_VARIABLE`), the start improved by the iterated search until the
        # deadline is the answer, with no bound
        need = MODEL_SECONDS_PER_VARIABLE * _variables(problem)
        no_model = deadline is not None and deadline - time.perf_counter() - seconds < need
        if no_model:
            seconds = max(deadline - time.perf_counter(), 0.0)
        better = improve(problem, start, start_score, kind_of, admitted, seconds, iterate=no_model)
        if better.moves:
            notes.append(
                f"start improved by {better.moves} move(s): {start_score:.6f} -> {better.score:.6f}"
            )
            start, start_score = better.plan, better.score
        if no_model:
            return JointPlan(dict(start), len(start), start_score, None, str(Status.FEASIBLE),
                             0, 0.0, 0.0, notes=(*notes, NO_TIME_FOR_MODEL))  # fmt: skip
    elif deadline is not None and deadline - time.perf_counter() < _model_seconds(problem):
        # a part of the batch placed (hail's walk cut by its share of the limit), or none:
        # the model's build and its copy into HiGHS alone would end past the deadline (a
        # 50-instance batch on 200 nodes: 7 s and 9 s of a 14 s share, loaded)
        return _without_model(start, start_score, start_bad, notes, 0.0)
    stopped: OutOfTime | None = None
    with Stopwatch() as sw:
        try:
            m = form.build(problem, deadline)
            objs = form.objectives(m, problem)
        except OutOfTime as stop:
            stopped = stop
    if stopped is not None:
        return _without_model(start, start_score, start_bad, [*notes, str(stopped)], sw.seconds)
    if deadline is not None and deadline - time.perf_counter() < HANDOVER_FACTOR * sw.seconds:
        # the copy into HiGHS takes about as long as the build (it cannot be cut short)
        notes.append(f"the model was built in {sw.seconds:.2f} s, too late to be solved")
        return _without_model(start, start_score, start_bad, notes, sw.seconds)
    bounds = []
    known = start_ok and start_score is not None
    # the start's value in the stages before the score; the spread bound cuts off every plan
    # scoring above the start: valid for the score only where the start is at the optimum of
    # every stage before it (nothing on last-resort groups, nothing placed back: a plan with
    # fewer there may score higher)
    stages = _later_stages(problem, start, kind_of) if start is not None else {}
    known = known and not any(stages.values())
    remaining = None if deadline is None else deadline - time.perf_counter()
    if known and options.solver == "highs" and _spread_in_time(problem, remaining):
        with sw:
            bounds = spread_bounds(problem, _by_kind(start, kind_of), start_score)
            form.define_spread_bound(m, problem, bounds)
    spread = bool(bounds)
    big = len(m.x) + len(m.y) > PRESOLVE_OFF_ABOVE
    # the spread bound's first solve is one long solve: presolve pays there. No restarts:
    # after one HiGHS 1.12 proved a wrong bound on these models (solvers/highs_backend.py)
    session = open_session(
        options.solver,
        m,
        options.gap,
        options.threads,
        0,
        presolve=spread or not big,
        restarts=False,
    )
    cut_off: list[Held] = list(refused)  # every cut, carried into a solve again
    for held in refused:
        session.add_bound(*form.not_all_of(m, held))
    solve_s = 0.0

    def left() -> float | None:
        return None if deadline is None else max(deadline - time.perf_counter(), 0.05)

    def run(cap: float | None = None, build_s: float = 0.0):  # noqa: ANN202
        nonlocal solve_s
        limit = left()
        if cap is not None:
            limit = cap if limit is None else min(cap, limit)
        res = session.solve(time_limit=limit, build_s=build_s)
        solve_s += res.solve_s
        return res

    def round_cap(k: int) -> float:
        """Early rounds only steer the planes: a short cap; later ones get longer, so that a
        proof, if within reach, is reached."""
        return ROUND_SECONDS * (2 ** min(k // 8, 6))

    try:
        # HiGHS starts from a known plan (CP-SAT hints only between its own stages)
        if start and options.solver == "highs":
            solve_s += _complete(session, m, problem, start, members, kind_of, bounds, left())
        # lexicographic stages before the score: placed, then on_last_resort
        reached: dict[str, float] = {}
        proven = True  # every stage so far solved to optimality
        for k, obj in enumerate(objs[:-1]):
            if obj.name == "placed" and start_ok:
                # a valid known plan places every instance: the stage's optimum, proven
                reached[obj.name] = float(everyone)
                session.add_bound(obj.expr, *fixing_bounds(obj, float(everyone)))
                continue
            session.set_objective(obj.expr, obj.sense)
            res = run(build_s=sw.seconds if k == 0 else 0.0)
            if not res.has_solution or res.objective is None:
                if start and not start_bad:  # the known plan stands, unproven
                    note = f"{obj.name} stage without a solution ({res.status})"
                    return JointPlan(
                        dict(start),
                        len(start),
                        start_score,
                        None,
                        str(Status.FEASIBLE),
                        0,
                        sw.seconds,
                        solve_s,
                        notes=(note,),
                    )
                return JointPlan({}, 0, None, None, str(res.status), 0, sw.seconds, solve_s)
            reached[obj.name] = res.objective
            proven = proven and res.status is Status.OPTIMAL
            session.add_bound(obj.expr, *fixing_bounds(obj, res.objective))
        placed_target = int(round(reached["placed"]))
        score_obj = objs[-1]
        session.set_objective(score_obj.expr, score_obj.sense)
        # planes where the cluster stands now, and at the known plan
        base = [[problem.base_sd[n][k] for n in problem.scored] for k in m.K]
        for row in form.tangent_rows(m, problem, base, list(problem.reserved_base.values())):
            session.add_bound(*row)
        best: tuple[float, Plan] | None = None
        # the start is a plan of the score stage if it is at every earlier stage's optimum
        if (
            start is not None
            and len(start) == placed_target
            and all(round(reached.get(k, v)) == v for k, v in stages.items())
        ):
            score, bad = admitted(start)
            if not bad and score is not None:
                best = (score, dict(start))
        bound: float | None = None
        status = Status.OPTIMAL
        rounds = cuts = 0
        retry: tuple[frozenset[tuple[str, str]] | None] | None = None
        relax = False  # the stages' optimum lost every plan to the cuts: solve them again
        over = False  # the model scored a plan above its true score: its bounds do not hold
        wrong = False  # a plan scored below a round's bound: the solver proved a wrong one
        lower = -math.inf  # the best lower bound so far (planes only add: it only rises)
        seen: set[frozenset] = set()
        stalled = 0
        boost = 1.0  # grows when a round's cap ends it before any solution
        while rounds < MAX_ROUNDS:
            rounds += 1
            # a round need not be proven: its incumbent places the next planes, its dual bound
            # (of a relaxation) bounds the least score from below; only the bound must meet.
            # With the spread bound a round is a whole solve from presolve (seconds on large
            # groups): a short cap would end it before its root, so none has a cap
            cap = None if spread else round_cap(rounds) * boost
            res = run(cap)
            if not res.has_solution:
                remaining = left()
                if (
                    res.status is Status.TIME_LIMIT
                    and cap is not None
                    and (remaining is None or remaining > cap)
                ):
                    boost *= 4  # the round's cap, not the deadline, stopped it: a longer one
                    continue
                if res.status is Status.TIME_LIMIT and best is not None:
                    status = Status.FEASIBLE
                    notes.append("time limit during the score rounds")
                elif res.status is Status.INFEASIBLE and best is None and cuts:
                    relax = True  # every plan at the stages' values was cut off
                else:
                    status = res.status
                break
            raised = (
                res.bound is not None
                and math.isfinite(res.bound)
                and res.bound
                > lower + SCORE_GAP * max(abs(lower) if math.isfinite(lower) else 1.0, 1.0)
            )
            if res.bound is not None and math.isfinite(res.bound):
                lower = max(lower, res.bound)
            plan = _expand(members, form.solution(m, problem))
            key = frozenset(plan.items())
            if raised or key not in seen:
                stalled = 0
            elif res.status is Status.OPTIMAL:
                stalled += 1  # solved to the end and no new plan, no higher bound
            else:
                boost *= 2  # the cap cut the round short of a new plan: a longer one
            seen.add(key)
            if stalled >= STALLED_ROUNDS and best is not None:
                # two new drbd instances on one pair reserve their sum there, which the
                # model (one per pair where not told) scores low: sum those exactly, again
                retry = _summed_again(m, problem)
                if retry is not None:
                    notes.append(SUMMED_PAIRS)
                    break
                status = Status.FEASIBLE
                notes.append("the planes stalled: the gap is score outside the model")
                break
            score, bad = verdict(plan)
            if bad:
                # two new drbd instances on one pair: sum their reserve exactly, start again
                retry = _summed_again(m, problem)
                if retry is not None:
                    notes.append(SUMMED_PAIRS)
                    break
                if judge is None:
                    raise CheckFailedError(f"joint plan fails the checker: {'; '.join(bad[:3])}")
                cuts += 1
                cut_off.append(_held(kind_of, plan, set(state.nodes)))
                session.add_bound(*form.not_all_of(m, cut_off[-1]))
                continue
            if capacity_check is not None:
                breaks = capacity_check(state, plan)
                if breaks:
                    cuts += 1
                    core = _breaking_core(state, plan, capacity_check, set(breaks))
                    cut_off.append(_held(kind_of, core, set(breaks)))
                    session.add_bound(*form.not_all_of(m, cut_off[-1]))
                    continue
            tolerance = SCORE_GAP * max(abs(score), 1.0)
            if res.objective is not None and res.objective > score + tolerance:
                # every row lies under the true score at a whole plan: one above it is a term
                # the model gets wrong, and no bound of it holds (it stays in the notes). A
                # solve the time limit ended may return a plan with its spreads above their
                # least, though: the model's least score of the plan decides
                least = _solve_at(session, m, problem, plan, members, left())
                over = over or least.status is not Status.OPTIMAL or least.objective is None
                over = over or least.objective > score + tolerance
            if best is None or score < best[0] - 1e-12:
                best = (score, plan)
            wrong = wrong or undercut(lower, best[0])
            bound = lower if math.isfinite(lower) and not (over or wrong) else None
            if bound is not None and best[0] - bound <= SCORE_GAP * max(abs(best[0]), 1.0):
                status = Status.OPTIMAL if proven else Status.FEASIBLE
                break
            values, rem = form.point(m, problem)
            for row in form.tangent_rows(m, problem, values, rem):
                session.add_bound(*row)
            landed = values_at(problem, _by_kind(plan, kind_of)) if spread else None
            if landed is not None:  # the node rows exact where this plan lands
                for row in form.spread_rows_at(m, bounds, landed):
                    session.add_bound(*row)
            # the next round starts from this plan lifted onto its true spreads: an incumbent
            # at its true score, which HiGHS prunes by from the first node (unlifted, the new
            # rows cut it off and the round starts with none)
            _lift(m, problem, (values, rem), bounds, landed)
            if deadline is not None and time.perf_counter() >= deadline:
                status = Status.FEASIBLE
                notes.append("time limit during the score rounds")
                break
        else:
            status = Status.FEASIBLE
            notes.append(f"stopped after {MAX_ROUNDS} rounds of planes")
        bound = lower if math.isfinite(lower) and not (over or wrong) else None
        if over:
            notes.append(OVERSCORED)
        if wrong:
            notes.append(UNDERCUT)
        if over or wrong:
            status = Status.FEASIBLE if status is Status.OPTIMAL else status
    finally:
        session.close()
    if relax and (deadline is None or time.perf_counter() < deadline):
        # the judge or the capacity check refused every plan the model had at the optimum of
        # the stages before the score: the stages again, without those plans (each time a
        # stage's optimum falls, so this ends)
        notes.append(RELAXED)
        retry = (problem.batch.shared_pairs,)
    elif relax:
        # no time to solve the stages again: no plan, and the bound was of the plans refused
        notes.append(RELAX_TIMED_OUT)
        status, bound = Status.TIME_LIMIT, None
    if retry is not None:
        again = replace(problem, batch=replace(problem.batch, shared_pairs=retry[0]))
        result = place_jointly(
            state,
            again,
            demands,
            members,
            group=group,
            options=options.within(left()),
            start=start if best is None else best[1],
            capacity_check=capacity_check,
            judge=judge,
            refused=cut_off,
        )
        return replace(
            result,
            build_s=result.build_s + sw.seconds,
            solve_s=result.solve_s + solve_s,
            notes=(*notes, *result.notes),
        )
    if best is None:
        return JointPlan({}, 0, None, bound, str(status), rounds, sw.seconds, solve_s, cuts)
    score, plan = best
    if bound is not None and math.isfinite(bound):
        bound = min(bound, score)
    return JointPlan(
        plan,
        len(plan),
        score,
        bound,
        str(status),
        rounds,
        sw.seconds,
        solve_s,
        cuts,
        tuple(notes),
    )


#: Seconds per placement variable that must be left, once the model is built, for the spread
#: bound's first solve: on a 200-node evacuation of 40 (10,000 placement variables) its root
#: LP ends 12-16 s later (the copy into HiGHS 2.4 s, the start 0.3 s, presolve 3 s, LP 6-10
#: s; docs/placement.md), and plans better than the start came with 30 s. With less time the
#: score is bounded by tangent planes only, whose rounds give a bound from the first second.
SPREAD_SECONDS_PER_VARIABLE = 0.002


#: Seconds per placement variable that building the joint model takes (2 s for 10,000).
BUILD_SECONDS_PER_VARIABLE = 0.0002


#: The least time per placement variable the joint model must have, once the descent is done,
#: to be worth building: its build and the copy into HiGHS (about as long). With less it ends
#: before its first solve: a 200-node evacuation of 40 at `--time-limit 3` built it and
#: answered after 4.3 s, with the start and no bound.
MODEL_SECONDS_PER_VARIABLE = 2 * BUILD_SECONDS_PER_VARIABLE


def spread_seconds(variables: int) -> float:
    """Seconds a joint model of this many placement variables needs from its start for the
    spread bound: its build, then its first solve."""
    return (BUILD_SECONDS_PER_VARIABLE + SPREAD_SECONDS_PER_VARIABLE) * variables


#: The copy of a built joint model into HiGHS (`set_instance`) against its build: 8.7 s
#: after a 6.9 s build on a 50-instance batch on 200 nodes (load 20); a model built with less
#: than this many build times left before the deadline is not solved.
HANDOVER_FACTOR = 1.5


def _model_seconds(problem: PlacementProblem) -> float:
    """The least time the joint model needs before its first solve: its build and its copy
    into HiGHS (`MODEL_SECONDS_PER_VARIABLE`)."""
    return MODEL_SECONDS_PER_VARIABLE * _variables(problem)


def _without_model(
    start: Plan | None,
    start_score: float | None,
    start_bad: Sequence[str],
    notes: Sequence[str],
    build_s: float,
) -> JointPlan:
    """The answer when the time left is too short for the model: the known plan (checked,
    its groups N+1 redundant) if it is valid, else no plan; no bound either way."""
    notes = (*notes, NO_TIME_FOR_MODEL)
    if start and not start_bad:
        return JointPlan(dict(start), len(start), start_score, None, str(Status.FEASIBLE),
                         0, build_s, 0.0, notes=notes)  # fmt: skip
    return JointPlan({}, 0, None, None, str(Status.TIME_LIMIT), 0, build_s, 0.0, notes=notes)


def _variables(problem: PlacementProblem) -> int:
    """The joint model's placement variables (a primary or secondary candidate per kind)."""
    return sum(len(i.primaries) + len(i.secondaries) for i in problem.batch.instances)


def _spread_in_time(problem: PlacementProblem, seconds_left: float | None) -> bool:
    """Whether the spread bound's first solve fits in the time left."""
    if seconds_left is None:
        return True
    return seconds_left >= SPREAD_SECONDS_PER_VARIABLE * _variables(problem)


def _complete(
    session: Any,
    m: Any,
    problem: PlacementProblem,
    plan: Plan,
    members: Mapping[str, list[str]],
    kind_of: Mapping[str, str],
    bounds: Sequence[SpreadBound],
    time_limit: float | None,
) -> float:
    """Load a known plan as a complete solution of the model, from which the session's next
    solve starts: the placements as given, the other variables by a solve with the
    placements fixed, the spreads lifted onto the sd so that every tangent plane holds (and
    the spread bound's pieces with them). Returns the seconds it took."""
    res = _solve_at(session, m, problem, plan, members, time_limit)
    if res.has_solution:
        landed = values_at(problem, _by_kind(plan, kind_of)) if bounds else None
        _lift(m, problem, form.point(m, problem), bounds, landed)
    return res.solve_s


def _solve_at(
    session: Any,
    m: Any,
    problem: PlacementProblem,
    plan: Plan,
    members: Mapping[str, list[str]],
    time_limit: float | None,
) -> Any:
    """The model's least score with `plan`'s placements fixed (every other variable free);
    the solution is the session's next start."""
    form.load_plan(m, problem, plan, members)
    session.set_objective(m.score, "min")
    limit = COMPLETE_SECONDS if time_limit is None else min(COMPLETE_SECONDS, time_limit)
    return session.solve_with_fixed([*m.x.values(), *m.y.values()], time_limit=limit)


def _breaking_core(
    state: ClusterState,
    plan: Plan,
    capacity_check: Callable[[ClusterState, Plan], Sequence[str] | None],
    group: set[str],
) -> Plan:
    """A part of `plan` on the group it leaves non-redundant that breaks it alone, every
    placement in it needed. Adding load never restores redundancy, so every plan holding the
    part breaks the group too: its cut removes them all at once (the whole plan's removes one;
    a generated multi-allocate cut 135 plans one at a time until its 20 s were up)."""
    core = {n: t for n, t in plan.items() if t[0] in group or t[1] in group}
    for name in list(core):
        trial = {n: t for n, t in core.items() if n != name}
        if trial and capacity_check(state, trial):
            core = trial
    return core


def _outside(problem: PlacementProblem, plan: Plan, kind_of: Mapping[str, str]) -> list[str]:
    """The placements of `plan` that are not the model's: an instance it does not place, or
    a node not among the instance's candidates."""
    bad = []
    for name, (p, s) in plan.items():
        kind = problem.batch.instance.get(kind_of.get(name, ""))
        if kind is None or p not in kind.primaries or (s is not None and s not in kind.secondaries):
            bad.append(f"{name} on {p}{'/' + s if s else ''}: not among the model's candidates")
    return bad


def _lift(
    m: Any,
    problem: PlacementProblem,
    at: tuple[list[list[float]], list[float]],
    bounds: Sequence[SpreadBound],
    landed: Mapping[str, Sequence[float]] | None,
) -> None:
    """The loaded plan lifted onto its true spreads, on or above every row present or later:
    σ at the loaded point `at`, and with the spread bound its node squares and pieces at the
    plan's node values `landed`."""
    form.lift_spread(m, at)
    if bounds and landed is not None:
        form.load_spread(m, problem, bounds, landed)


SUMMED_PAIRS = "summed the reserve of shared drbd pairs exactly"
RELAXED = "every plan at the stages' optimum refused: the stages solved again without them"
RELAX_TIMED_OUT = "every plan at the stages' optimum refused, and no time to solve them again"
#: Too little time left for the joint model to give a bound (`MODEL_SECONDS_PER_VARIABLE`):
#: the start (hail's plan or the narrow walk's, improved by the search) is the answer.
NO_TIME_FOR_MODEL = "no bound: no time left to build the joint model"
OVERSCORED = "no bound: the model scored a plan above its true score"
#: A checked plan scored below a bound the solver proved: no bound of that solve holds. HiGHS
#: 1.12 has proved bounds above plans of these models three times (docs/placement.md, "A third
#: wrong bound"); a proof rests on the solver's dual bound, which nothing here recomputes, but a
#: plan below it shows it wrong.
UNDERCUT = "no bound: a checked plan scored below the solver's bound"


def undercut(bound: float | None, score: float | None) -> bool:
    """Whether a checked plan's `score` is below `bound` (beyond the proof's tolerance)."""
    if bound is None or score is None:
        return False
    return score < bound - SCORE_GAP * max(abs(score), 1.0)


def with_plan(joint: JointPlan, plan: Plan, score: float) -> JointPlan:
    """`joint` answered with another checked plan placing as many (hail's, the search's):
    the bound stands for it, unless the plan undercuts it."""
    joint = replace(joint, placements=plan, placed=len(plan), score=score)
    if not undercut(joint.bound, score):
        return joint
    status = str(Status.FEASIBLE) if joint.status == str(Status.OPTIMAL) else joint.status
    return replace(joint, bound=None, status=status, notes=(*joint.notes, UNDERCUT))


def _summed_again(m: Any, problem: PlacementProblem) -> tuple[frozenset | None] | None:
    """The pairs to sum exactly in a new solve (None: every pair), when the loaded solution
    puts two new drbd instances on a (primary, secondary) pair the model does not sum: their
    reserve there is the sum, which the model (one per pair) scores and checks low."""
    shared = batch_form.shared_pairs_used(m)
    modelled = problem.batch.shared_pairs
    if modelled is None or not shared - modelled:
        return None
    pairs = shared | modelled
    return (None if len(pairs) > MAX_SHARED_PAIRS else pairs,)


def _later_stages(problem: PlacementProblem, plan: Plan, kind_of: Mapping[str, str]) -> dict:
    """A plan's value in the stages between `placed` and the score: its instances on
    last-resort groups, and those placed back where they are (model.batch `stay`)."""
    batch = problem.batch
    return {
        "on_last_resort": sum(1 for p, _ in plan.values() if p in batch.last_resort),
        "stayed": sum(
            1
            for name, to in plan.items()
            if name in kind_of and to == batch.instance[kind_of[name]].stay
        ),
    }


def _by_kind(plan: Plan, kind_of: Mapping[str, str]) -> list[tuple[str, str, str | None]]:
    """A plan's placements as (kind, primary, secondary), as model.spread reads them."""
    return [(kind_of[name], p, s) for name, (p, s) in plan.items()]


#: Time for improving the start by single moves (solvers/strategies/descent.py): at most this
#: share of the time limit, and at most these seconds.
DESCENT_SHARE = 0.1
DESCENT_SECONDS = 3.0

#: Seconds for completing a known plan into a solution (the placements fixed: presolve
#: removes most of the model).
COMPLETE_SECONDS = 5.0


def _held(
    kind_of: Mapping[str, str], plan: Plan, group_nodes: set[str]
) -> list[tuple[str, str, str]]:
    """The plan's placements on `group_nodes` as (kind, node, role) (each kind has one member
    when a capacity check is on)."""
    held = []
    for name, (p, s) in plan.items():
        if p in group_nodes:
            held.append((kind_of[name], p, "p"))
        if s is not None and s in group_nodes:
            held.append((kind_of[name], s, "s"))
    return held
