"""The machinery `cli.py` builds exalloc's command line with: usage errors as htools prints
them, commands whose arguments are added only once chosen (so `exalloc --help` and an
`exalloc-hail` call import no program they do not run: docs/hail.md, "Start-up"), and `-V`.
The option groups programs share are programs/options.py. Imports argparse and nothing heavier.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

#: The exit code of a usage error (argparse's).
EXIT_USAGE = 2


class Parser(argparse.ArgumentParser):
    """argparse that prints usage errors as 'exalloc: error: ...' and exits 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
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
