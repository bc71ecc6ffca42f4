"""`exalloc balance` solved: the least group score within K of hbal's steps, or the fewest
steps to a target score (docs/balance.md, formulations/balance.py).

1. hbal's own answer (the port, model/htools/) is the start: its steps are replayed by the
   checker and it is the answer to beat; its final state gets tangent planes first.
2. Rounds: solve the model; read each instance's final; find an order of the fewest-step
   paths in which every step passes hbal's checks (`model.balance.order_steps`); a set of
   finals with no order is cut off and the model solved again; an (x,y) final whose pair the
   reserve does not sum exactly is summed and the model built again; otherwise the checker
   replays the steps (`model.check.check_balance`) and scores the result, planes are added
   at that state, and the round's dual bound is a lower bound of the least score (each
   round's model is a relaxation).
3. Stop when the best true score meets the bound (`optimal`), or at the time limit
   (`feasible`, with the bound and gap). Build and solve times are kept apart.

Every answer returned passed `check_balance`; its score is the checker's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from formulations import balance as form
from formulations import balance_lean as lean
from formulations.deadline import OutOfTime
from model.balance import (
    BalanceData,
    BalanceProblem,
    DataOutOfTime,
    OrderOutOfTime,
    Step,
    _sd_values,
    balance_data,
    locality_bound,
    order_steps,
)
from model.balance_bound import n1_floor, plane_at, plane_bound, restricted
from model.check import check_balance
from model.errors import CheckFailedError
from model.state import ClusterState
from solvers import Status, Stopwatch
from solvers.highs_arrays import ArraySession
from solvers.lexicographic import open_session
from solvers.options import DEFAULT_OPTIONS, SolverOptions
from solvers.strategies.balance_enumerate import exhaustive

#: Seconds per model variable to build the model and copy it into HiGHS (measured on
#: benchmarks/bench_balance.py's 40-node groups at a load average of 11-14: 65,864 variables
#: built in 17.7 s and copied in 43 s; 18,368 built in 4.2 s and copied in 10-14 s), and the
#: share of the time limit the build may take
MODEL_SECONDS_PER_VARIABLE = 8e-4
MODEL_SHARE = 0.5
#: Seconds HiGHS must be left after the full model's estimated build and copy, or the model
#: is not built (its first solve completes hbal's plan, the next ones bound it)
MODEL_SOLVE_S = 2.0
#: The copy of a built model into HiGHS (Pyomo's persistent interface, at the first solve),
#: in multiples of the Pyomo build's time: 43 s after a 17.7 s build on a 40-node group
#: (65,864 variables, benchmarks/bench_balance.py seed 0, load average about 11)
HIGHS_LOAD_PER_BUILD = 2.0
#: Share of the time limit hbal's port may go on beyond K steps, for planes where it ends
MORE_SHARE = 0.1
#: Share of the time limit hbal's port may take in all: the steps it found by then are the
#: incumbent (on benchmarks/time_limits.py's 200-node group each step took about 20 s, load 3)
HBAL_SHARE = 0.3
#: hbal's port cut at HBAL_SHARE is resumed after the model when at least RESUME_MIN_S are
#: left before the limit less RESUME_MARGIN_S (the answer's check and output): on
#: benchmarks/bench_balance.py's 40-node groups under `exalloc balance --time-limit 30` at a
#: load of about 5, three of eight runs ended in 14 s, their port cut after 2-4 of 5 steps
#: and no model built (the planes prune nothing from so weak an incumbent)
RESUME_MIN_S = 1.0
RESUME_MARGIN_S = 1.0
#: hbal's port cut at HBAL_SHARE is resumed at once, before the model, when the rounds it has
#: left are estimated (from the whole rounds it took) to fit in HBAL_EARLY_SHARE of the limit,
#: and given at most that share: the model's pruning and lean relaxation need the whole
#: incumbent. On the eight 40-node groups of benchmarks/bench_balance.py under `exalloc
#: balance -l 5 --time-limit 30` at a load of 4.3-5.6 the port was cut after 3-4 of 5 steps
#: on seven; from those weak incumbents the planes left 100,000+ finals on three, no lean
#: relaxation or model was built, and five runs ended above 1 % in 14-20 s (the late resume
#: then found hbal's steps in 0.7-1.9 s, but the bound was the weak incumbent's)
HBAL_EARLY_SHARE = 0.2
#: Seconds that must be left after the late resume improved the incumbent for the model to run
#: again from it (the data and the planes take 2-5 s on a 40-node group, loaded): under
#: `exalloc balance -l 5 --time-limit 30` at a load of about 6 the port was cut after 1-3
#: steps, no early resume fitted, the late resume found hbal's 5 steps and 9-11 s were left
RERUN_MIN_S = 5.0
#: relative gap at which the score counts as proven (the score is a float sum of 20 terms)
SCORE_GAP = 1e-6
#: The lean relaxation (formulations/balance_lean.py): its share of the time when the full
#: model is built after it (which proves small groups optimal), its LP rounds at most, the
#: least relative rise of the bound that keeps them going, its MIP rounds at most, and a MIP
#: round's limit without a time limit
LEAN_SHARE = 0.25
LEAN_LP_ROUNDS = 150
LEAN_RISE = 1e-7
LEAN_MIP_ROUNDS = 30
LEAN_MIP_S = 20.0
#: Seconds of its share below which the lean relaxation is not built (its build and first LP
#: take longer than that on all but tiny groups)
LEAN_MIN_S = 0.5
#: Finals left above which the lean relaxation is not built: on the 200-node group of
#: benchmarks/bench_balance.py (K = 10) the planes prune none of 23 million, the lean model's
#: 799,469 columns took 90 s to build and its first LP did not end in 30 s (load 9)
LEAN_MAX_FINALS = 100_000
#: Share of the lean phase one MIP round may take (a round that does not finish must leave
#: time for the plans and planes of the next ones: a 291-column MIP on a 6-node group ran its
#: whole 11 s without closing its gap)
LEAN_MIP_SHARE = 0.3
#: Columns above which the lean MIP is not solved: on benchmarks/bench_balance.py's 40-node
#: seed 1 (11,587 columns) HiGHS ran 45.6 s past a 14.8 s limit without a bound or a plan
LEAN_MIP_COLUMNS = 4000
#: Binary columns a lean MIP may keep when its reduced costs prove that the columns closed
#: cannot end a plan below the incumbent (its bound is then the least score's), and the share
#: of the lean phase's time left its first round may take: on benchmarks/bench_balance.py's
#: 40-node, --fill 0.19 seed 1, 5,437 of 18,674 columns were left, whose MIP raised the
#: bound from 13.467694 to 13.480215 in 19 s (load about 6)
LEAN_PRICED_COLUMNS = 6000
LEAN_PRICED_SHARE = 0.7
#: Relative tolerance of the reduced costs' proof that a column cannot end a better plan
#: (HiGHS's dual feasibility tolerance is 1e-7)
PRICE_TOL = 1e-6
MAX_ROUNDS = 500


@dataclass(frozen=True)
class BalanceAnswer:
    """The steps found and what is proven about them."""

    steps: tuple[Step, ...]
    score_before: float
    score: float  # the checker's, after the steps
    scores: tuple[float, ...]  # after each step
    bound: float | None  # lower bound of the objective (score, or steps with fewest)
    status: str
    rounds: int = 0
    build_s: float = 0.0
    solve_s: float = 0.0
    cuts: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)
    objective: str = "score"  # or "steps" (--fewest-moves)
    # where the answer's time went (`answer`: hbal's port, the exact search, the port resumed
    # after it), in --json's timing, so that a run past its limit says which stage overran
    stages_s: tuple[tuple[str, float], ...] = ()

    @property
    def value(self) -> float:
        return float(len(self.steps)) if self.objective == "steps" else self.score

    @property
    def gap(self) -> float | None:
        if self.bound is None:
            return None
        return max(0.0, self.value - self.bound) / max(abs(self.value), 1.0)


def _point(state: ClusterState, data: BalanceData) -> tuple[list[list[float]], list[float]]:
    """Each spread metric's node values and p_rem at a state (where the planes touch)."""
    rows = [_sd_values(state.nodes[n.name]) for n in data.nodes]
    values = [list(col) for col in zip(*rows, strict=True)] if rows else []
    rem = [state.nodes[n.name].p_rem for n in data.nodes]
    return values, rem


