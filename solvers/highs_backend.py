"""HiGHS through Pyomo's contrib (persistent) interface.

One `HighsSession` wraps one persistent `pyomo.contrib.solver` Highs object: `solve()` uses it
once, the lexicographic driver re-uses it across stages with explicit `add_constraints` /
`set_objective` (auto-updates are off, so Pyomo does not rescan the model every stage).
"""

from __future__ import annotations

import io
import json
import logging
import math
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import highspy
import pyomo.core as pyo
from pyomo.contrib.solver.common.results import SolutionStatus, TerminationCondition
from pyomo.contrib.solver.common.util import IncompatibleModelError
from pyomo.contrib.solver.solvers.highs import Highs as PyomoHighs
from pyomo.core.base.objective import ObjectiveData

from model.errors import SolverError
from solvers import progress
from solvers.output_lock import one_per_process
from solvers.result import (
    SolveResult,
    Status,
    VarValues,
    classify,
    finite_or_none,
)
from solvers.silenced_fds import silenced_fds

# Pyomo's output lock, not shared with forked processes (solvers/output_lock.py)
one_per_process()

# HiGHS runs one scheduler per process and fixes its thread count at the first solve; a later
# solve asking for another count only logs an error and is ignored. This is one of two pieces of
# module state: the count the scheduler was last set to by us, so it is reset only when it must
# change (and once at our first solve, in case other code in the process ran HiGHS before).
# The other is `silenced_fds` (solvers/silenced_fds.py): file descriptors belong to the process too.
_highs_scheduler_threads: int | None = None

#: HiGHS presolve rules switched off (option presolve_rule_off, a bitmask): rule 12, the
#: aggregator. With it HiGHS 1.12 proved worse answers optimal on exalloc's joint placement
#: models, twice: a 4-node allocate, its capacity rows scaled in an experiment
#: (tests/data/highs-aggregator-wrong-bound.mps: optimum 4.097 with presolve, 2.490 without),
#: and a 200-node node-evacuate (hail's plan at 34.556449 "optimal" where a checked plan scores
#: 34.545771). Without the aggregator both come out right (docs/placement.md, "A presolve rule
#: switched off"). And rule 9, doubleton equations: with it, the first score round of that
#: evacuation is "optimal" at 34.545663 where the model has a solution at 34.545575
#: (tests/data/highs-doubleton-wrong-bound.mps.xz; docs/placement.md, "A second presolve rule
#: switched off"). A later highspy cannot be installed beside ortools (pyproject.toml).
PRESOLVE_RULES_OFF = (1 << 12) | (1 << 9)

#: HiGHS's restart (presolve again once the root's reduced-cost fixing has fixed enough
#: integer columns) is off for the joint placement's score rounds (`restarts=False`, from
#: solvers/strategies/placement.py): on a 4-node joint placement's fifth round
#: (tests/test_spread.py, seed 0) HiGHS 1.12 fixed 8.3 % of the columns, restarted, and
#: proved the start (2.495787) optimal where the model has a solution at 2.491030; without the
#: restart, or without presolve, it finds 2.491030 (docs/placement.md, "A third wrong bound").
#: Elsewhere it stays on (HiGHS's default): no wrong bound was seen there, and without it the
#: dedicated drbd multi-allocate of 10 on 200 nodes took 44 s instead of 7 s
#: (docs/scale.md).
RESTARTS = True

#: HiGHS's MIP feasibility tolerance (its default), and the tighter one of the second try of a
#: known plan's completion that HiGHS called infeasible (`HighsSession.solve_with_fixed`).
FEASIBILITY_TOLERANCE = 1e-6
RETRY_FEASIBILITY_TOLERANCE = 1e-9

#: A folder: every HiGHS run then leaves there its model as HiGHS has it (`runNN.mps`), the
#: options exalloc set (`runNN.json`, with the start it was given) and HiGHS's log
#: (`runNN.log`), so that a solve can be studied apart from exalloc
#: (benchmarks/highs_round.py; docs/solvers.md, "A solve on its own"). Off when unset.
DUMP_ENV = "EXALLOC_HIGHS_DUMP"

