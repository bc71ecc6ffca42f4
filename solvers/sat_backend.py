"""A clause-learning SAT solver (MiniSat 2.2, through PySAT) for clause formulations.

Why PySAT: it ships MiniSat, Glucose and CaDiCaL compiled in its wheel (no binary to fetch),
solves incrementally (clauses added between calls keep what was learnt) and can be
interrupted, which is how a deadline is kept. Used by the roll strategy for its colouring
relaxation (formulations/roll_sat.py), where it proves "no plan of k rounds" 3-4 times faster
than CP-SAT on the same clauses (docs/roll.md).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pysat.solvers import Solver

#: The solver PySAT runs. MiniSat: on the 400-node benchmark's colourings (seeds 0, 1, 3, 6
#: found, 10, 11 proven impossible) 0.08-1.5 s and 0.29-0.36 s, Glucose 4.2 0.10-2.1 s and
#: 0.35-0.71 s, CaDiCaL 1.5.3 0.23-1.9 s and 0.73-1.1 s (load 4); PySAT cannot interrupt
#: CaDiCaL, so it could not keep a deadline anyway.
NAME = "minisat22"
LABEL = "minisat"  # as the notes and --json name it


@dataclass(frozen=True)
class SatAnswer:
    """satisfiable: True, False (proven), or None (stopped at the deadline)."""

    satisfiable: bool | None
    model: tuple[int, ...]
    seconds: float


class SatSession:
    """One incremental solver: clauses added, then `solve` as often as needed."""

    def __init__(self, clauses: Iterable[Sequence[int]]) -> None:
        self._solver = Solver(name=NAME, bootstrap_with=[list(c) for c in clauses])

    def set_phases(self, literals: Sequence[int]) -> None:
        """The value each variable is tried with first (MiniSat's saved phases)."""
        self._solver.set_phases(list(literals))

    def add(self, clauses: Iterable[Sequence[int]]) -> None:
        for c in clauses:
            self._solver.add_clause(list(c))

    def solve(self, time_limit: float | None, conflicts: int | None = None) -> SatAnswer:
        """satisfiable None when stopped by `time_limit` seconds or `conflicts` conflicts
        (what was learnt stays for the next call)."""
        start = time.perf_counter()
        self._solver.conf_budget(conflicts if conflicts is not None else -1)
        timer = None
        if time_limit is not None:
            timer = threading.Timer(max(time_limit, 0.0), self._solver.interrupt)
            timer.start()
        try:
            found = self._solver.solve_limited(expect_interrupt=True)
        finally:
            if timer is not None:
                timer.cancel()
                self._solver.clear_interrupt()
        model = tuple(self._solver.get_model() or ()) if found else ()
        return SatAnswer(found, model, time.perf_counter() - start)

    def close(self) -> None:
        self._solver.delete()

    def __enter__(self) -> SatSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
