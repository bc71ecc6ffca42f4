"""What an iallocator answer carries besides hail's response line (docs/hail.md).

`HailAnswer` is the response line Ganeti reads plus what `--json` and `--compare` show: the
placements or moves, the solver runs behind them and the checker's objectives. `SolverRun` is
one MIP's figures, which the exact answers append to hail's `info` text (`run_note`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class SolverRun:
    """What the MIP said, for the info suffix and --json."""

    solver: str
    status: str
    gap: float | None
    build_s: float
    solve_s: float
    objective: tuple[float | None, ...] = ()
    names: tuple[str, ...] = ()
    #: why there is no bound, when it is not for want of time
    unbounded: str | None = None

    def summary(self) -> str:
        if self.gap is None and self.status != "optimal":
            gap = self.unbounded or "no bound yet"
        else:
            gap = "gap 0" if not self.gap else f"gap {self.gap:.3g}"
        return f"{self.status}, {gap}"


@dataclass(frozen=True)
class HailAnswer:
    """hail's response line and what exalloc knows about it; exit code 0 like hail."""

    response: str
    kind: str  # the request type
    placements: tuple[tuple[str, tuple[str, ...]], ...] = ()  # instance -> its new nodes
    runs: tuple[SolverRun, ...] = ()
    objectives: Mapping[str, Any] = field(default_factory=dict)


def run_note(runs: Sequence[SolverRun], note: str = "") -> str:
    """The solver's verdict appended to hail's info: ` [exalloc highs: optimal, gap 0]`."""
    if not runs:
        return ""
    worst = next((r for r in runs if r.status != "optimal"), runs[0])
    return f" [exalloc {worst.solver}: {worst.summary()}{note}]"


def jsonable(x: Any) -> Any:
    """Mappings and tuples made JSON-ready (keys as strings)."""
    if isinstance(x, Mapping):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    return x
