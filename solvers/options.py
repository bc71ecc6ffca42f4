"""How a problem is to be solved: the one typed options object every solving command carries.

`programs/options.py` builds it from `--solver`, `--time-limit`, `--gap` and `--threads`;
programs and solve strategies pass it on; `kwargs()` maps it onto `solvers.solve` /
`solve_lexicographic`.

It also owns the answer's deadline (issue 40, item 4): `--time-limit T` is a promise about the
whole answer as the user waits for it, from the process's start (Python's start-up and imports
included, `process_started`) to the last line printed. The command line sets `deadline_at`
once (`answer_options`); a program hands each stage `left(reserve_s)`, the options with what
is left of that deadline less what the stages after it (the checker, the output) need, so
that no stage starts its own clock anew. `time_limit` stays the seconds a holder has from the
moment it got the options, as every strategy reads it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from typing import Any

SOLVERS = ("highs", "cpsat")

#: The least a stage is handed when the deadline is (nearly) gone: a solver given no time at
#: all is refused by HiGHS; the stage then answers with what it has, saying time_limit.
LEAST_S = 0.01


def process_started() -> float:
    """The time.perf_counter() value at which this process started (Linux: /proc/self/stat's
    start time, 10 ms ticks), so that a limit counts Python's start-up and imports (0.6 s idle,
    3-5 s loaded: docs/scale.md); now where /proc cannot say."""
    now = time.perf_counter()
    try:
        with open("/proc/self/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        ticks = int(fields[19])  # field 22 of proc(5), counted from field 3 after the name
        since_boot = time.clock_gettime(time.CLOCK_BOOTTIME)
        age = since_boot - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return now
    return now - age if 0.0 <= age < 3600.0 else now  # a clock that disagrees: say nothing


@dataclass(frozen=True)
class SolverOptions:
    solver: str = "highs"  # one of SOLVERS
    time_limit: float | None = None  # seconds for the whole answer; None: until proven
    gap: float = 0.0  # relative MIP gap accepted (0: prove optimality)
    threads: int = 1
    # False when the user named no solver (`--solver` absent): a strategy may then pick the
    # backend per problem (squeeze with DRBD moves runs CP-SAT, docs/squeeze.md)
    solver_given: bool = True
    # when the whole answer began (a perf_counter value: the process's start on the command
    # line, the call's in a server) and the perf_counter time it must end by; None: only
    # `time_limit`, counted by each holder from when it got the options
    started_at: float | None = None
    deadline_at: float | None = None

    def __post_init__(self) -> None:
        if self.solver not in SOLVERS:
            raise ValueError(f"unknown solver {self.solver!r} (expected one of {SOLVERS})")

    def kwargs(self) -> dict[str, Any]:
        """Keyword arguments of `solvers.solve` and `solvers.solve_lexicographic`."""
        return {
            "solver": self.solver,
            "time_limit": self.time_limit,
            "mip_gap": self.gap,
            "threads": self.threads,
        }

    def within(self, seconds: float | None) -> SolverOptions:
        """The same options with at most `seconds` left (None keeps the limit as it is)."""
        if seconds is None:
            return self
        if self.time_limit is None or seconds < self.time_limit:
            return replace(self, time_limit=seconds)
        return self

    def deadline(self) -> float | None:
        """The perf_counter time by which a solve started now must end: the answer's deadline
        when it is the earlier."""
        if self.time_limit is None:
            return self.deadline_at
        end = time.perf_counter() + self.time_limit
        return end if self.deadline_at is None else min(end, self.deadline_at)

    def left(self, reserve_s: float = 0.0, least_s: float = LEAST_S) -> SolverOptions:
        """The options of a stage starting now: `time_limit` is what is left of the answer's
        deadline less `reserve_s` (what the stages after this one need: the checker, the
        output, a greedy comparison), at least `least_s`, and `deadline_at` the stage's end;
        the options as they are without a deadline."""
        if self.deadline_at is None:
            return self
        now = time.perf_counter()
        seconds = max(self.deadline_at - now - reserve_s, least_s)
        # the stage's own deadline, which its parts (`deadline()`) keep to
        return replace(self, time_limit=seconds, deadline_at=min(self.deadline_at, now + seconds))

    def limited(self, seconds: float) -> SolverOptions:
        """A command's own default limit (hail's 60 s) where the user gave none: `seconds` for
        the whole answer, from its start."""
        if self.time_limit is not None:
            return self
        return answer_options(replace(self, time_limit=seconds), self.started_at)


def answer_options(options: SolverOptions, started_at: float | None) -> SolverOptions:
    """`options` for an answer that began at `started_at` (perf_counter; None: now): its
    deadline `started_at + time_limit`, and the time_limit of a holder starting now (the start-up
    already spent taken off, at least LEAST_S)."""
    now = time.perf_counter()
    began = now if started_at is None else min(started_at, now)
    if options.time_limit is None:
        return replace(options, started_at=began)
    deadline = began + options.time_limit
    seconds = max(deadline - now, LEAST_S)
    return replace(options, time_limit=seconds, started_at=began, deadline_at=deadline)


#: The options of a solve nobody configured: HiGHS, no time limit, proven optimal, one thread.
DEFAULT_OPTIONS = SolverOptions()