_NO_SOLUTION_STOPS = {
    TerminationCondition.maxTimeLimit,
    TerminationCondition.iterationLimit,
    TerminationCondition.objectiveLimit,
    TerminationCondition.interrupted,
    TerminationCondition.unknown,
}

_AUTO_UPDATE_FLAGS = (
    "check_for_new_or_removed_constraints",
    "check_for_new_or_removed_vars",
    "check_for_new_or_removed_params",
    "check_for_new_objective",
    "update_constraints",
    "update_vars",
    "update_parameters",
    "update_named_expressions",
    "update_objective",
)

INTEGRALITY_TOL = 1e-6


def _ensure_threads(threads: int) -> None:
    """Reset HiGHS's process-global scheduler when the requested thread count changes."""
    global _highs_scheduler_threads
    if _highs_scheduler_threads != threads:
        highspy.Highs.resetGlobalScheduler(True)
    _highs_scheduler_threads = threads


@contextmanager
def _model_errors() -> Iterator[None]:
    """Pyomo's 'cannot take this model' errors become the SolverError the CLI reports."""
    try:
        yield
    except (IncompatibleModelError, ValueError) as e:  # nonlinear rows, several objectives
        raise SolverError(f"HiGHS cannot take this model: {e}") from e


def _clean_value(var: Any, x: float) -> float:
    """Snap integer variables to the integer HiGHS meant (it returns e.g. 0.9999999997)."""
    if var.is_integer():
        r = round(x)
        if abs(x - r) <= INTEGRALITY_TOL:
            return float(r)
    return float(x)


class UncapturedHighs(PyomoHighs):
    """Pyomo's persistent HiGHS without the output capture it wraps around every solve.

    That capture starts and joins reader threads each time: about 1 ms, most of the time of
    a small lexicographic stage (a 1,000-node allocate has four or five). exalloc never shows
    HiGHS's log: the log is off, and what HiGHS prints anyway goes to /dev/null (a few
    system calls). Failures are named by their model status.
    """

    def _solve(self) -> Any:
        config = self._active_config
        highs = self._solver_model
        highs.setOptionValue("output_flag", False)
        for key, value in (
            ("threads", config.threads),
            ("time_limit", config.time_limit),
            ("mip_rel_gap", config.rel_gap),
            ("mip_abs_gap", config.abs_gap),
            *config.solver_options.items(),
        ):
            if value is not None:
                highs.setOptionValue(key, value)
        dump = _dump_run(highs, config) if os.environ.get(DUMP_ENV) else None
        watch = _watch_mip(highs, progress.current())
        guard = _deadline_guard(highs, config.time_limit)
        config.timer.start("optimize")
        try:
            with silenced_fds():
                highs.run()
        finally:
            if watch is not None:
                highs.cbMipInterrupt.unsubscribe(watch)
            for callback in guard:
                callback.unsubscribe(_stop_past)
        config.timer.stop("optimize")
        if dump is not None:
            highs.setOptionValue("output_flag", False)
            highs.setOptionValue("log_file", "")
        if highs.getModelStatus() != highspy.HighsModelStatus.kInterrupt:
            return self._postsolve(io.StringIO())
        # Pyomo 6.10 warns of kInterrupt ("unhandled status") and calls it unknown: the stop
        # is the deadline guard's, a time limit
        quiet = logging.getLogger(PyomoHighs.__module__)
        level = quiet.level
        quiet.setLevel(logging.ERROR)
        try:
            return self._postsolve(io.StringIO())
        finally:
            quiet.setLevel(level)


#: Seconds past its time limit after which a run is interrupted from HiGHS's callbacks: HiGHS
#: does not read its time limit everywhere (a MIP on benchmarks/bench_balance.py's 40-node
#: seed 3 ran 44 s of a 30 s limit at a load of 8-11), the callbacks run between its steps
INTERRUPT_GRACE_S = 0.25


def _stop_past(event: Any) -> None:
    """A callback's interrupt once the perf_counter time in its user data has passed."""
    if time.perf_counter() > event.user_data:
        event.data_in.user_interrupt = True