def _replayed(problem: BalanceProblem, steps: Sequence[Step]) -> ClusterState:
    state = problem.state
    for st in steps:
        after = state.move(st.instance, st.kind, st.target, force=problem.rules.ignore_soft_errors)
        assert not isinstance(after, str), "checked before"
        state = after  # type: ignore[assignment]
    return state


def _checked(problem: BalanceProblem, steps: Sequence[Step]) -> tuple[float, tuple[float, ...]]:
    report = check_balance(problem, steps)
    if report.violations:
        raise CheckFailedError(
            "balance: the steps fail the checker: " + "; ".join(str(v) for v in report.violations)
        )
    return report.objectives["score"], report.objectives["scores"]


def balance(
    problem: BalanceProblem,
    start: Sequence[Step] = (),
    *,
    options: SolverOptions = DEFAULT_OPTIONS,
    fewest_to: float | None = None,
    extra_points: Sequence[ClusterState] = (),
) -> BalanceAnswer:
    """The least score within `problem.max_steps` steps (or, with `fewest_to`, the fewest
    steps reaching a score no worse than it), never worse than `start` (hbal's steps)."""
    began = time.perf_counter()
    deadline = None if options.time_limit is None else began + options.time_limit
    start = tuple(start)
    before = check_balance(problem, ()).objectives["score"]
    best_steps: tuple[Step, ...] = ()
    best_score, best_scores = before, ()
    if start:
        best_score, best_scores = _checked(problem, start)
        best_steps = start
    objective = "score" if fewest_to is None else "steps"
    if fewest_to is not None and not start and before > fewest_to + 1e-12:
        best_steps, best_score = (), before  # no known plan reaches the target yet
    reached = fewest_to is None or best_score <= fewest_to + 1e-12

    def answer(status: str, bound: float | None, **kw: object) -> BalanceAnswer:
        return BalanceAnswer(best_steps, before, best_score, tuple(best_scores), bound, status,
                             objective=objective, **kw)  # type: ignore[arg-type]  # fmt: skip

    # the score mode's bound without a model: all but 3K nodes keep their components
    floor = locality_bound(problem) if fewest_to is None else None

    def proven_by(lower: float | None) -> str:
        if lower is None or best_score - lower > SCORE_GAP * max(abs(best_score), 1):
            return str(Status.FEASIBLE)
        return str(Status.OPTIMAL)

    def cut_short(lower: float | None) -> str:
        """The status when the time limit stopped a stage before the model ran: "time_limit"
        (the best checked plan so far, the bound so far), as `exalloc space` says it."""
        proven = proven_by(lower)
        return proven if proven == str(Status.OPTIMAL) else str(Status.TIME_LIMIT)

    stopped: DataOutOfTime | None = None
    with Stopwatch() as sw:
        try:
            data = balance_data(problem, deadline)
        except DataOutOfTime as stop:
            stopped = stop
    if stopped is not None:
        return answer(cut_short(floor), floor, build_s=sw.seconds,
                      notes=(f"time limit: {stopped}; no model, the incumbent stands with "
                             "the locality bound",))  # fmt: skip
    if data.unmodelled:
        # the model would not score the group exactly: every placement K of hbal's steps
        # away, when there are few enough (K = 1 is hbal's own first round)
        began_e = time.perf_counter()
        depth = problem.max_steps
        if fewest_to is not None and reached:
            depth = max(len(best_steps) - 1, 0)  # is there a shorter one?
        steps_e, score_e, scores_e, tried, complete = exhaustive(
            problem, depth, deadline, fewest_to
        )
        spent = time.perf_counter() - began_e
        if fewest_to is None:
            take = score_e < best_score - 1e-12
        else:
            take = score_e <= fewest_to + 1e-12 and (not reached or len(steps_e) < len(best_steps))
        if take:
            best_steps, best_score, best_scores = steps_e, score_e, scores_e
            reached = True
        what = "the least score" if fewest_to is None else "the fewest steps to the target"
        if not complete:
            timed_out_e = deadline is not None and time.perf_counter() > deadline
            why = (
                f"enumeration of hbal's steps stopped after {tried} steps tried "
                + ("(the time limit)" if timed_out_e else "(too many for its budget)")
                + "; the best plan found stands"
            )
            status = str(Status.TIME_LIMIT) if timed_out_e else proven_by(floor)
            return answer(status, floor if fewest_to is None else None, build_s=sw.seconds,
                          solve_s=spent, notes=(*data.unmodelled, why))  # fmt: skip
        notes_e = [
            *data.unmodelled,
            f"{what} by enumeration: every placement at most {depth} of hbal's steps away "
            f"({tried} steps tried), as the model would not score the group exactly",
        ]
        if not reached:  # every placement within K enumerated: none reaches the target
            notes_e.append("no plan found reaching the target score")
            return answer(str(Status.INFEASIBLE), None, build_s=sw.seconds, solve_s=spent,
                          notes=tuple(notes_e))  # fmt: skip
        bound = best_score if fewest_to is None else float(len(best_steps))
        return answer(str(Status.OPTIMAL), bound, build_s=sw.seconds, solve_s=spent,
                      notes=tuple(notes_e))  # fmt: skip
    if not data.instances or problem.max_steps < 1:
        bound = (best_score if fewest_to is None else float(len(best_steps))) if reached else None
        return answer(str(Status.OPTIMAL), bound, build_s=sw.seconds,
                      notes=("nothing hbal may move",) if not data.instances else ())  # fmt: skip
    # planes at the group now, after each prefix of the start's steps, and where hbal's
    # search goes on to (`extra_points`: a well spread point, whose planes bound the spreads
    # of balanced plans more tightly than the planes now)
    points = [_point(problem.state, data)]
    for k in range(1, len(start) + 1):
        points.append(_point(_replayed(problem, start[:k]), data))
    points += [_point(st, data) for st in extra_points]
    # the planes' knapsack bound, and the finals it proves cannot end a plan below the
    # incumbent (or reaching the target score): the model is built on the rest
    with sw:
        threshold = best_score if fewest_to is None else fewest_to
        planes = [plane_at(*pt) for pt in points]
        proof = plane_bound(data, planes, n1_floor(data), threshold, deadline)
        data = restricted(data, proof.allowed)
    cap = threshold if fewest_to is None and proof.kept < proof.total else None
    if fewest_to is None:
        floor = max(floor or 0.0, proof.bound)
    notes_pre = [
        f"planes: bound {proof.bound:.6f}, {proof.kept} of {proof.total} finals left "
        f"below {threshold:.6f}"
    ]
    if fewest_to is None and proven_by(floor) == str(Status.OPTIMAL):
        return answer(str(Status.OPTIMAL), floor, build_s=sw.seconds, notes=tuple(notes_pre))
    if deadline is not None and time.perf_counter() >= deadline:
        notes_pre.append("time limit: reached after the planes' bound; no model was built")
        return answer(cut_short(floor), floor, build_s=sw.seconds, notes=tuple(notes_pre))
    size = model_size(data)
    fits = deadline is None or size * MODEL_SECONDS_PER_VARIABLE <= MODEL_SHARE * (
        deadline - time.perf_counter()
    )
    lean_s = 0.0
    lean_rounds = 0
    if fewest_to is None:
        # the lean relaxation (formulations/balance_lean.py): its bound, and its plans,
        # ordered and checked; all the time when the full model will not fit
        now = time.perf_counter()
        until = None if deadline is None else now + (LEAN_SHARE if fits else 1.0) * (deadline - now)
        start_plan = {i.name: problem.state.locations[i.name] for i in data.instances}
        if best_steps:
            after = _replayed(problem, best_steps)
            start_plan = {i.name: after.locations[i.name] for i in data.instances}
        if until is not None and until - now < LEAN_MIN_S:
            notes_pre.append(
                f"time limit: lean relaxation not built, {until - now:.1f} s of its share left"
            )
        elif proof.kept > LEAN_MAX_FINALS:
            notes_pre.append(
                f"lean relaxation not built: {proof.kept} finals left, more than "
                f"{LEAN_MAX_FINALS} (its build and first LP would overrun the limit)"
            )
        else:
            lean = _lean_phase(problem, data, planes, points, start_plan, until, cap, best_score)
            lean_s, lean_rounds = lean.solve_s, lean.rounds
            notes_pre.append(lean.note)
            if lean.bound is not None:
                floor = max(floor or 0.0, lean.bound)
            for steps_t, score, scores in lean.plans:
                if score < best_score - 1e-12:
                    best_steps, best_score, best_scores = steps_t, score, scores
        if proven_by(floor) == str(Status.OPTIMAL):
            return answer(str(Status.OPTIMAL), floor, build_s=sw.seconds, solve_s=lean_s,
                          rounds=lean_rounds, notes=tuple(notes_pre))  # fmt: skip
    left_now = None if deadline is None else deadline - time.perf_counter()
    if fits and not model_fits(size, left_now):
        fits = False  # the lean phase took longer than its share: the time left decides
    if not fits:
        why = (
            f"no time for the model: about {size} variables would take about "
            f"{size * MODEL_SECONDS_PER_VARIABLE:.0f} s to build and hand to the solver, more "
            f"than {MODEL_SHARE:.0%} of the time left (or the time left after the lean "
            f"relaxation less {MODEL_SOLVE_S:g} s for the solver); the best plan stands, "
            "with the bound so far"
        )
        return answer(cut_short(floor), floor, build_s=sw.seconds, solve_s=lean_s,
                      rounds=lean_rounds, notes=(*notes_pre, why))  # fmt: skip
    spec = form.BalanceModelSpec(fewest_steps_to=fewest_to)
    rounds, cuts = lean_rounds, 0
    solve_s = lean_s
    bound: float | None = None
    notes: list[str] = notes_pre
    seen: set[tuple] = set()
    timed_out = False

    def left() -> float | None:
        return None if deadline is None else max(deadline - time.perf_counter(), 0.0)

    def target_met(score: float) -> bool:
        return fewest_to is None or score <= fewest_to + 1e-12

    def better(steps: tuple[Step, ...], score: float) -> bool:
        if not target_met(score):
            return False
        if fewest_to is None:
            return score < best_score - 1e-12
        return not reached or len(steps) < len(best_steps)

    def finals_of(steps: Sequence[Step]) -> dict[str, tuple[str, str | None]]:
        after = _replayed(problem, steps)
        return {i.name: after.locations[i.name] for i in data.instances}

    best_plan = finals_of(best_steps) if reached else None
    while rounds < MAX_ROUNDS:
        with sw:
            began_build = time.perf_counter()
            try:
                m = form.build(data, spec, deadline)
            except OutOfTime as stop:
                notes.append(f"time limit: {stop}")
                timed_out = True
                break
            built_s = time.perf_counter() - began_build
        limit = left()
        if not load_fits(built_s, limit):
            # the copy into HiGHS happens at the first solve and no time limit stops it
            notes.append(
                f"no time to load the model: built in {built_s:.1f} s, its copy into the "
                f"solver takes about {HIGHS_LOAD_PER_BUILD:g} times that, more than the "
                f"{limit:.1f} s left less {MODEL_SOLVE_S:g} s for the solver"
            )
            timed_out = True
            break
        with sw:
            session = open_session(
                options.solver, m, options.gap, options.threads, 0, presolve=False
            )
            obj = form.objectives(m, spec)[0]
            session.set_objective(obj.expr, obj.sense)
            for values, rem in points:
                for row in form.tangent_rows(m, values, rem):
                    session.add_bound(*row)
        if hasattr(session, "solve_with_fixed") and best_plan is not None:
            # the best plan known, completed by the solver into the first incumbent
            fixed = form.load_plan(m, data, best_plan)
            res = session.solve_with_fixed(fixed, time_limit=left())
            solve_s += res.solve_s
        rebuild = False
        while rounds < MAX_ROUNDS:
            limit = left()
            if limit is not None and limit <= 0.05:
                timed_out = True
                break
            rounds += 1
            res = session.solve(time_limit=limit, build_s=sw.seconds)
            solve_s += res.solve_s
            # cut by the limit (a solve's FEASIBLE may also be --gap's, with time left)
            after = left()
            timed_out = res.status != Status.OPTIMAL and after is not None and after <= 0.05
            # the model holds only the finals the planes left: below the threshold its
            # bound is the least score's, above it the threshold is
            res_bound = res.bound if cap is None or res.bound is None else min(res.bound, cap)
            if res_bound is not None and (bound is None or res_bound > bound):
                bound = res_bound
            if not res.has_solution:
                if res.status == Status.INFEASIBLE:
                    # nothing the model holds is left: the best known is proven
                    bound = best_score if fewest_to is None else float(len(best_steps))
                    if cap is not None:
                        bound = min(bound, cap)
                break
            opened = form.open_xy(m, data)
            if opened:
                spec = replace(spec, exact_pairs=spec.exact_pairs | frozenset(opened))
                rebuild = True
                break
            finals = form.solution(m, data)
            key = tuple(sorted(finals.items()))
            try:
                steps = order_steps(problem, finals, deadline=deadline)
            except OrderOutOfTime:
                notes.append("time limit: reached ordering the model's plan's steps")
                timed_out = True
                break
            if steps is None:
                cut = tuple(
                    (n, p, s) for n, (p, s) in sorted(finals.items())
                    if (p, s) != problem.state.locations[n][:2]
                )  # fmt: skip
                spec = replace(spec, cuts=(*spec.cuts, cut))
                cuts += 1
                m_cut = sum(form.final_indicator(m, data, *c) for c in cut)
                session.add_bound(m_cut, None, len(cut) - 1)
                continue
            steps_t = tuple(steps)
            score, scores = _checked(problem, steps_t)
            if better(steps_t, score):
                best_steps, best_score, best_scores = steps_t, score, scores
                best_plan = dict(finals)
                reached = True
            value = best_score if fewest_to is None else float(len(best_steps))
            if reached and bound is not None and value - bound <= SCORE_GAP * max(abs(value), 1):
                break
            if key in seen and res.status == Status.OPTIMAL:
                # the planes at this solution are in: it is the relaxation's optimum again
                notes.append("a solution repeated with its planes in (float tolerance)")
                break
            seen.add(key)
            point = _point(_replayed(problem, steps_t), data)
            points.append(point)
            for row in form.tangent_rows(m, *point):
                session.add_bound(*row)
        session.close()
        value = best_score if fewest_to is None else float(len(best_steps))
        done = reached and bound is not None and value - bound <= SCORE_GAP * max(abs(value), 1)
        if not rebuild or done or (left() is not None and left() <= 0.05):
            timed_out = timed_out or (rebuild and not done)  # a rebuild the limit left out
            break
    value = best_score if fewest_to is None else float(len(best_steps))
    if floor is not None and (bound is None or floor > bound):
        bound = floor  # the model's round did not bound it tighter (its root unfinished)
    if cuts:
        notes.append(
            f"{cuts} set(s) of finals cut off: no order of their fewest-step paths passes "
            "hbal's checks (the bound holds among plans whose instances take their fewest steps)"
        )
    proven = reached and bound is not None and value - bound <= SCORE_GAP * max(abs(value), 1)
    status = Status.OPTIMAL if proven else Status.TIME_LIMIT if timed_out else Status.FEASIBLE
    if not reached:  # the steps printed are the start's, which miss the target: no bound on
        # a step count that no plan found has, and no 'feasible' (--target-score below reach)
        notes.append("no plan found reaching the target score")
        status = Status.TIME_LIMIT if timed_out else Status.INFEASIBLE
        bound = None
    return answer(str(status), bound, rounds=rounds, build_s=sw.seconds, solve_s=solve_s,
                  cuts=cuts, notes=tuple(notes))  # fmt: skip


