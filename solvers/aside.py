"""A pure computation run beside the solver, in a forked child process.

hail's node-evacuate walk is pure Python (minutes in hail, seconds here) and HiGHS is C++ on
one thread: on two cores the walk need not hold up the model (docs/placement.md). A thread
would share the interpreter lock with the model's construction, so the walk runs in a child
forked from the current process (no re-import, no arguments to pickle); only its answer comes
back, pickled, through a pipe. Linux only (os.fork), as Ganeti.
"""

from __future__ import annotations

import mmap
import os
import pickle
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class _Failed:
    """What a child that raised sends back instead of a value: the exception, one line."""

    error: str


class Aside:
    """`Aside(fn, *args)` starts fn(*args) in a forked child; `result()` waits for it and
    returns its value, or None when the child failed (the caller then does without it, and
    `failure` says why when the child could say: a bug there must not pass unseen)."""

    def __init__(self, fn: Callable[..., Any], *args: Any) -> None:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: compute, send, leave without running the parent's exit code
            code = 0
            try:
                os.close(read)
                try:
                    data = pickle.dumps(fn(*args))
                except Exception as e:  # noqa: BLE001 - sent to the parent, which goes on
                    code = 1
                    data = pickle.dumps(_Failed(f"{type(e).__name__}: {e}"))
                with os.fdopen(write, "wb") as out:
                    out.write(data)
            except BaseException:  # noqa: BLE001 - the parent sees no answer and goes on
                code = 1
            finally:
                os._exit(code)
        os.close(write)
        self._pid = pid
        self._read = read
        self.failure: str | None = None

    def cancel(self) -> None:
        """Stop the child and reap it (the caller failed before it needed the answer)."""
        try:
            os.kill(self._pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.close(self._read)
        os.waitpid(self._pid, 0)

    def result(self) -> Any:
        with os.fdopen(self._read, "rb") as source:
            data = source.read()
        _, status = os.waitpid(self._pid, 0)
        if status != 0 or not data:
            try:
                failed = pickle.loads(data) if data else None
            except Exception:  # noqa: BLE001 - cut short: killed while writing
                failed = None
            if isinstance(failed, _Failed):
                self.failure = failed.error
            elif status != 0:
                self.failure = f"the process ended with status {status}"
            return None
        return pickle.loads(data)


class Flag:
    """A flag that a parent sets and its forked children read: one byte of anonymous shared
    memory, made before the fork (the parent tells a child's long search to stop early)."""

    def __init__(self) -> None:
        self._memory = mmap.mmap(-1, 1)

    def set(self) -> None:
        self._memory[0] = 1

    def __call__(self) -> bool:
        return self._memory[0] == 1


def can_fork() -> bool:
    return hasattr(os, "fork")
