"""What an iallocator answer carries besides hail's response line (docs/hail.md).

`HailAnswer` is the response line Ganeti reads plus what `--json` and `--compare` show: the
placements or moves, the solver runs behind them and the checker's objectives. `SolverRun` is
one MIP's figures, which the exact answers append to hail's `info` text (`run_note`).
"""

from __future__ import annotations

import re
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
    # an allocate's every group tried, ranked (model.htools.requests.ranked_groups)
    groups: tuple[Mapping[str, Any], ...] = ()
    # where the answer's seconds went, stage by stage (screen_s, model_s, greedy_s, check_s):
    # --json's timing (issue 40, item 4)
    stages: Mapping[str, float] = field(default_factory=dict)


def run_note(runs: Sequence[SolverRun], note: str = "") -> str:
    """The solver's verdict appended to hail's info: ` [exalloc highs: optimal, gap 0]`."""
    if not runs:
        return ""
    worst = next((r for r in runs if r.status != "optimal"), runs[0])
    return f" [exalloc {worst.solver}: {worst.summary()}{note}]"


#: `run_note` at the end of the encoded info, right before the result (hail's key order).
_ENCODED_NOTE = re.compile(r' \[exalloc ([^\]"\\]*)\](?=","result":)')


def split_run_note(response: str) -> tuple[str, str]:
    """hail's response line without exalloc's note, and the note without its brackets and
    leading `exalloc ` (`highs: optimal, gap 0`; "" when none): Ganeti and
    its shell tests read hail's own info text (issue 39); the note goes to stderr and --json.
    The line is cut as encoded, so every other byte stays what the strategy wrote."""
    found = _ENCODED_NOTE.search(response)
    if found is None:
        return response, ""
    return response[: found.start()] + response[found.end() :], found.group(1)


def jsonable(x: Any) -> Any:
    """Mappings and tuples made JSON-ready (keys as strings)."""
    if isinstance(x, Mapping):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    return x
