"""OR-Tools CP-SAT for Pyomo models, through our own small bridge.

Why a bridge of our own: Pyomo has no CP-SAT interface; the PyPI plugin `pyomo-cpsat` 2026.8.12
crashes on Python 3.11 (`int.is_integer` is 3.12+) and `pyomo-cp` 0.2.0 is alpha, has no hints or
persistence and registers the same legacy solver name, while a `generate_standard_repn` walk was
measured as fast as any other route (docs/solvers.md). The MPS/model_builder
route is avoided because it silently treats continuous variables as integers.

CP-SAT is integer-only, so every row and the objective are scaled to integer coefficients
(lcm of the denominators, bounded by MAX_SCALE); bounds are then rounded inwards, which is exact
because the scaled body is integer-valued. What CP-SAT cannot express raises SolverError naming
the variable or constraint.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

import pyomo.core as pyo
from ortools.sat.python import cp_model
from pyomo.repn import generate_standard_repn

from model.errors import SolverError, UsageError
from solvers import progress
from solvers.output_lock import one_per_process
from solvers.result import (
    SolveResult,
    Status,
    VarValues,
    classify,
    finite_or_none,
    relative_gap,
)

# Pyomo's output lock, not shared with forked processes (solvers/output_lock.py)
one_per_process()

#: Largest per-row multiplier accepted to make coefficients integral (0.000001 steps).
MAX_SCALE = 10**6
#: A coefficient counts as the fraction p/q (q <= MAX_SCALE) when this close, relative to it.
COEF_TOL = 1e-9
#: CP-SAT works in int64; keep scaled coefficients and bounds well away from overflow.
MAX_INT = 2**53


def integer_scale(coefs: list[float], what: object) -> tuple[int, list[int]]:
    """Smallest multiplier s <= MAX_SCALE making every coefficient integral, and s*coefs.

    >>> integer_scale([0.5, 0.25], "row")
    (4, [2, 1])
    """
    if all(c.is_integer() and abs(c) <= MAX_INT for c in coefs):  # the usual case, 50x faster
        return 1, [int(c) for c in coefs]
    fracs = []
    for c in coefs:
        f = Fraction(c).limit_denominator(MAX_SCALE)
        if abs(float(f) - c) > COEF_TOL * max(1.0, abs(c)):
            raise SolverError(
                f"CP-SAT cannot express {what}: coefficient {c!r} is not a fraction with "
                f"denominator <= {MAX_SCALE}"
            )
        fracs.append(f)
    scale = 1
    for f in fracs:
        scale = math.lcm(scale, f.denominator)
        if scale > MAX_SCALE:
            raise SolverError(
                f"CP-SAT cannot express {what}: making its coefficients integral needs a "
                f"scale above {MAX_SCALE}"
            )
    ints = [int(f * scale) for f in fracs]
    big = max((abs(i) for i in ints), default=0)
    if big > MAX_INT:
        raise SolverError(
            f"CP-SAT cannot express {what}: coefficient {big} after scaling is too large"
        )
    return scale, ints


def _snap(x: float) -> float:
    """Round float noise (1.3*100 = 130.00000000000003) before ceil/floor."""
    r = round(x)
    return float(r) if abs(x - r) <= COEF_TOL * max(1.0, abs(x)) else x


def _ceil(x: float) -> int:
    return math.ceil(_snap(x))


def _floor(x: float) -> int:
    return math.floor(_snap(x))


class _Named:
    """`constraint 'NAME'`, made only when a message needs it (Pyomo builds names slowly:
    a quarter of translating a model of a few thousand rows)."""

    __slots__ = ("component",)

    def __init__(self, component: Any) -> None:
        self.component = component

    def __str__(self) -> str:
        return f"constraint {self.component.name!r}"


class CpSatBridge:
    """One CpModel mirroring a Pyomo model; rows and objectives can be added afterwards."""

    def __init__(self, model: Any, *, with_objective: bool = True) -> None:
        self.cp = cp_model.CpModel()
        self._vars: dict[int, tuple[Any, cp_model.IntVar]] = {}
        self._obj_scale = 1
        self._obj_constant = 0.0
        self._obj_sense = "min"
        self._obj_empty = True
        if next(iter(model.component_data_objects(pyo.SOSConstraint, active=True)), None):
            raise SolverError("CP-SAT bridge does not handle SOS constraints")
        for con in model.component_data_objects(pyo.Constraint, active=True):
            self.add_linear(con.body, con.lb, con.ub, _Named(con))
        if with_objective:
            objs = list(model.component_data_objects(pyo.Objective, active=True))
            if len(objs) != 1:
                raise SolverError(
                    f"the model needs exactly one active objective, found {len(objs)}"
                    + (f" ({', '.join(o.name for o in objs)})" if objs else "")
                )
            obj = objs[0]
            sense = "min" if obj.sense == pyo.minimize else "max"
            self.set_objective(obj.expr, sense, f"objective {obj.name!r}")

    def _var(self, v: Any) -> cp_model.IntVar:
        hit = self._vars.get(id(v))
        if hit is not None:
            return hit[1]
        if not v.is_integer():  # the option's fault, not the input's (issue 40, item 3)
            raise UsageError(
                f"--solver cpsat cannot solve this question's model (its variable {v.name!r} "
                "is continuous): use --solver highs"
            )
        lb, ub = v.lb, v.ub
        if lb is None or ub is None or not (math.isfinite(lb) and math.isfinite(ub)):
            raise SolverError(
                f"CP-SAT needs finite bounds on integer variable {v.name!r} (has [{lb}, {ub}])"
            )
        lo, hi = _ceil(lb), _floor(ub)
        if max(abs(lo), abs(hi)) > MAX_INT:
            raise SolverError(f"CP-SAT bounds of variable {v.name!r} are too large: [{lb}, {ub}]")
        iv = self.cp.new_int_var(lo, max(lo, hi), f"v{len(self._vars)}")  # v.name is slow
        if lo > hi:  # empty domain: the model is infeasible, let CP-SAT say so
            self.cp.add_bool_or([])
        self._vars[id(v)] = (v, iv)
        return iv

    def _linear(self, expr: Any, what: object) -> tuple[list[cp_model.IntVar], list[float], float]:
        repn = generate_standard_repn(expr, compute_values=True, quadratic=False)
        if not repn.is_linear():
            raise SolverError(f"CP-SAT bridge cannot express {what}: it is not linear")
        coefs: dict[int, float] = {}
        vars_: dict[int, Any] = {}
        for v, c in zip(repn.linear_vars, repn.linear_coefs, strict=True):
            coefs[id(v)] = coefs.get(id(v), 0.0) + float(c)
            vars_[id(v)] = v
        keys = [k for k, c in coefs.items() if c != 0.0]
        return [self._var(vars_[k]) for k in keys], [coefs[k] for k in keys], float(repn.constant)

    def add_linear(self, expr: Any, lb: float | None, ub: float | None, what: object) -> None:
        """Add lb <= expr <= ub (either side may be None), scaled to integers."""
        lb = lb if lb is not None and math.isfinite(lb) else None  # -inf/+inf mean "no bound"
        ub = ub if ub is not None and math.isfinite(ub) else None
        ivars, coefs, const = self._linear(expr, what)
        scale, ints = integer_scale(coefs, what)
        lo = -cp_model.INT_MAX if lb is None else _ceil((lb - const) * scale)
        hi = cp_model.INT_MAX if ub is None else _floor((ub - const) * scale)
        for b, side in ((lb, lo), (ub, hi)):
            if b is not None and abs(side) > MAX_INT:
                raise SolverError(f"CP-SAT cannot express {what}: bound {b} is too large")
        self.cp.add_linear_constraint(cp_model.LinearExpr.weighted_sum(ivars, ints), lo, hi)

    def set_objective(self, expr: Any, sense: str, what: str = "objective") -> None:
        """Replace the objective; kept as integers times 1/scale plus a float constant."""
        ivars, coefs, const = self._linear(expr, what)
        scale, ints = integer_scale(coefs, what)
        self.cp.clear_objective()
        self._obj_scale, self._obj_constant, self._obj_sense = scale, const, sense
        self._obj_empty = not ivars
        if ivars:
            lin = cp_model.LinearExpr.weighted_sum(ivars, ints)
            self.cp.minimize(lin) if sense == "min" else self.cp.maximize(lin)

    def hint(self, values: Mapping[int, int]) -> None:
        """Hint a previous solution (keyed by id of the Pyomo var) for the next solve."""
        self.cp.clear_hints()
        for k, (_, iv) in self._vars.items():
            if k in values:
                self.cp.add_hint(iv, values[k])

    def solve(
        self,
        *,
        time_limit: float | None,
        mip_gap: float,
        threads: int,
        seed: int,
        work_limit: float | None = None,
    ) -> tuple[Status, float | None, float | None, float | None, dict[int, int]]:
        """Run CP-SAT; returns status, objective, bound, gap and values keyed by id(var).
        `work_limit`: CP-SAT's deterministic time limit (its own work units, the same on a
        loaded machine as on an idle one), beside the wall-clock `time_limit`."""
        solver = cp_model.CpSolver()
        p = solver.parameters
        if time_limit is not None:
            p.max_time_in_seconds = max(float(time_limit), 0.0)
        if work_limit is not None:
            p.max_deterministic_time = max(float(work_limit), 0.0)
        p.num_workers = threads
        p.random_seed = seed
        p.relative_gap_limit = mip_gap
        p.log_search_progress = False
        watch = self._watch(solver, progress.current())
        code = solver.solve(self.cp, watch)
        if code == cp_model.MODEL_INVALID:
            raise SolverError(f"CP-SAT rejected the model: {self.cp.validate() or 'MODEL_INVALID'}")
        if code == cp_model.INFEASIBLE:
            return Status.INFEASIBLE, None, None, None, {}
        if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):  # UNKNOWN: values are garbage
            return Status.TIME_LIMIT, None, None, None, {}
        if self._obj_empty:
            objective = bound = self._obj_constant
        else:
            objective = solver.objective_value / self._obj_scale + self._obj_constant
            bound = finite_or_none(
                solver.best_objective_bound / self._obj_scale + self._obj_constant
            )
        status, gap = classify(converged=code == cp_model.OPTIMAL, objective=objective, bound=bound)
        values = {k: int(solver.value(iv)) for k, (_, iv) in self._vars.items()}
        return status, objective, bound, gap, values

    def _watch(
        self, solver: cp_model.CpSolver, reporter: progress.StatusLine | None
    ) -> cp_model.CpSolverSolutionCallback | None:
        """CP-SAT's incumbent and bound on the status line while it searches (issue 40,
        item 5): a solution callback for each new incumbent and CP-SAT's bound callback for
        each better bound, in the stage's own units (scale and constant undone). Only when
        progress is reported: a Python callback costs CP-SAT a little on every solution."""
        if reporter is None or self._obj_empty:
            return None
        scale, const = self._obj_scale, self._obj_constant
        seen: dict[str, float | None] = {"best": None, "bound": None}

        def show() -> None:
            best, bound = seen["best"], seen["bound"]
            reporter.solving(best, bound, relative_gap(best, bound))

        def on_bound(value: float) -> None:
            seen["bound"] = finite_or_none(value / scale + const)
            show()

        class Incumbent(cp_model.CpSolverSolutionCallback):
            def on_solution_callback(self) -> None:
                seen["best"] = self.objective_value / scale + const
                seen["bound"] = finite_or_none(self.best_objective_bound / scale + const)
                show()

        solver.best_bound_callback = on_bound
        return Incumbent()

    def load(self, values: Mapping[int, int]) -> VarValues:
        """Write values into the Pyomo variables; return them by variable name."""
        pairs = []
        for k, (v, _) in self._vars.items():
            if k in values:
                x = float(values[k])
                v.set_value(x, skip_validation=True)
                pairs.append((v, x))
        return VarValues(pairs)


class CpSatSession:
    """Bridge + parameters; hints each solve with the previous solution (lexicographic stages)."""

    solver_name = "cpsat"

    def __init__(
        self, model: Any, *, mip_gap: float, threads: int, seed: int, with_objective: bool = False
    ) -> None:
        t0 = time.perf_counter()
        self._bridge = CpSatBridge(model, with_objective=with_objective)
        self._pending_s = time.perf_counter() - t0  # translation time, charged to the first solve
        self._params = {"mip_gap": mip_gap, "threads": threads, "seed": seed}
        self._last: dict[int, int] = {}
        self._stage = 0

    def hint(self, start: Mapping[Any, float]) -> None:
        """The first solve's hint (Pyomo variable -> value), before any solution of its own."""
        self._last = {id(v): int(round(x)) for v, x in start.items()}

    def set_objective(self, expr: Any, sense: str) -> None:
        self._stage += 1
        self._bridge.set_objective(expr, sense, f"objective of stage {self._stage}")

    def add_bound(self, expr: Any, lb: float | None, ub: float | None) -> None:
        self._bridge.add_linear(expr, lb, ub, f"fixing row of stage {self._stage}")

    def close(self) -> None:
        """Nothing was added to the Pyomo model."""

    def solve(
        self,
        *,
        time_limit: float | None,
        build_s: float,
        seed: int | None = None,
        work_limit: float | None = None,
    ) -> SolveResult:
        """Solve once; `seed` replaces the session's random seed for this solve and
        `work_limit` bounds it in CP-SAT's deterministic time (restarts with fresh seeds
        against heavy-tailed search times, solvers/strategies/roll.py)."""
        t0 = time.perf_counter()
        if self._last:
            self._bridge.hint(self._last)
        params = dict(self._params)
        if seed is not None:
            params["seed"] = seed
        status, objective, bound, gap, raw = self._bridge.solve(
            time_limit=time_limit, work_limit=work_limit, **params
        )
        values: Mapping[str, float] = {}
        if raw:
            self._last = raw
            values = self._bridge.load(raw)
        solve_s = time.perf_counter() - t0 + self._pending_s
        self._pending_s = 0.0
        return SolveResult(
            status=status,
            objective=objective,
            bound=bound,
            gap=gap,
            build_s=build_s,
            solve_s=solve_s,
            solver=self.solver_name,
            values=values,
        )


def solve_cpsat(
    model: Any,
    *,
    time_limit: float | None,
    mip_gap: float,
    threads: int,
    seed: int,
    build_s: float,
) -> SolveResult:
    """Translate and solve `model` (exactly one active objective) once with CP-SAT.

    As with HiGHS, time_limit bounds the search; translation time is not deducted from it.
    """
    session = CpSatSession(model, mip_gap=mip_gap, threads=threads, seed=seed, with_objective=True)
    return session.solve(time_limit=time_limit, build_s=build_s)