def _deadline_guard(highs: Any, time_limit: float | None) -> list[Any]:
    """The MIP and simplex interrupt callbacks stopping the run INTERRUPT_GRACE_S past its
    time limit (none without one); the callbacks to unsubscribe after the run."""
    if time_limit is None or not math.isfinite(time_limit) or not hasattr(highs, "cbMipInterrupt"):
        return []
    stop_at = time.perf_counter() + time_limit + INTERRUPT_GRACE_S
    callbacks = [highs.cbMipInterrupt, highs.cbSimplexInterrupt]
    for callback in callbacks:
        callback.subscribe(_stop_past, stop_at)
    return callbacks


def _watch_mip(highs: Any, reporter: progress.StatusLine | None) -> Any:
    """HiGHS's incumbent, bound and gap on the status line while it branches (the callback
    runs on HiGHS's thread: the reporter is taken here, on the caller's)."""
    if reporter is None or not hasattr(highs, "cbMipInterrupt"):
        return None

    def report(event: Any) -> None:
        out = event.data_out
        reporter.solving(out.mip_primal_bound, out.mip_dual_bound, out.mip_gap)

    highs.cbMipInterrupt.subscribe(report)
    return report


def _dump_run(highs: Any, config: Any) -> Path:
    """The run's model, options and start written to $EXALLOC_HIGHS_DUMP, its log on."""
    folder = Path(os.environ[DUMP_ENV])
    folder.mkdir(parents=True, exist_ok=True)
    stem = folder / f"run{len(list(folder.glob('run*.mps'))):02d}"
    highs.writeModel(f"{stem}.mps")
    solution = highs.getSolution()
    options = {
        "time_limit": config.time_limit,
        "mip_rel_gap": config.rel_gap,
        "threads": config.threads,
        **config.solver_options,
    }
    start = list(solution.col_value) if solution.value_valid else None
    stem.with_suffix(".json").write_text(json.dumps({"options": options, "start": start}))
    highs.setOptionValue("log_file", f"{stem}.log")
    highs.setOptionValue("log_to_console", False)
    highs.setOptionValue("output_flag", True)
    return stem


