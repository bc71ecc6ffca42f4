"""Exceptions carrying a one-line user message; only cli.py maps them to exit codes."""

from __future__ import annotations


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


class InputError(ExallocError):
    """Malformed or inconsistent input (text backend, JSON, YAML, yaql, schema)."""


class InfeasibleError(ExallocError):
    """The question has no answer; the message says which requirements conflict."""


class SolverError(ExallocError):
    """The solver backend failed or cannot express the model."""


class CheckFailedError(ExallocError):
    """The independent checker rejected an answer; it is never printed."""


class OutputError(ExallocError):
    """An output file cannot be written (missing folder, no permission, full disk)."""
