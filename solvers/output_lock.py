"""Pyomo's output-capture lock, made one per process.

Pyomo serialises its capture of a process's stdout/stderr (`capture_output`, which HiGHS's
persistent interface enters at every `set_instance` and solve) with one lock that, once
`multiprocessing` is imported, is a multiprocessing lock: a semaphore shared by every process
forked from the one that made it. A forked process killed while it holds it (a batch worker
killed by the OOM killer or by a broken pool's clean-up, a hail-server worker past its bound)
leaves it held for all the others: each later solve, in the parent as in every worker forked
after, waits 200 s and fails ("Deadlock starting capture_output"). exalloc's processes
capture their own descriptors only, so a lock of their own is enough, and a fresh one in each
forked child (tests/test_solvers.py; the batch test of a worker dying inside a solve).
"""

from __future__ import annotations

import functools
import os
import threading


@functools.cache
def one_per_process() -> None:
    """Replace Pyomo's shared lock in this process, and in every child forked from it (once)."""
    from pyomo.common import dependencies

    # the lock is upgraded when Pyomo's deferred import of multiprocessing resolves: resolve it
    # first, so that the upgrade cannot come after the replacement
    dependencies.multiprocessing.Lock  # noqa: B018 - the attribute resolves the deferred import
    _fresh_lock()
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_fresh_lock)


def _fresh_lock() -> None:
    from pyomo.common import dependencies

    dependencies.capture_output_lock = threading.Lock()
