"""Evaluate untrusted yaql expressions with bounded iterations, memory and time.

yaql bounds collection sizes (``yaql.limitIterators``) and approximate memory
(``yaql.memoryQuota``) itself but has no clock, so a CPU burn that stays under both
limits would run forever.  In the main thread we arm ``signal.setitimer``; anywhere
else (a worker thread cannot receive signals) the expression runs in a child process
killed after the time limit.

yaql's quota counts the values an expression makes, not its parser's: parsing a string
literal costs about 370 bytes per character (1 MB of expression took 392 MB and 3.4 s), so
an expression longer than the quota divided by PARSE_BYTES_PER_CHAR is refused unparsed
(2,500 characters with the default 1 MB; schemas' expressions are well under 200). One
sandbox also bounds the time of all its expressions together (a schema's whole rendering).
docs/reliability.md ("yaql") has the hostile expressions tried and the figures.
"""

from __future__ import annotations

import collections.abc  # noqa: F401  (must precede 'import yaql' on Python 3.11)
import dataclasses
import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import yaql
from yaql.language import exceptions as yaql_exceptions
from yaql.language import factory, specs, utils, yaqltypes

YAQL_PREFIX = re.compile(r"^\s*yaql\s*=\s*", re.DOTALL)


class YaqlError(Exception):
    """An expression failed or exceeded a limit; ``reason`` is one line for the user."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


#: What parsing costs per character of expression at most (measured: a string literal
#: ~370 bytes, sums and attribute chains ~140, lists ~75; docs/reliability.md).
PARSE_BYTES_PER_CHAR = 400


@dataclass(frozen=True)
class YaqlLimits:
    """Bounds applied to every expression (collections, approximate bytes, seconds), and to
    all expressions of one sandbox together (seconds)."""

    max_iterations: int = 10_000
    memory_quota_bytes: int = 1_000_000
    time_limit_s: float = 2.0
    total_time_s: float = 30.0

    @property
    def max_expression_chars(self) -> int:
        """The longest expression whose parsing stays within the memory quota."""
        return self.memory_quota_bytes // PARSE_BYTES_PER_CHAR


def yaql_expression(value: object) -> str | None:
    """The expression text if ``value`` is a ``yaql=...`` string, else None."""
    if isinstance(value, str):
        match = YAQL_PREFIX.match(value)
        if match:
            return value[match.end() :].strip()
    return None


def _refuse_big_integer(engine: Any, bits: int) -> None:
    """yaql checks the memory quota on a function's result, after computing it: one
    shiftBitsLeft(1, 16000000000) took 6.3 s and 2.1 GB before that check (issue 40, item
    6). The integer functions whose result may be far larger than their arguments are
    bounded by their result's size before computing it."""
    quota = utils.get_memory_quota(engine)
    if quota > 0 and bits // 8 > quota:
        raise yaql_exceptions.MemoryQuotaExceededException()


@specs.parameter("value", int)
@specs.parameter("bits_number", int)
@specs.name("shiftBitsLeft")
def _shift_bits_left(value: int, bits_number: int, engine: Any) -> int:
    if value:
        _refuse_big_integer(engine, value.bit_length() + bits_number)
    return value << bits_number


@specs.parameter("a", yaqltypes.Number())
@specs.parameter("b", yaqltypes.Number())
@specs.parameter("c", yaqltypes.Number(nullable=True))
@specs.name("pow")
def _pow(a: Any, b: Any, engine: Any, c: Any = None) -> Any:
    if c is None and isinstance(a, int) and isinstance(b, int) and b > 0:
        _refuse_big_integer(engine, (abs(a).bit_length() - 1) * b)
    return pow(a, b, c)


class _Timeout(BaseException):
    """Raised by the interval timer; a BaseException so yaql cannot swallow it."""


@contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    def _fire(signum: int, frame: object) -> None:
        raise _Timeout

    outer_left, _ = signal.getitimer(signal.ITIMER_REAL)  # a caller's timer, if any
    started = time.monotonic()
    previous = signal.signal(signal.SIGALRM, _fire)
    signal.setitimer(signal.ITIMER_REAL, seconds if not outer_left else min(seconds, outer_left))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer_left:  # give the caller's timer back what is left of it
            left = outer_left - (time.monotonic() - started)
            signal.setitimer(signal.ITIMER_REAL, max(left, 0.001))