@dataclass(frozen=True)
class LeanOutcome:
    """What the lean relaxation gave: a lower bound (None: none), the plans it found that
    passed the checker (steps, score, scores), its rounds and solve time, and a note."""

    bound: float | None
    plans: tuple[tuple[tuple[Step, ...], float, tuple[float, ...]], ...]
    rounds: int
    solve_s: float
    note: str


def _lean_phase(
    problem: BalanceProblem,
    data: BalanceData,
    planes: Sequence,
    points: Sequence,
    start_plan: dict,
    until: float | None,
    cap: float | None,
    incumbent: float | None = None,
) -> LeanOutcome:
    """Kelley's cutting planes on the lean relaxation: its LP solved again with the spreads'
    tangents at each solution until the bound stops rising, then its MIP (from the start
    plan), each solution ordered and checked, planes added at the state it reaches, a set of
    finals with no order cut off. Every bound is the relaxation's, capped at `cap` (the
    pruning threshold: the model holds only the finals left below it)."""
    began = time.perf_counter()
    budget = 0.0 if until is None else until - began

    def left() -> float | None:
        return None if until is None else until - time.perf_counter()

    def capped(b: float | None) -> float | None:
        return b if b is None or cap is None else min(b, cap)

    model = lean.build(data, planes, n1_floor(data))
    session = ArraySession(model.model)
    for values, _ in points:
        session.add_rows(lean.plane_rows(model, values))
    session.add_rows(lean.reserve_rows(model, planes))
    bound: float | None = None
    rounds = lp_rounds = 0
    solve_s = 0.0
    last_x = None  # the last LP's solution and value, while no rows were added after it
    last_z = None
    while lp_rounds < LEAN_LP_ROUNDS and (left() is None or left() > 0.05):
        res = session.solve(integral=False, time_limit=left())
        rounds += 1
        lp_rounds += 1
        solve_s += res.solve_s
        if res.status != Status.OPTIMAL or res.x is None:
            break
        rising = bound is None or res.bound > bound + LEAN_RISE * max(abs(bound), 1.0)
        bound = res.bound if bound is None else max(bound, res.bound)
        last_x, last_z = res.x, res.bound
        if not rising:
            break
        last_x = None
        session.add_rows(lean.plane_rows(model, lean.point_of(model, res.x)))
        at = plane_at(lean.point_of(model, res.x), lean.rem_of(model, res.x))
        session.add_rows(lean.reserve_rows(model, [at]))
    plans = []
    seen: set[tuple] = set()
    mip_rounds = 0
    columns = len(model.model.integer)
    mip = len(model.model.cost) <= LEAN_MIP_COLUMNS
    priced = ""
    # the MIP's bound is the relaxation's only when no column was closed by a guess
    exact = True
    closed_any = False
    if not mip and bound is not None and (left() is None or left() > 0.05):
        if last_x is None or session.reduced_costs() is None:
            res = session.solve(integral=False, time_limit=left())  # the duals at the rows in
            rounds += 1
            solve_s += res.solve_s
            last_x, last_z = (res.x, res.bound) if res.status == Status.OPTIMAL else (None, None)
        reduced = session.reduced_costs()
        if last_x is not None and reduced is not None and last_z is not None:
            closed, exact = _priced_out(model, last_x, reduced, last_z, incumbent, start_plan)
            session.close_columns(closed)
            mip = closed_any = True
            priced = (
                f"; its MIP on {columns - len(closed)} of {columns} binary columns ("
                + ("the rest cannot end below the incumbent: reduced costs"
                   if exact else "the LP's and the lowest reduced costs: no bound") + ")"
            )  # fmt: skip
    session.set_start(*lean.start_of(model, start_plan))
    ordering = ""
    while mip and mip_rounds < LEAN_MIP_ROUNDS and (left() is None or left() > 0.05):
        rest = left()
        share = LEAN_MIP_SHARE * budget
        if closed_any and exact and mip_rounds == 0:
            share = LEAN_PRICED_SHARE * rest if rest is not None else share
        limit = LEAN_MIP_S if rest is None else min(rest, max(1.0, share))
        res = session.solve(integral=True, time_limit=limit)
        rounds += 1
        mip_rounds += 1
        solve_s += res.solve_s
        if res.bound is not None and exact:
            # with columns closed by their reduced costs the MIP bounds the plans below the
            # incumbent only: the least score is at least the lesser of the two
            at_least = res.bound
            if incumbent is not None and closed_any:
                at_least = min(at_least, incumbent)
            bound = at_least if bound is None else max(bound, at_least)
        if res.x is None:
            if res.status == Status.INFEASIBLE and exact and closed_any and incumbent is not None:
                bound = incumbent if bound is None else max(bound, incumbent)  # none below it
            break
        finals = lean.finals_of(model, data, res.x)
        moved = [j for j, fin in finals.items() if fin != problem.state.locations[j][:2]]
        key = tuple(sorted((j, finals[j]) for j in moved))
        if key in seen:
            break  # its planes are in: the relaxation's optimum again
        seen.add(key)
        session.set_start(*lean.start_of(model, finals))
        try:
            steps = order_steps(problem, finals, deadline=until)
        except OrderOutOfTime:
            ordering = "; its share ran out ordering a plan's steps"
            break
        if steps is None:
            session.add_rows(lean.nogood_row(model, data, finals, moved))
            continue
        steps_t = tuple(steps)
        score, scores = _checked(problem, steps_t)
        plans.append((steps_t, score, scores))
        values, rem = _point(_replayed(problem, steps_t), data)
        session.add_rows(lean.plane_rows(model, values))
        session.add_rows(lean.reserve_rows(model, [plane_at(values, rem)]))
        best = min(p[1] for p in plans)
        if (
            res.status == Status.OPTIMAL
            and exact
            and bound is not None
            and best - bound <= SCORE_GAP * max(abs(best), 1)
        ):
            break
    bound = capped(bound)
    note = (
        f"lean relaxation: bound {'-' if bound is None else f'{bound:.6f}'} after {lp_rounds} "
        f"LP and {mip_rounds} MIP round(s){'' if mip else ' (too large for the MIP)'}{priced}, "
        f"{len(model.model.cost)} columns, "
        f"{time.perf_counter() - began:.1f} s{ordering}"
    )
    return LeanOutcome(bound, tuple(plans), rounds, solve_s, note)


