"""A long solve's progress on stderr (issue 40, item 5): the stage, the best answer so far,
the bound, the gap and the time elapsed, as one status line.

It is shown when stderr is a terminal or with `--progress`, never on stdout, and never in
iallocator mode (`exalloc-hail`, the hail-server's calls) unless `--progress` is given: cli.py
decides and opens `reporting(...)` around the program's run. What a solve knows is reported
through `current()`: the lexicographic driver names each stage, the HiGHS backend reports its
incumbent and bound while it branches, the CP-SAT backend each incumbent and bound it
finds. Progress is observation only and never changes an
answer, which is why it travels with the run (a context variable, one per thread and task)
rather than through every strategy's options.
"""

from __future__ import annotations

import contextvars
import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

_CURRENT: contextvars.ContextVar[StatusLine | None] = contextvars.ContextVar(
    "exalloc_progress", default=None
)

#: Seconds between two lines when stderr is not a terminal (a log stays readable).
LINE_EVERY_S = 5.0
#: Seconds between two redraws of the terminal's status line.
REDRAW_EVERY_S = 0.5


def _number(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x:.10g}"


class StatusLine:
    """The status of one command's solves, drawn on a stream by a ticker thread."""

    def __init__(self, stream: TextIO, *, terminal: bool) -> None:
        self._stream = stream
        self._terminal = terminal
        self._lock = threading.Lock()
        self._started = time.perf_counter()
        self._stage = ""
        self._best: float | None = None
        self._bound: float | None = None
        self._gap: float | None = None
        self._last_line = 0.0
        self._drawn = False
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, name="exalloc-progress", daemon=True)
        self._ticker.start()

    def stage(self, name: str, index: int, count: int) -> None:
        """A solver stage begins (index from 0)."""
        with self._lock:
            self._stage = f"{name} ({index + 1}/{count})" if count > 1 else name
            self._best = self._bound = self._gap = None
        self._draw(force=True)

    def solving(self, best: float | None, bound: float | None, gap: float | None) -> None:
        """The solver's incumbent, bound and relative gap now."""
        with self._lock:
            self._best, self._bound, self._gap = best, bound, gap
        self._draw()

    def text(self) -> str:
        with self._lock:
            elapsed = time.perf_counter() - self._started
            gap = "-" if self._gap is None or not math.isfinite(self._gap) else f"{self._gap:.2%}"
            return (
                f"exalloc: {self._stage or 'starting'}: best {_number(self._best)}, "
                f"bound {_number(self._bound)}, gap {gap}, {elapsed:.0f} s"
            )

    def _draw(self, force: bool = False) -> None:
        now = time.perf_counter()
        if self._terminal:
            if not force and now - self._last_line < REDRAW_EVERY_S:
                return
        elif now - self._last_line < LINE_EVERY_S or now - self._started < LINE_EVERY_S:
            return  # a log gets a line every few seconds, and a short command none
        self._last_line = now
        line = self.text()
        try:
            if self._terminal:
                self._stream.write(f"\r{line}\x1b[K")
            else:
                self._stream.write(line + "\n")
            self._stream.flush()
            self._drawn = True
        except (OSError, ValueError):
            self._stop.set()

    def _tick(self) -> None:
        while not self._stop.wait(REDRAW_EVERY_S):
            self._draw()

    def close(self) -> None:
        self._stop.set()
        self._ticker.join(timeout=1.0)
        if self._terminal and self._drawn:
            try:  # the status line goes; what the command prints comes on a clean line
                self._stream.write("\r\x1b[K")
                self._stream.flush()
            except (OSError, ValueError):
                pass


@contextmanager
def reporting(stream: TextIO | None, *, terminal: bool = False) -> Iterator[StatusLine | None]:
    """Report the solves run inside on `stream` (None: report nothing)."""
    if stream is None:
        yield None
        return
    line = StatusLine(stream, terminal=terminal)
    token = _CURRENT.set(line)
    try:
        yield line
    finally:
        _CURRENT.reset(token)
        line.close()


def current() -> StatusLine | None:
    """The status line of the run in progress, if it reports."""
    return _CURRENT.get()
