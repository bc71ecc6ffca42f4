"""The machinery `cli.py` builds exalloc's command line with: usage errors as htools prints
them, commands whose arguments are added only once chosen (so `exalloc --help` and an
`exalloc-hail` call import no program they do not run: docs/hail.md, "Start-up"), and `-V`.
With them, htools' conventions every command keeps (`-V/--version`, `--help-completion`:
`standard_options`). The option groups programs share are programs/options.py. Imports
argparse and nothing heavier.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

#: The exit code of a usage error (argparse's).
EXIT_USAGE = 2

#: The exit code of an option value htools refuses in its own words (CLI.parseOpts: exitErr).
EXIT_OPTION_VALUE = 1


class HtoolsValueError(argparse.ArgumentTypeError):
    """An option's value refused as htools refuses it: `Error while parsing command line
    arguments:` and htools' message on stderr, exit 1 (Ganeti's `parseOpts` on a `Bad` from an
    option's parser), not argparse's usage and exit 2 (which htools keeps for an unknown
    option). A program standing in for an htools one raises it from its option types."""


class Parser(argparse.ArgumentParser):
    """argparse that prints usage errors as 'exalloc: error: ...' and exits 2, and an
    HtoolsValueError as htools prints it, exit 1."""

    def error(self, message: str) -> None:  # type: ignore[override]
        # argparse wraps the type's error in an ArgumentError and calls error() in its handler
        cause = getattr(sys.exc_info()[1], "__context__", None)
        if isinstance(cause, HtoolsValueError):
            self.exit(EXIT_OPTION_VALUE, f"Error while parsing command line arguments:\n{cause}\n")
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog.split()[0]}: error: {message}\n")


class Commands(argparse._SubParsersAction):
    """The commands, each program's own arguments added only once its command is chosen, by
    `fill(name, parser)`: `exalloc --help` and an `exalloc-hail` call import no program they do
    not run (start-up time, docs/hail.md)."""

    fill: Callable[[str, argparse.ArgumentParser], None]

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        chosen = self.choices.get(values[0]) if values else None
        if chosen is not None:
            self.fill(values[0], chosen)
        super().__call__(parser, namespace, values, option_string)


class VersionAction(argparse.Action):
    """-V/--version, looked up only when asked for; a stand-in says which program it stands
    in for (`program`)."""

    def __init__(
        self, option_strings: Sequence[str], dest: str, help: str, program: str = ""
    ) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)
        self.program = program

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        from programs.version import version

        instead = f" (in place of {self.program})" if self.program else ""
        sys.stdout.write(f"exalloc {version()}{instead}\n")
        parser.exit()


def version_option(parser: argparse.ArgumentParser, program: str = "") -> None:
    """`-V`/`--version`, as every htools program's (`oShowVer`)."""
    parser.add_argument(
        "-V",
        "--version",
        action=VersionAction,
        program=program,
        help="show the version and exit",
    )


# -- htools' conventions on every command (Ganeti.Common; issue 39) -----------------------------
#
# Ganeti's shell tests (htools-basic.test, htools-invalid.test, htools-no-backend.test) ask
# every program for `-V/--version` and `--help-completion` (exit 0), refuse an unknown option
# as a usage error (exit 2) and an input error with exit 1. cli.py gives every command the two
# options (`standard_options`); a program that stands in for an htools one adds them first,
# naming it.

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
    "NODE": "onenode",
    "GROUP": "onegroup",
}


@dataclass(frozen=True)
class ArgumentKind:
    """A positional argument's completion: `host 0 none` is any number of hosts."""

    kind: str
    minimum: int = 0
    maximum: int | None = None

    def line(self) -> str:
        return f"{self.kind} {self.minimum} {'none' if self.maximum is None else self.maximum}"


class HelpCompletionAction(argparse.Action):
    """--help-completion: `Ganeti.Common.completionInfo`'s text, then exit 0."""

    def __init__(
        self,
        option_strings: Sequence[str],
        dest: str,
        arguments: Sequence[ArgumentKind] | None = None,
        **_: object,
    ) -> None:
        super().__init__(
            option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="show completion info"
        )
        self.arguments = arguments

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        sys.stdout.write(completion_text(parser, self.arguments))
        parser.exit()


def standard_options(
    parser: argparse.ArgumentParser,
    program: str = "",
    arguments: Sequence[ArgumentKind] | None = None,
) -> None:
    """htools' generic options (`CLI.genericOpts`): -V/--version and --help-completion, each
    unless the parser has it already. `arguments`: the positional arguments' kinds for the
    completion text (default: read from the parser's positionals)."""
    taken = parser._option_string_actions  # noqa: SLF001 - argparse has no API for it
    if "--version" not in taken:
        names = ("--version",) if "-V" in taken else ("-V", "--version")
        parser.add_argument(*names, action=VersionAction, program=program, help="show the version")
    if "--help-completion" not in taken:
        parser.add_argument("--help-completion", action=HelpCompletionAction, arguments=arguments)


def _kind(action: argparse.Action) -> str:
    if action.nargs == 0:
        return "none"
    if action.choices:
        return "choices=" + ",".join(map(str, action.choices))
    metavar = action.metavar if isinstance(action.metavar, str) else action.dest.upper()
    return _KINDS.get(metavar, "string")


def _positional_kinds(parser: argparse.ArgumentParser) -> list[ArgumentKind]:
    """The completion of each shown positional argument: its kind and how many it takes."""
    kinds = []
    for action in parser._actions:  # noqa: SLF001
        if action.option_strings or action.help == argparse.SUPPRESS:
            continue
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            kinds.append(ArgumentKind("choices=" + ",".join(action.choices), 1, 1))
            continue
        counts = {None: (1, 1), "?": (0, 1), "*": (0, None), "+": (1, None)}
        low, high = counts.get(action.nargs, (action.nargs, action.nargs))  # type: ignore[arg-type]
        metavar = action.metavar if isinstance(action.metavar, str) else ""
        kind = "file" if "." in metavar or metavar in ("FILE", "PATH") else _kind(action)
        kinds.append(ArgumentKind(kind, low, high))
    return kinds


def completion_text(
    parser: argparse.ArgumentParser, arguments: Sequence[ArgumentKind] | None = None
) -> str:
    """`completionInfo`: a line per option in the parser's order (short names first, joined
    by commas, and the kind of value it takes: `none` for a flag), then a line per positional
    argument kind with its minimum and maximum count (`none`: no maximum). Ganeti's bash
    completion reads it."""
    lines = []
    for action in parser._actions:  # noqa: SLF001 - argparse has no API for its options
        if not action.option_strings or action.help == argparse.SUPPRESS:
            continue
        names = sorted(action.option_strings, key=lambda s: (s.startswith("--"), s))
        lines.append(f"{','.join(names)} {_kind(action)}")
    kinds = _positional_kinds(parser) if arguments is None else arguments
    lines += [argument.line() for argument in kinds]
    return "".join(line + "\n" for line in lines)