def _priced_out(
    model: lean.LeanModel,
    x: np.ndarray,
    reduced: np.ndarray,
    lp_value: float,
    incumbent: float | None,
    start_plan: dict,
) -> tuple[np.ndarray, bool]:
    """The binary columns a lean MIP too large to solve whole leaves closed, and whether the
    closing is proven (True) or a guess (False).

    Proven: at the LP's optimum (value z, reduced costs d ≥ 0 at the columns at 0), every
    whole plan with column j at 1 has a relaxed score of at least z + d_j, so a column with
    z + d_j above the incumbent's score never ends a better plan: the MIP over the rest
    bounds every plan below the incumbent. When more than LEAN_PRICED_COLUMNS are left so, the
    guess keeps the LP's support, the start plan's columns and the lowest reduced costs (the
    columns an improving plan most likely uses; its MIP then gives plans, never a bound)."""
    integer = model.model.integer
    d = reduced[integer]
    support = x[integer] > 1e-9
    if incumbent is not None:
        tol = PRICE_TOL * max(abs(incumbent), 1.0)
        out = ~support & (lp_value + d > incumbent + tol)
        if len(integer) - int(out.sum()) <= LEAN_PRICED_COLUMNS:
            return integer[out], True
    _, start = lean.start_of(model, start_plan)
    keep = support | (start > 0.5)
    room = max(LEAN_MIP_COLUMNS - int(keep.sum()), 0)
    order = np.argsort(np.where(keep, np.inf, d), kind="stable")
    keep[order[:room]] = True
    return integer[~keep], False