class HighsSession:
    """A persistent HiGHS instance bound to one Pyomo model."""

    solver_name = "highs"

    def __init__(
        self,
        model: Any,
        *,
        mip_gap: float,
        threads: int,
        seed: int,
        presolve: bool = True,
        restarts: bool = RESTARTS,
    ) -> None:
        self._model = model
        self._opt = UncapturedHighs()
        if not self._opt.available():
            raise SolverError("HiGHS is not available (is highspy==1.12.0 installed?)")
        for flag in _AUTO_UPDATE_FLAGS:
            setattr(self._opt.config.auto_updates, flag, False)
        self._threads = threads
        self._options: dict[str, Any] = {
            "rel_gap": mip_gap,
            "threads": threads,
            "solver_options": {
                "random_seed": seed,
                "presolve_rule_off": PRESOLVE_RULES_OFF,
                "mip_allow_restart": restarts,
                # set on every solve: a retry's tighter one does not stay on the instance
                "mip_feasibility_tolerance": FEASIBILITY_TOLERANCE,
                **({} if presolve else {"presolve": "off"}),
            },
            "load_solutions": False,
            "raise_exception_on_nonoptimal_result": False,
        }
        self._instance_ready = False
        self._objective: ObjectiveData | None = None
        self._scratch: pyo.Block | None = None
        self._deactivated: list[ObjectiveData] = []

    # -- model edits (lexicographic stages) -------------------------------------------------

    def _scratch_block(self) -> pyo.Block:
        """A block holding the stage objectives and fixing rows, removed again by close()."""
        if self._scratch is None:
            name = "_exalloc_lex"
            while self._model.component(name) is not None:
                name += "_"
            self._deactivated = [
                o
                for o in self._model.component_data_objects(pyo.Objective, active=True)
                if o.active
            ]
            for o in self._deactivated:
                o.deactivate()
            block = pyo.Block(concrete=True)
            self._model.add_component(name, block)
            block.fix = pyo.ConstraintList()
            self._scratch = block
        return self._scratch

    def set_objective(self, expr: Any, sense: str) -> None:
        block = self._scratch_block()
        if self._objective is not None:
            self._objective.deactivate()
        k = len(list(block.component_objects(pyo.Objective)))
        obj = pyo.Objective(expr=expr, sense=pyo.minimize if sense == "min" else pyo.maximize)
        block.add_component(f"stage{k}", obj)
        self._objective = obj
        if self._instance_ready:
            with _model_errors():
                self._opt.set_objective(obj)

    def add_bound(self, expr: Any, lb: float | None, ub: float | None) -> None:
        con = self._scratch_block().fix.add(pyo.inequality(lb, expr, ub))
        if self._instance_ready:
            with _model_errors():
                self._opt.add_constraints([con])

    def _ensure_instance(self) -> None:
        """HiGHS's copy of the model, made before the clock starts for HiGHS: on a large model
        (46,000 rows) the copy takes seconds, which the caller's time limit must cover."""
        if not self._instance_ready:
            with _model_errors():
                self._opt.set_instance(self._model)
            self._instance_ready = True

    def solve_with_fixed(
        self, variables: Sequence[Any], *, time_limit: float | None
    ) -> SolveResult:
        """Solve with `variables` fixed at their loaded values (with presolve, which removes
        them), on this session's copy of the model: a known plan completed into a solution,
        which the next solve starts from, without a second copy of a large model. Their
        bounds are restored after."""
        t0 = time.perf_counter()
        self._ensure_instance()  # the copy made with the variables free: rows keep them
        if time_limit is not None:
            time_limit = max(time_limit - (time.perf_counter() - t0), 0.0)
        options = self._options["solver_options"]
        self._options["solver_options"] = {**options, "presolve": "on"}
        for v in variables:
            v.fix()
        try:
            with _model_errors():
                self._opt.update_variables(list(variables))
            res = self.solve(time_limit=time_limit, build_s=0.0)
            if res.status is Status.INFEASIBLE:
                # HiGHS 1.12 has called a small model infeasible with a plan fixed that the
                # checker passes and the LP holds, and solved it with a tighter feasibility
                # tolerance (docs/placement.md, "A third wrong bound": seed 3909)
                self._options["solver_options"] = {
                    **self._options["solver_options"],
                    "mip_feasibility_tolerance": RETRY_FEASIBILITY_TOLERANCE,
                }
                left = None if time_limit is None else time_limit - res.solve_s
                again = self.solve(time_limit=left, build_s=0.0)
                res = replace(again, solve_s=res.solve_s + again.solve_s)
            return res
        finally:
            self._options["solver_options"] = options
            for v in variables:
                v.unfix()
            with _model_errors():
                self._opt.update_variables(list(variables))

    def close(self) -> None:
        """Leave the model as it was given (apart from loaded variable values)."""
        if self._scratch is not None:
            self._model.del_component(self._scratch)
            self._scratch = None
        for o in self._deactivated:
            o.activate()
        self._deactivated = []

    # -- solving ----------------------------------------------------------------------------

    def _run(self, time_limit: float | None, **extra: Any) -> Any:
        _ensure_threads(self._threads)
        kw = dict(self._options, **extra)
        if time_limit is not None:
            kw["time_limit"] = max(float(time_limit), 0.0)
        with _model_errors():
            res = self._opt.solve(self._model, **kw)
        self._instance_ready = True
        return res

    def _feasible(self, time_limit: float | None) -> bool | None:
        """Solve without objective: tells unbounded from infeasible after presolve's
        'infeasible or unbounded' (None when even that stops on the time limit)."""
        self._opt.set_objective(None)
        try:
            res = self._run(time_limit)
        finally:
            self._opt.set_objective(self._objective)
        if res.solution_status in (SolutionStatus.optimal, SolutionStatus.feasible):
            return True
        if res.termination_condition == TerminationCondition.provenInfeasible:
            return False
        return None

    def solve(self, *, time_limit: float | None, build_s: float) -> SolveResult:
        """Solve the current objective; load the solution into the model's variables."""
        # Wall clock, not res.timing_info: HiGHS's run time is cumulative on a persistent object.
        t0 = time.perf_counter()
        if self._objective is None:
            self._objective = self._single_objective()
        started = self._instance_ready  # a previous stage's solution is loaded
        self._ensure_instance()
        if started:
            self._start_from_loaded()
        if time_limit is not None:
            time_limit = max(time_limit - (time.perf_counter() - t0), 0.0)
        res = self._run(time_limit)
        tc = res.termination_condition
        has_solution = res.solution_status in (SolutionStatus.optimal, SolutionStatus.feasible)
        objective = finite_or_none(res.incumbent_objective) if has_solution else None
        bound = finite_or_none(res.objective_bound)
        values: Mapping[str, float] = {}

        if tc == TerminationCondition.error:
            status = self._opt._solver_model.getModelStatus()
            why = self._opt._solver_model.modelStatusToString(status)
            raise SolverError(f"HiGHS failed: {why}")
        if tc == TerminationCondition.infeasibleOrUnbounded:
            left = None if time_limit is None else time_limit - (time.perf_counter() - t0)
            feasible = self._feasible(left)
            status = {True: Status.UNBOUNDED, False: Status.INFEASIBLE}.get(
                feasible, Status.TIME_LIMIT
            )
            objective, bound, gap = None, None, None
        elif tc == TerminationCondition.provenInfeasible:
            status, objective, bound, gap = Status.INFEASIBLE, None, None, None
        elif tc == TerminationCondition.unbounded:
            status, objective, bound, gap = Status.UNBOUNDED, None, None, None
        elif has_solution and objective is not None:
            converged = tc == TerminationCondition.convergenceCriteriaSatisfied
            if converged and bound is None:
                # HiGHS 1.12 reports a MIP it proves optimal at once from a start (no node)
                # with a dual bound of -inf: its optimum is the bound (docs/placement.md,
                # "Limits")
                bound = objective
            status, gap = classify(converged=converged, objective=objective, bound=bound)
            values = self._load(res)
        elif tc in _NO_SOLUTION_STOPS or not has_solution:
            status, objective, gap = Status.TIME_LIMIT, None, None
        else:  # a solution without a finite objective value
            raise SolverError(f"HiGHS returned {tc.name} without a usable objective value")

        return SolveResult(
            status=status,
            objective=objective,
            bound=bound,
            gap=gap,
            build_s=build_s,
            solve_s=time.perf_counter() - t0,
            solver=self.solver_name,
            values=values,
        )

    def _start_from_loaded(self) -> None:
        """A later lexicographic stage starts from the previous stage's solution (still loaded
        in the variables, and feasible for this stage): HiGHS takes it as its first incumbent
        and drops it if it is not feasible after all."""
        opt = self._opt
        index, value = [], []
        for vid, col in opt._pyomo_var_to_solver_var_map.items():
            x = opt._vars[vid][0].value
            if x is not None:
                index.append(col)
                value.append(float(x))
        if index:
            opt._solver_model.setSolution(len(index), index, value)

    def _single_objective(self) -> ObjectiveData:
        objs = list(self._model.component_data_objects(pyo.Objective, active=True))
        if len(objs) != 1:
            raise SolverError(
                f"the model needs exactly one active objective, found {len(objs)}"
                + (f" ({', '.join(o.name for o in objs)})" if objs else "")
            )
        return objs[0]

    def _load(self, res: Any) -> VarValues:
        pairs = []
        for var, x in res.solution_loader.get_vars().items():
            if x is None or not math.isfinite(x):
                continue
            v = _clean_value(var, x)
            var.set_value(v, skip_validation=True)
            pairs.append((var, v))
        return VarValues(pairs)


def solve_highs(
    model: Any,
    *,
    time_limit: float | None,
    mip_gap: float,
    threads: int,
    seed: int,
    build_s: float,
) -> SolveResult:
    """Solve `model` (exactly one active objective) once with HiGHS."""
    session = HighsSession(model, mip_gap=mip_gap, threads=threads, seed=seed)
    return session.solve(time_limit=time_limit, build_s=build_s)
