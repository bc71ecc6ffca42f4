"""Solver-neutral result types, so callers never see HiGHS or CP-SAT objects."""

from __future__ import annotations

import enum
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

#: Relative gap below which a converged run counts as optimal. Both solvers stop at their own
#: absolute tolerance (HiGHS mip_abs_gap 1e-6) and report the bound with float noise.
OPTIMAL_GAP = 1e-6

_EMPTY: Mapping[str, float] = MappingProxyType({})


class Status(enum.StrEnum):
    """Outcome of one solve; only FEASIBLE and OPTIMAL carry a solution."""

    OPTIMAL = "optimal"
    FEASIBLE = "feasible"  # solution found, gap not closed (time limit or gap tolerance)
    INFEASIBLE = "infeasible"
    UNBOUNDED = "unbounded"
    TIME_LIMIT = "time_limit"  # stopped with no solution at all


SOLUTION_STATUSES = frozenset({Status.OPTIMAL, Status.FEASIBLE})


class VarValues(Mapping[str, float]):
    """Variable values by Pyomo name, the names made only when first asked for: building
    a name costs more than loading the value, and most callers read the model instead."""

    def __init__(self, pairs: list[tuple[Any, float]]):
        self._pairs = pairs
        self._by_name: dict[str, float] | None = None

    def _table(self) -> dict[str, float]:
        if self._by_name is None:
            self._by_name = {var.name: x for var, x in self._pairs}
        return self._by_name

    def __getitem__(self, name: str) -> float:
        return self._table()[name]

    def __iter__(self) -> Any:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._pairs)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and dict(self.items()) == dict(other.items())

    __hash__ = None  # type: ignore[assignment]


def relative_gap(objective: float | None, bound: float | None) -> float | None:
    """|obj - bound| / max(|obj|, 1): the denominator keeps the gap finite near zero."""
    if objective is None or bound is None:
        return None
    return abs(objective - bound) / max(abs(objective), 1.0)


def finite_or_none(x: float | None) -> float | None:
    """Solvers report 'no bound' as +-inf (HiGHS) or garbage; results use None instead."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def classify(
    *, converged: bool, objective: float | None, bound: float | None
) -> tuple[Status, float | None]:
    """Status and gap for a run that has a solution.

    A solver that 'converged' because it met a loose gap tolerance is reported FEASIBLE: only a
    closed gap is OPTIMAL, so callers can trust OPTIMAL regardless of the mip_gap they passed.
    """
    gap = relative_gap(objective, bound)
    if converged and (gap is None or gap <= OPTIMAL_GAP):
        return Status.OPTIMAL, 0.0
    return Status.FEASIBLE, gap


@dataclass(frozen=True)
class SolveResult:
    """One solver run: status, objective/bound/gap, timings and the variable values."""

    status: Status
    objective: float | None
    bound: float | None
    gap: float | None
    build_s: float
    solve_s: float
    solver: str
    values: Mapping[str, float] = field(default_factory=lambda: _EMPTY, repr=False)

    @property
    def has_solution(self) -> bool:
        return self.status in SOLUTION_STATUSES

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary; values are left out because they can be millions of entries."""
        return {
            "status": str(self.status),
            "objective": self.objective,
            "bound": self.bound,
            "gap": self.gap,
            "build_s": self.build_s,
            "solve_s": self.solve_s,
            "solver": self.solver,
        }


def _worst_status(stages: tuple[SolveResult, ...]) -> Status:
    if not stages:
        return Status.TIME_LIMIT
    last = stages[-1]
    if not last.has_solution:
        return last.status
    if any(s.status is not Status.OPTIMAL for s in stages):
        return Status.FEASIBLE
    return Status.OPTIMAL


@dataclass(frozen=True)
class LexResult:
    """A preemptive multi-objective run; per-stage tuples are aligned with `stages`."""

    status: Status
    stages: tuple[SolveResult, ...]
    names: tuple[str, ...]
    objective: tuple[float | None, ...]
    bound: tuple[float | None, ...]
    gap: tuple[float | None, ...]
    build_s: float
    solve_s: float
    values: Mapping[str, float] = field(default_factory=lambda: _EMPTY, repr=False)

    @classmethod
    def from_stages(
        cls, names: tuple[str, ...], stages: tuple[SolveResult, ...], build_s: float
    ) -> LexResult:
        values = next((s.values for s in reversed(stages) if s.has_solution), _EMPTY)
        return cls(
            status=_worst_status(stages),
            stages=stages,
            names=names[: len(stages)],
            objective=tuple(s.objective for s in stages),
            bound=tuple(s.bound for s in stages),
            gap=tuple(s.gap for s in stages),
            build_s=build_s,
            solve_s=sum(s.solve_s for s in stages),
            values=values,
        )

    @property
    def has_solution(self) -> bool:
        return any(s.has_solution for s in self.stages)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary with one entry per stage (no values)."""
        return {
            "status": str(self.status),
            "names": list(self.names),
            "objective": list(self.objective),
            "bound": list(self.bound),
            "gap": list(self.gap),
            "build_s": self.build_s,
            "solve_s": self.solve_s,
            "stages": [
                dict(s.to_dict(), name=n) for n, s in zip(self.names, self.stages, strict=True)
            ],
        }


class Stopwatch:
    """`with Stopwatch() as sw: build(...)`, then pass `build_s=sw.seconds` to solve(). Entered
    again, it adds the new interval (a model built in two steps)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._start = 0.0

    def __enter__(self) -> Stopwatch:
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds += time.perf_counter() - self._start