def model_fits(size: int, left: float | None) -> bool:
    """Whether the full model of about `size` variables may be built with `left` seconds to
    go (None: no limit): its estimated build and copy into HiGHS must leave HiGHS
    MODEL_SOLVE_S. Neither the Pyomo build's last family nor the copy can be interrupted, so
    a model that would not fit is not started (the lean relaxation's bound and plans stand)."""
    return left is None or size * MODEL_SECONDS_PER_VARIABLE + MODEL_SOLVE_S <= left


def load_fits(built_s: float, left: float | None) -> bool:
    """Whether a model built in `built_s` seconds may be copied into HiGHS with `left`
    seconds to go: the copy (at the first solve, no time limit stops it) takes about
    HIGHS_LOAD_PER_BUILD times the build, measured on the same machine at the same load,
    and must leave HiGHS MODEL_SOLVE_S."""
    return left is None or HIGHS_LOAD_PER_BUILD * built_s + MODEL_SOLVE_S <= left


def model_size(data: BalanceData) -> int:
    """About how many variables formulations/balance.py makes: per instance four per
    candidate node and role (the one-step classes, the (x,y) nodes, X and Y), per node the
    spreads' values, the reserve's choices and the N+1 flags."""
    per_instance = sum(
        4 * (len(i.primaries) + len(i.secondaries)) + 4
        if i.allowed is None
        else 3 * sum(len(v) for v in i.allowed.values()) + 6
        for i in data.instances
    )
    n = len(data.nodes)
    return per_instance + n * (n + 20)


