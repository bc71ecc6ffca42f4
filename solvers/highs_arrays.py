"""A model given as arrays (formulations/balance_lean.py's `ArrayModel`), loaded into HiGHS
directly with highspy: no Pyomo copy, whose per-term cost made the balance model take longer
to load than its time limit (docs/balance.md). Rows can be added between solves; a solve is a
linear relaxation or the MIP.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import highspy
import numpy as np

from formulations.balance_lean import ArrayModel, Rows
from model.errors import SolverError
from solvers.result import Status
from solvers.silenced_fds import silenced_fds


@dataclass(frozen=True)
class ArrayResult:
    status: Status
    x: np.ndarray | None  # column values when there is a solution
    objective: float | None
    bound: float | None  # a proven lower bound of the objective (minimised)
    solve_s: float


#: HighsInfo.primal_solution_status of a feasible point (HiGHS's kSolutionStatusFeasible)
FEASIBLE_POINT = 2
#: Seconds past its time limit after which a run is interrupted from HiGHS's callbacks (MIP,
#: simplex and IPM interrupts): HiGHS's own time limit is not looked at everywhere (a lean MIP
#: of 11,587 columns ran 45.6 s past a 14.8 s limit, docs/balance.md), the callbacks are
#: called between its steps wherever it works
INTERRUPT_GRACE_S = 0.25


class ArraySession:
    """One HiGHS instance holding an array model (minimised)."""

    def __init__(
        self,
        model: ArrayModel,
        *,
        threads: int = 1,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        """`clock` is what the interrupt reads (a test's fake one: the deadline is kept by
        the callbacks, whatever HiGHS's own time limit does)."""
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("threads", threads)
        n = len(model.cost)
        empty_i = np.zeros(0, dtype=np.int32)
        status = h.addCols(n, model.cost, model.lower, model.upper, 0, empty_i, empty_i,
                           np.zeros(0))  # fmt: skip
        if status == highspy.HighsStatus.kError:
            raise SolverError("HiGHS refused the columns of an array model")
        h.changeObjectiveOffset(model.offset)
        self._h = h
        self._integer = model.integer
        self._n = n
        self._reduced: np.ndarray | None = None
        self._stop_at = math.inf
        self._clock = clock
        self._interrupted = False

        def stop(event: object) -> None:
            if self._clock() > self._stop_at:
                self._interrupted = True
                event.data_in.user_interrupt = True  # type: ignore[attr-defined]

        for callback in (h.cbMipInterrupt, h.cbSimplexInterrupt, h.cbIpmInterrupt):
            callback.subscribe(stop)
        self.add_rows(model.rows)

    def add_rows(self, rows: Rows) -> None:
        count = len(rows.lower)
        if count:
            status = self._h.addRows(count, rows.lower, rows.upper, len(rows.index),
                                     rows.starts[:-1], rows.index, rows.value)  # fmt: skip
            if status == highspy.HighsStatus.kError:
                raise SolverError("HiGHS refused the rows of an array model")

    def set_start(self, index: np.ndarray, values: np.ndarray) -> None:
        """A partial starting point (these columns' values) for the next MIP solve."""
        self._h.setSolution(len(index), index.astype(np.int32), values.astype(float))

    def close_columns(self, columns: np.ndarray) -> None:
        """Fix these columns at 0 (upper bound 0) for the following solves."""
        columns = np.asarray(columns, dtype=np.int32)
        if len(columns):
            self._h.changeColsBounds(len(columns), columns, np.zeros(len(columns)),
                                     np.zeros(len(columns)))  # fmt: skip

    def reduced_costs(self) -> np.ndarray | None:
        """The columns' reduced costs at the last LP solved to optimality (None: none)."""
        return self._reduced

    @property
    def interrupted(self) -> bool:
        """Whether the last solve was stopped by the callbacks' deadline."""
        return self._interrupted

    def solve(self, *, integral: bool, time_limit: float | None) -> ArrayResult:
        h = self._h
        kind = highspy.HighsVarType.kInteger if integral else highspy.HighsVarType.kContinuous
        if len(self._integer):
            kinds = np.full(len(self._integer), int(kind), dtype=np.uint8)
            h.changeColsIntegrality(len(self._integer), self._integer, kinds)
        h.setOptionValue(
            "time_limit", max(time_limit, 0.01) if time_limit is not None else math.inf
        )
        began = time.perf_counter()
        now = self._clock()
        self._stop_at = math.inf if time_limit is None else now + time_limit + INTERRUPT_GRACE_S
        self._interrupted = False
        self._reduced = None
        with silenced_fds():  # HiGHS's C++ prints to stdout by itself now and then
            h.run()
        took = time.perf_counter() - began
        model_status = h.getModelStatus()
        info = h.getInfo()
        solved = model_status == highspy.HighsModelStatus.kOptimal
        has = solved or (integral and info.primal_solution_status == FEASIBLE_POINT)
        solution = h.getSolution()
        x = np.array(solution.col_value) if has else None
        if solved and not integral and solution.dual_valid:
            self._reduced = np.array(solution.col_dual)
        objective = float(info.objective_function_value) if has else None
        if integral:
            bound = float(info.mip_dual_bound)
            bound = bound if math.isfinite(bound) else None
        else:
            bound = objective if solved else None
        if model_status == highspy.HighsModelStatus.kInfeasible:
            status = Status.INFEASIBLE
        elif solved:
            status = Status.OPTIMAL
        elif has:
            status = Status.FEASIBLE
        else:
            status = Status.TIME_LIMIT
        return ArrayResult(status, x, objective, bound, took)
