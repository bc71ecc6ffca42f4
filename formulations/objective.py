"""One stage of a lexicographic objective, as a formulation states it.

Formulations list their stages (`objectives(m, problem)`, formulations/__init__.py) and the
solvers' lexicographic driver (solvers/lexicographic.py) runs them in order; the type lives
here, below both, so that a formulation never imports the solver layer above it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, eq=False)
class Objective:
    """One stage of a lexicographic run.

    integral=True promises the expression takes integer values at every feasible point, which
    lets the stage be fixed exactly (expr <= round(v)) instead of with a tolerance.
    eq=False: comparing Pyomo expressions with == builds a constraint instead of a bool.
    """

    name: str
    expr: Any
    sense: str = "min"
    integral: bool = True

    def __post_init__(self) -> None:
        if self.sense not in ("min", "max"):
            raise ValueError(
                f"objective {self.name!r}: sense must be 'min' or 'max', not {self.sense!r}"
            )