@dataclass(frozen=True)
class HbalStart:
    """hbal's port's answer (`steps`), the steps its search took after those (`further`,
    a prefix of which is `steps`), and whether the time limit stopped it (`cut`: a round was
    left unfinished, `steps` are the rounds done before it)."""

    steps: tuple[Step, ...]
    further: tuple[Step, ...]
    cut: bool = False
    partial: str = ""  # when the round cut short gave the last step: how
    #: when cut: hbal's search continued from its last whole round (its moves' results kept)
    #: until a perf_counter time, at most `max_rounds` steps in all: the steps it reaches,
    #: and whether its search ended (no round cut). A later call goes on from the last whole
    #: round the earlier one reached
    resume: Callable[[float | None], tuple[tuple[Step, ...], bool]] | None = None
    #: seconds each whole round took (the first holds the search's set-up)
    round_s: tuple[float, ...] = ()

    def rounds_left_s(self, max_rounds: int) -> float | None:
        """The seconds the port's rounds left to `max_rounds` steps should take, from the
        rounds it took (those after the first, which is the dearest, when there are some);
        None when no round was whole."""
        if not self.round_s:
            return None
        later = self.round_s[1:] or self.round_s
        return max(max_rounds - len(self.round_s), 0) * sum(later) / len(later)


def hbal_start(
    problem: BalanceProblem,
    max_rounds: int,
    *,
    more_until: float | None = None,
    until: float | None = None,
) -> HbalStart:
    """hbal's own answer (its port, model/htools/hbal.py, with hbal's min-gain rules): at most
    `max_rounds` steps (negative: as many as hbal takes), and, until the perf_counter time
    `more_until`, the steps hbal would take after those (hbal's rounds do not depend on -l:
    its first K steps are `hbal -l K`'s answer). At the perf_counter time `until` the round
    under way is abandoned: a round of 200 nodes takes about 20 s (benchmarks/time_limits.py),
    so the port alone would overrun a 10 s limit by 90 s."""
    from model.htools.hbal import (
        SearchCache,
        SearchOutOfTime,
        do_next_balance,
        initial_table,
        movable_instances,
        optimal_score,
        scope_of,
        try_balance,
    )

    rules = problem.rules
    pool = movable_instances(problem.state, rules.select_instances or (), rules.exclude_instances)
    scope = scope_of(problem.state, problem.group_uuid, pool)
    options = rules.search()
    stop = optimal_score(problem.state, scope) + rules.min_score  # hbal's -e
    table = initial_table(problem.state, scope)
    cache = SearchCache()
    answer_len = None
    cut = False
    partial = ""
    whole = table  # the table after the last whole round
    round_s: list[float] = []
    while do_next_balance(table, -1, stop):
        if max_rounds >= 0 and len(table.placements) >= max_rounds:
            if answer_len is None:
                answer_len = len(table.placements)
            if more_until is None or time.perf_counter() > more_until:
                break
        last = until if answer_len is None else _earliest(until, more_until)
        round_began = time.perf_counter()
        try:
            nxt = try_balance(options, scope, table, cache, last)
        except SearchOutOfTime as out:
            cut = answer_len is None
            if cut and out.table is not None:
                # the best move among the instances tried: a step hbal's whole round might
                # not pick, checked like every step
                table = out.table
                partial = f"its last step the best of {out.tried} of {out.victims} instances tried"
            break
        if nxt is None:
            break
        if answer_len is None:
            round_s.append(time.perf_counter() - round_began)
        table = whole = nxt

    def steps_of(t: object) -> tuple[Step, ...]:
        return tuple(Step(p.instance, p.move.kind, p.move.target) for p in t.placements)  # type: ignore[attr-defined]

    def resume(until_again: float | None) -> tuple[tuple[Step, ...], bool]:
        nonlocal whole
        t = whole
        while do_next_balance(t, max_rounds, stop):
            try:
                nxt = try_balance(options, scope, t, cache, until_again)
            except SearchOutOfTime as out:
                return steps_of(out.table if out.table is not None else t), False
            if nxt is None:
                break
            t = whole = nxt
        return steps_of(t), True

    steps = steps_of(table)
    k = len(steps) if answer_len is None else answer_len
    again = resume if cut and max_rounds >= 0 else None
    return HbalStart(steps[:k], steps, cut, partial, again, tuple(round_s))


