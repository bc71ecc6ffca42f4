"""File descriptors 1 and 2 pointed at /dev/null while HiGHS runs, for every way exalloc
runs it (Pyomo's persistent interface in solvers/highs_backend.py, highspy directly in
solvers/highs_arrays.py): HiGHS's C++ code prints some lines by itself whatever its log options
say ("HighsMipSolverData::transformNewIntegerFeasibleSolution tmpSolver.run();" from its MIP
heuristics came first on the stdout of `exalloc balance --json`, before the JSON), and a
program's stdout (JSON, hbal's table, an iallocator's answer) must hold nothing but the answer.
One object per process: the descriptors are the process's.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class SilencedFds:
    """Point file descriptors 1 and 2 at /dev/null while HiGHS runs: its C++ code prints a
    few lines by itself (e.g. from its MIP heuristics) even with its log off, and an
    iallocator's stdout must hold nothing but the answer. Descriptors belong to the process,
    so solves in several threads share one redirection (the first in sets it up, the last out
    restores it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._saved: list[int] = []

    @contextmanager
    def __call__(self) -> Iterator[None]:
        with self._lock:
            if self._users == 0:
                sys.stdout.flush()
                sys.stderr.flush()
                self._saved = [os.dup(1), os.dup(2)]
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, 1)
                os.dup2(null, 2)
                os.close(null)
            self._users += 1
        try:
            yield
        finally:
            with self._lock:
                self._users -= 1
                if self._users == 0:
                    os.dup2(self._saved[0], 1)
                    os.dup2(self._saved[1], 2)
                    for fd in self._saved:
                        os.close(fd)
                    self._saved = []


silenced_fds = SilencedFds()