class YaqlSandbox:
    """One engine and one base context (building a context costs ~15 ms), many evaluations."""

    def __init__(self, limits: YaqlLimits | None = None):
        self.limits = limits or YaqlLimits()
        self._engine = factory.YaqlFactory().create(
            options={
                "yaql.limitIterators": self.limits.max_iterations,
                "yaql.memoryQuota": self.limits.memory_quota_bytes,
                "yaql.treatSetsAsLists": True,
            }
        )
        base = yaql.create_context(datetime=False, regex=False, yaqlized=False)
        self._context = base.create_child_context()  # its functions hide the base's
        self._context.register_function(_shift_bits_left)
        self._context.register_function(_pow)
        self._spent_s = 0.0  # time of all evaluations so far, against limits.total_time_s

    def evaluate(self, expression: str, data: Any) -> Any:
        """Evaluate ``expression`` with ``$`` bound to ``data``; raise YaqlError on any failure."""
        longest = self.limits.max_expression_chars
        if len(expression) > longest:
            raise YaqlError(
                f"the expression has {len(expression)} characters, more than the {longest} "
                f"its memory quota of {self.limits.memory_quota_bytes} bytes lets it parse"
            )
        left = self.limits.total_time_s - self._spent_s
        if left <= 0:
            raise YaqlError(
                f"the expressions together used up their {self.limits.total_time_s:g} s "
                "(per-file time limit)"
            )
        seconds = min(self.limits.time_limit_s, left)
        started = time.monotonic()
        try:
            if threading.current_thread() is not threading.main_thread():
                limits = replace(self.limits, time_limit_s=seconds)
                try:
                    return _evaluate_in_child(expression, data, limits)
                except YaqlError as err:
                    if err.reason.startswith("stopped after"):
                        raise YaqlError(self._stopped(seconds)) from None
                    raise
            with _alarm(seconds):
                return self._evaluate_unbounded_time(expression, data)
        except _Timeout:
            raise YaqlError(self._stopped(seconds)) from None
        finally:
            self._spent_s += time.monotonic() - started

    def _stopped(self, seconds: float) -> str:
        """Which bound stopped an expression: its own, or what its file had left (issue 40,
        item 7: a schema stopped after 31 s said "stopped after 0.32 s (time limit)")."""
        if seconds < self.limits.time_limit_s:
            return (
                f"stopped after {seconds:.2g} s, the rest of the {self.limits.total_time_s:g} s "
                "all expressions of one schema share (per-file time limit)"
            )
        return f"stopped after {seconds:.2g} s (time limit of one expression)"

    def _evaluate_unbounded_time(self, expression: str, data: Any) -> Any:
        try:
            parsed = self._engine(expression)
            return parsed.evaluate(data=data, context=self._context.create_child_context())
        except yaql_exceptions.CollectionTooLargeException:
            raise YaqlError(
                f"a collection exceeded {self.limits.max_iterations} elements (iteration limit)"
            ) from None
        except yaql_exceptions.MemoryQuotaExceededException:
            raise YaqlError(
                f"exceeded the memory quota of {self.limits.memory_quota_bytes} bytes"
            ) from None
        except RecursionError:
            raise YaqlError("recursion too deep") from None
        except MemoryError:
            raise YaqlError("out of memory") from None
        except KeyError as err:
            raise YaqlError(f"no key {err} (use $.get(key, default))") from None
        except Exception as err:  # yaql raises many unrelated types; all are user errors here
            text = " ".join(str(err).split()) or type(err).__name__
            if len(text) > 200:  # yaql quotes its receiver, which may be the whole hardware
                text = text[:200] + "..."
            raise YaqlError(f"{type(err).__name__}: {text}") from None


def _evaluate_in_child(expression: str, data: Any, limits: YaqlLimits) -> Any:
    """Evaluate in a child process killed after the time limit (for non-main threads)."""
    request = json.dumps(
        {"expression": expression, "data": data, "limits": dataclasses.asdict(limits)}, default=str
    )
    try:
        done = subprocess.run(
            [sys.executable, "-m", "model.bareon.yaql_sandbox"],
            input=request,
            capture_output=True,
            text=True,
            timeout=limits.time_limit_s + 5.0,  # interpreter start-up; the child arms its own timer
        )
    except subprocess.TimeoutExpired:
        raise YaqlError(f"stopped after {limits.time_limit_s:g} s (time limit)") from None
    try:
        reply = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise YaqlError(f"evaluator process failed (exit {done.returncode})") from None
    if "error" in reply:
        raise YaqlError(reply["error"])
    return reply["value"]


def _child_main() -> int:
    request = json.loads(sys.stdin.read())
    sandbox = YaqlSandbox(YaqlLimits(**request["limits"]))
    try:
        value = sandbox.evaluate(request["expression"], request["data"])
        sys.stdout.write(json.dumps({"value": value}, default=str))
    except YaqlError as err:
        sys.stdout.write(json.dumps({"error": err.reason}))
    return 0


if __name__ == "__main__":
    sys.exit(_child_main())