def _resumed(
    problem: BalanceProblem,
    ans: BalanceAnswer,
    resume: Callable[[float | None], tuple[Step, ...]],
    stop_at: float,
) -> BalanceAnswer:
    """The answer with hbal's port resumed in the time the model left (its search was cut at
    HBAL_SHARE of the limit, and a model that could not be built or pruned little may leave
    half the limit unused): the resumed port's steps, checked, replace the answer's when they
    score lower. The bound stays: it bounds the least score, whichever plan is given."""
    began = time.perf_counter()
    if stop_at - began < RESUME_MIN_S or ans.status == str(Status.OPTIMAL):
        return ans
    steps, _ = resume(stop_at)
    if not steps or len(steps) > problem.max_steps:
        return ans
    score, scores = _checked(problem, steps)
    if score >= ans.score - 1e-12:
        return ans
    note = (
        f"hbal's port resumed for {time.perf_counter() - began:.1f} s after the model: "
        f"{len(steps)} step(s) to {score:.6f}, below the model's best {ans.score:.6f}"
    )
    return replace(ans, steps=steps, score=score, scores=scores, notes=(*ans.notes, note))


def resume_at_once(start: HbalStart, max_rounds: int, limit: float) -> bool:
    """Whether hbal's port, cut at HBAL_SHARE of the time limit, is resumed before the model:
    when the rounds it has left (to `max_rounds` steps) are estimated to take at most
    HBAL_EARLY_SHARE of `limit` seconds. A port cut in its first round has no estimate (on
    200 nodes one round takes 20 s or more): it is resumed after the model only."""
    left_s = start.rounds_left_s(max_rounds)
    return start.cut and left_s is not None and left_s <= HBAL_EARLY_SHARE * limit


