"""Where `exalloc batch`'s tasks run: a local process pool, or with `--scheduler` a Dask
distributed cluster, yielding each record as it completes.

The pool survives its workers: one killed under a task (OOM) breaks the pool, which is rebuilt;
the inputs in flight are run again alone, and only one that kills its worker there too is
recorded as failed. Workers die with the batch process (Linux's parent-death signal), so a
rerun right after a kill starts at once (docs/batch.md, "Interrupted runs").
"""

from __future__ import annotations

import dataclasses
import os
import signal
import tempfile
import uuid
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from model.errors import ExallocError
from programs.runners import solve_task
from programs.tasks import (
    Options,
    Task,
)

CONNECT_TIMEOUT = "10s"  # how long to wait for a Dask scheduler before giving up


def _failed(task: Task, error: str) -> dict[str, Any]:
    return {
        "input": task.input,
        "problem": task.problem,
        "size": task.size,
        "status": "error",
        "error": error,
    }


#: prctl(2) option: the signal a process gets when its parent dies (linux/prctl.h).
_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int) -> None:
    """Ask Linux to SIGKILL this worker when the batch process dies, whatever kills it: an
    orphaned worker would only burn CPU on an input nobody will record."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the worker ends with its next task
        return
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def _worker_init(parent: int) -> None:
    """Each pool worker: die with the batch process, then warm up."""
    _die_with_parent(parent)
    _warm_up()


def _warm_up() -> None:
    """Import the solver stack once per worker, so the first input's time is its own."""
    import importlib

    for name in (
        "pyomo.core",
        "solvers.strategies.squeeze",
        "programs.hail",
        "programs.partition",
    ):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the task's own import reports it, as a failed input
            pass


def _solve_marked(task: Task, options: Options, marker: str) -> dict[str, Any]:
    """solve_task, leaving `marker` on disk while it runs: if the worker dies, the parent sees
    which inputs were in flight (a broken pool fails every future, started or not)."""
    Path(marker).touch()
    try:
        return solve_task(task, options)
    finally:
        Path(marker).unlink(missing_ok=True)


def _pool_run(
    tasks: dict[tuple[str, str], Task], options: Options, workers: int, markers: dict
) -> Iterator[tuple[Task, dict[str, Any] | None]]:
    """(task, record) as they complete; then (task, None) for each task that was in flight
    when a worker died. Tasks that never started stay in `tasks` for the caller to retry."""
    pool = ProcessPoolExecutor(
        max_workers=workers, initializer=_worker_init, initargs=(os.getpid(),)
    )
    futures: dict[Future, Task] = {}
    broken = False
    for t in tasks.values():
        try:
            futures[pool.submit(_solve_marked, t, options, markers[t.key])] = t
        except BrokenProcessPool:  # a worker died while the rest were being handed out
            broken = True  # (those never started: they stay in `tasks`)
            break
    try:
        while futures and not broken:
            finished, _ = wait(futures, return_when=FIRST_COMPLETED)
            for future in finished:
                task = futures.pop(future)
                try:
                    record = future.result()
                except BrokenProcessPool:
                    broken = True
                    continue
                del tasks[task.key]
                yield task, record
    finally:
        pool.shutdown(wait=not broken, cancel_futures=True)
    for key in [k for k in tasks if os.path.exists(markers[k])]:
        os.unlink(markers[key])
        yield tasks.pop(key), None


def run_local(tasks: list[Task], options: Options, workers: int) -> Iterator[dict[str, Any]]:
    """Records as they complete, from a local process pool that is rebuilt if a worker dies.

    The inputs in flight when a worker died are suspects: each is run again alone, and only
    one that kills its worker there too is recorded as failed. The rest simply go on."""
    pending = {t.key: t for t in tasks}
    suspects: list[Task] = []
    with tempfile.TemporaryDirectory(prefix="exalloc-batch-") as scratch:
        markers = {key: os.path.join(scratch, f"{n}.running") for n, key in enumerate(pending)}
        idle_breaks = 0  # pools that died before any input ran (e.g. in the initializer)
        while pending and idle_breaks < 3:
            before = len(pending)
            for task, record in _pool_run(pending, options, workers, markers):
                if record is None:
                    suspects.append(task)
                else:
                    yield record
            idle_breaks = idle_breaks + 1 if len(pending) == before else 0
        suspects += pending.values()  # only left if workers keep dying before starting
        for task in suspects:
            alone = {task.key: task}
            results = [r for _, r in _pool_run(alone, options, 1, markers) if r is not None]
            yield results[0] if results else _failed(task, "worker process died on this input")


def _absolute(task: Task) -> Task:
    """The task with absolute paths: Dask workers need not share this process's folder
    (a live cluster travels as its snapshot, under its label)."""
    if task.live is not None:
        return task
    hw = os.path.abspath(task.hw) if task.hw else None
    return dataclasses.replace(task, input=os.path.abspath(task.input), hw=hw)


def run_dask(tasks: list[Task], options: Options, address: str) -> Iterator[dict[str, Any]]:
    """Records as they complete on a Dask distributed cluster (the same task function)."""
    try:
        from dask.distributed import Client, as_completed
    except ImportError:
        raise ExallocError(
            "--scheduler needs dask[distributed]: pip install 'dask[distributed]'"
        ) from None
    try:
        client = Client(address, timeout=CONNECT_TIMEOUT)
    except (OSError, TimeoutError, ValueError, TypeError) as err:  # ValueError: bad address
        raise ExallocError(f"cannot reach the Dask scheduler at {address}: {err}") from None
    try:
        run = uuid.uuid4().hex[:12]  # keys unique per run: schedulers are shared
        futures = {
            client.submit(
                solve_task, _absolute(t), options, pure=False, key=f"exalloc-{t.problem}-{run}-{i}"
            ): t
            for i, t in enumerate(tasks)
        }
        for future in as_completed(futures):
            task = futures[future]
            try:
                record = future.result()
            except Exception as err:  # noqa: BLE001 - a lost worker is one failed input
                record = _failed(task, f"dask: {type(err).__name__}: {err}")
            future.release()
            yield {**record, "input": task.input}  # the key stays the path as given
    finally:
        client.close()
