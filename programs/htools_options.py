"""The conventions every htools program keeps, for exalloc's stand-ins (issue 39).

Ganeti's shell tests (htools-basic.test, htools-invalid.test, htools-no-backend.test) ask
each program for them:

* `-V/--version` and `--help-completion` exit 0. The completion text is htools'
  (`Ganeti.Common.completionInfo`): a line per option, its short and long names joined by
  commas and the kind of value it takes (`none` for a flag), then a line per positional
  argument kind with its minimum and maximum count (`none`: no maximum). Ganeti's bash
  completion reads it.
* A program without positional arguments refuses one with `Error: This program doesn't take
  any arguments.` and exit 1 (`CLI.exitErr`), not a usage error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass

#: The kind of value an option takes, by its metavar (Ganeti's OptCompletion names).
_KINDS = {
    "FILE": "file",
    "SOCKET": "file",
    "DIR": "dir",
    "PATH": "dir",
    "ADDRESS": "host",
    "N": "integer",
    "MIB": "integer",
    "SECONDS": "numeric",
    "REL": "numeric",
    "THREADS": "integer",
}


@dataclass(frozen=True)
class ArgumentKind:
    """A positional argument's completion: `host 0 none` is any number of hosts."""

    kind: str
    minimum: int = 0
    maximum: int | None = None

    def line(self) -> str:
        return f"{self.kind} {self.minimum} {'none' if self.maximum is None else self.maximum}"


class _HelpCompletion(argparse.Action):
    def __init__(self, option_strings: Sequence[str], dest: str, arguments=(), **_: object) -> None:  # noqa: ANN001
        super().__init__(
            option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="show completion info"
        )
        self.arguments = tuple(arguments)

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        sys.stdout.write(completion_text(parser, self.arguments))
        parser.exit()


class _Version(argparse.Action):
    def __init__(
        self, option_strings: Sequence[str], dest: str, program: str = "", **_: object
    ) -> None:
        super().__init__(
            option_strings,
            dest,
            nargs=0,
            default=argparse.SUPPRESS,
            help="show the version of the program",
        )
        self.program = program

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        from programs.version import version

        sys.stdout.write(f"exalloc {version()} (in place of {self.program})\n")
        parser.exit()


def add_generic_options(
    parser: argparse.ArgumentParser, program: str, arguments: Sequence[ArgumentKind] = ()
) -> None:
    """htools' generic options (`CLI.genericOpts`): -V/--version and --help-completion."""
    parser.add_argument("-V", "--version", action=_Version, program=program)
    parser.add_argument("--help-completion", action=_HelpCompletion, arguments=arguments)


def _kind(action: argparse.Action) -> str:
    if action.nargs == 0:
        return "none"
    if action.choices:
        return "choices=" + ",".join(map(str, action.choices))
    metavar = action.metavar if isinstance(action.metavar, str) else ""
    return _KINDS.get(metavar, "string")


def completion_text(parser: argparse.ArgumentParser, arguments: Sequence[ArgumentKind]) -> str:
    """`completionInfo`: the options in the parser's order, short names first, then the
    positional arguments' kinds."""
    lines = []
    for action in parser._actions:  # noqa: SLF001 - argparse has no API for its options
        if not action.option_strings or action.help == argparse.SUPPRESS:
            continue
        names = sorted(action.option_strings, key=lambda s: (s.startswith("--"), s))
        lines.append(f"{','.join(names)} {_kind(action)}")
    lines += [argument.line() for argument in arguments]
    return "".join(line + "\n" for line in lines)


@dataclass(frozen=True)
class HtoolsExit:
    """A report that is only htools' own message on stderr and its exit code (cli.py prints
    a report's `stderr` as it is)."""

    stderr: str
    exit_code: int

    def text(self) -> str:
        return ""

    def to_json(self) -> dict[str, object]:
        return {"error": self.stderr.strip(), "exit_code": self.exit_code}


NO_ARGUMENTS = HtoolsExit("Error: This program doesn't take any arguments.\n", 1)