def _combined(first: BalanceAnswer, again: BalanceAnswer) -> BalanceAnswer:
    """Two answers to the same problem (the second started from the first's steps, so never
    worse): the second's steps, the better of both bounds (each is a lower bound of the same
    least score), the times and rounds summed, the notes of both."""
    bounds = [b for b in (first.bound, again.bound) if b is not None]
    bound = max(bounds) if bounds else None
    best = again if again.score <= first.score else first
    proven = bound is not None and best.score - bound <= SCORE_GAP * max(abs(best.score), 1)
    status = str(Status.OPTIMAL) if proven else again.status
    note = f"balanced again from the resumed port's {len(first.steps)} step(s) in the time left"
    return replace(
        best,
        bound=bound,
        status=status,
        rounds=first.rounds + again.rounds,
        build_s=first.build_s + again.build_s,
        solve_s=first.solve_s + again.solve_s,
        cuts=first.cuts + again.cuts,
        notes=(*first.notes, note, *again.notes),
    )


def _earliest(*times: float | None) -> float | None:
    known = [t for t in times if t is not None]
    return min(known) if known else None


def answer(
    problem: BalanceProblem,
    *,
    max_steps: int | None,
    options: SolverOptions = DEFAULT_OPTIONS,
    fewest: bool = False,
    target_score: float | None = None,
) -> tuple[BalanceAnswer, tuple[Step, ...]]:
    """`exalloc balance`'s exact answer and hbal's (the port's) steps: K = `max_steps`, or
    the length of hbal's answer; with `fewest`, the fewest steps to a score no worse than
    hbal's (or `target_score`)."""
    began = time.perf_counter()
    limit = options.time_limit
    more = None if limit is None else began + MORE_SHARE * limit
    until = None if limit is None else began + HBAL_SHARE * limit
    rounds = -1 if max_steps is None else max_steps
    start = hbal_start(problem, rounds, more_until=more, until=until)
    stages = [("hbal_port_s", time.perf_counter() - began)]
    greedy, further = start.steps, start.further
    k = len(greedy) if max_steps is None else max_steps
    notes: tuple[str, ...] = ()
    cut = start.cut
    if cut:
        notes = (
            f"time limit: hbal's port stopped after {len(greedy)} step(s), at "
            f"{HBAL_SHARE:.0%} of the {limit:g} s limit, a round unfinished"
            + (f" ({start.partial})" if start.partial else "")
            + f"; its {len(greedy)} step(s) are the incumbent"
            + (f" and K = {k}, the length reached" if max_steps is None else ""),
        )
    left_s = start.rounds_left_s(rounds)
    resume = start.resume
    if resume is not None and limit is not None and resume_at_once(start, rounds, limit):
        # the rounds left should fit in HBAL_EARLY_SHARE: the model prunes from the whole
        # port's answer rather than from the steps so far
        resumed_at = time.perf_counter()
        steps, ended = resume(began + (HBAL_SHARE + HBAL_EARLY_SHARE) * limit)
        text = (
            f"hbal's port cut after {len(greedy)} step(s) at {HBAL_SHARE:.0%} of the "
            f"{limit:g} s limit (its {k - len(start.round_s)} round(s) left estimated at "
            f"{left_s:.1f} s) and resumed at once for {time.perf_counter() - resumed_at:.1f} s: "
        )
        stages.append(("hbal_resumed_s", time.perf_counter() - resumed_at))
        if len(steps) >= len(greedy):
            greedy = further = steps
        if ended:
            notes = (text + f"its {len(greedy)} step(s) are hbal's answer",)
            cut, resume = False, None
        else:
            notes = (*notes, text + f"cut again after {len(greedy)} step(s), the incumbent")
    problem = replace(problem, max_steps=k)
    points = []
    if further[len(greedy) :]:  # planes where hbal's search goes on to
        points.append(_replayed(replace(problem, max_steps=len(further)), further))
    if limit is not None:
        options = options.within(max(limit - (time.perf_counter() - began), 0.1))
    target = None
    if fewest:
        target = target_score
        if target is None:
            target = check_balance(problem, greedy).objectives["score"]
    exact_at = time.perf_counter()
    ans = balance(problem, greedy, options=options, fewest_to=target, extra_points=points)
    stages.append(("exact_s", time.perf_counter() - exact_at))
    if resume is not None and limit is not None and not fewest:
        resumed_at = time.perf_counter()
        resumed = _resumed(problem, ans, resume, began + limit - RESUME_MARGIN_S)
        stages.append(("resume_s", time.perf_counter() - resumed_at))
        left_s = began + limit - time.perf_counter()
        if resumed.steps != ans.steps and left_s >= RERUN_MIN_S:
            # the model ran from the cut port's weak incumbent (its planes prune little from
            # it): again from the resumed port's steps in the time left
            again_at = time.perf_counter()
            again = balance(problem, resumed.steps, options=options.within(left_s),
                            extra_points=points)  # fmt: skip
            stages.append(("exact_again_s", time.perf_counter() - again_at))
            ans = _combined(resumed, again)
        else:
            ans = resumed
    if notes:
        status = ans.status
        if cut and status != str(Status.OPTIMAL):
            status = str(Status.TIME_LIMIT)  # the port's answer was not reached
        ans = replace(ans, notes=(*notes, *ans.notes), status=status)
    return replace(ans, stages_s=tuple((k, round(v, 4)) for k, v in stages)), greedy
