"""What an iallocator answer carries besides hail's response line (docs/hail.md).

`HailAnswer` is the response line Ganeti reads plus what `--json` and `--compare` show: the
placements or moves, the solver runs behind them and the checker's objectives. `SolverRun` is
one MIP's figures; `solver_note` is the verdict an exact answer carries beside hail's response
line (`HailAnswer.note`), which the program prints on stderr and in `--json` ("solver_note"):
Ganeti and its shell tests read hail's own info text (issue 39), so the line stays hail's.
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
    #: the solver's verdict, `highs: optimal, gap 0` and what the strategy adds ("" for none)
    note: str = ""
    # an allocate's every group tried, ranked (model.htools.requests.ranked_groups)
    groups: tuple[Mapping[str, Any], ...] = ()
    # where the answer's seconds went, stage by stage (screen_s, model_s, greedy_s, check_s):
    # --json's timing (issue 40, item 4)
    stages: Mapping[str, float] = field(default_factory=dict)


def solver_note(runs: Sequence[SolverRun], note: str = "") -> str:
    """The solver's verdict on an answer, `highs: optimal, gap 0` (the worst run's), then
    `note`, what the strategy adds (`; joint plan 3, ...`); "" without runs."""
    if not runs:
        return ""
    worst = next((r for r in runs if r.status != "optimal"), runs[0])
    return f"{worst.solver}: {worst.summary()}{note}"


def longest_stage(stages: Mapping[str, float]) -> str:
    """The stage the answer's time went to (`model_s`, the model's build and solve together,
    is left out where they are given apart): `greedy` for `greedy_s`."""
    parts = {k: v for k, v in stages.items() if k != "model_s" or "model_build_s" not in stages}
    return max(parts, key=lambda k: parts[k]).removesuffix("_s")


def jsonable(x: Any) -> Any:
    """Mappings and tuples made JSON-ready (keys as strings)."""
    if isinstance(x, Mapping):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    return x
