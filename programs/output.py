"""What a program standing in for an htools binary prints: its stdout, its stderr, its exit code,
exalloc's notes beside them and the `--json` object.

cli.py prints every report the same way (stdout from `text()` or `to_json()`, then each note and
the stderr text on stderr, then the exit code), so space, roll and balance share this one shape
instead of each declaring its own."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ProgramOutput:
    """The htools program's bytes (stdout, stderr, exit code) and exalloc's own additions."""

    stdout: str
    stderr: str = ""
    exit_code: int = 0
    json: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # exalloc's, printed after the program's stderr as `note:` lines

    def text(self) -> str:
        return self.stdout

    def to_json(self) -> dict[str, Any]:
        return self.json
