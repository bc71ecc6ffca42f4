"""Exceptions carrying a one-line user message; only cli.py maps them to exit codes."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


def printable(text: str, limit: int | None = None) -> str:
    """`text` safe to quote on one line of a terminal or a log: every character Python, a
    terminal or a log reader could take for a line break or a control (newline, vertical tab,
    the separators \\x1c-\\x1e, U+0085, U+2028, escapes, undecodable bytes) is written as a
    Python escape; with `limit`, at most that many characters are kept."""
    kept = text if limit is None else text[:limit]
    out = []
    for char in kept:
        if char.isprintable() or char == "\t":
            out.append(char)
        else:
            out.append(repr(char)[1:-1] if ord(char) > 31 else f"\\x{ord(char):02x}")
    return "".join(out) + ("..." if len(kept) < len(text) else "")


class ExallocError(Exception):
    """Base of every error the CLI reports as one line (never a traceback)."""

    exit_code = 1

    def __init__(self, message: str, *, source: str | None = None, line: int | None = None):
        super().__init__(message)
        self.message = message
        self.source = source
        self.line = line

    def __str__(self) -> str:
        where = ""
        if self.source is not None:
            where = f"{self.source}:{self.line}: " if self.line is not None else f"{self.source}: "
        return f"{where}{self.message}"


@contextmanager
def about(source: str | None) -> Iterator[None]:
    """An error raised inside that names no file names `source`: the input the solve, the
    check or the solver failure was about (the one line the user gets must say which)."""
    try:
        yield
    except ExallocError as err:
        if err.source is None and source is not None and not isinstance(err, UsageError):
            err.source = str(source)
        raise


class UsageError(ExallocError):
    """A command line that cannot be run (an option out of range, no inputs): exit 2, with the
    command's usage line, before anything is read or written."""

    exit_code = 2


class InputError(ExallocError):
    """Malformed or inconsistent input (text backend, JSON, YAML, yaql, schema)."""


class HtoolsError(InputError):
    """An input error a stand-in reports in the htools program's own words, as `CLI.exitErr`
    prints them (`Error: MESSAGE` on stderr, exit 1): Ganeti's shell tests and the scripts
    that call htools match the line (htools-invalid.test, htools-no-backend.test). A newline
    ending the message is an empty line after it, as htools' `exitErr (printf "...\\n")`."""

    def __str__(self) -> str:
        return f"Error: {self.message}"


class InfeasibleError(ExallocError):
    """The question has no answer; the message says which requirements conflict."""


class SolverError(ExallocError):
    """The solver backend failed or cannot express the model."""


class CheckFailedError(ExallocError):
    """The independent checker rejected an answer; it is never printed."""


class LiveSourceError(ExallocError):
    """A running cluster could not be read through RAPI or LUXI: no connection, a time-out, an
    HTTP or LUXI error, or a malformed or partial reply. `source` names the address or socket."""


class JobError(ExallocError):
    """Jobs submitted to a live cluster (`-X`) were refused or did not all succeed, or the run
    was cancelled before its last job set (model/backends/jobs.py)."""


class LockError(ExallocError):
    """A lock that does not exist (any more), or a name added twice (service.locking)."""


class BadRequestError(InputError):
    """A request to the allocation service that cannot be served as asked (one line)."""


class ServiceError(ExallocError):
    """The allocation service cannot start, be reached or answer (one line)."""


class OutputError(ExallocError):
    """An output file cannot be written (missing folder, no permission, full disk)."""
