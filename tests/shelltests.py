"""Ganeti's shell tests (`test/hs/shelltests/htools-*.test`) read and run as Ganeti runs them.

Three parts, each following its original:

* `parse`: shelltestrunner's test format 1, the one Ganeti's files use (shelltestrunner's
  `Parse.hs`, `format1test`): a one-line command, optional `<<<` stdin, `>>>` stdout and `>>>2`
  stderr expectations (a `/regex/` or `!/regex/` that may span lines, or literal lines that must
  equal the whole output), and a required `>>>=` exit status (`N`, `!N`, a regex, or nothing:
  anything). A part left out is not checked.
* `posix_regex`: the regex flavour. shelltestrunner matches with regex-tdfa's `=~` and its
  default options (`Utils.containsRegex`): POSIX extended syntax, *multiline* (`^` and `$` match
  at every line's ends; `.` and a negated bracket never match a newline), searched anywhere in
  the output. Translated to Python's `re`; a search finds a match exactly when the POSIX one does
  (leftmost-longest and leftmost-first differ in which match, never in whether one exists).
* `Workspace`: `test/hs/offline-test.sh`'s set-up. Commands run through `sh -c` from a top
  directory whose `test/hs/PROGRAM` is the program under test (the real htools binary, or a
  script that runs exalloc's stand-in), with the variables offline-test.sh exports
  (`TESTDATA_DIR`, `PYTESTDATA_DIR`, `T`, `BACKEND_*`, `RAPI_URL`) and the `$T` files it makes:
  hspace's simulated clusters (`simu-*`, made by the real hspace in either mode: they are the
  tests' inputs, not what they judge), the sed-made IAllocator variants, and the hscan/hinfo
  files of htools-rapi.test (made by the programs under test, which that test judges).

The files' tests run in order in one `$T`, as shelltest runs them: some read what an earlier
one wrote (htools-balancing.test's `-S` and `-C` files).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

#: The htools programs the shell tests call as ./test/hs/NAME.
PROGRAMS = ("hail", "hbal", "hcheck", "hinfo", "hroller", "hscan", "hspace", "hsqueeze")

_PROGRAM_IN_COMMAND = re.compile(r"(?:^|[\s;&|(])\./test/hs/([A-Za-z0-9_-]+)")

#: How long one command may run, in seconds (the real ones take ~0.01 s, exalloc's ~0.5 s).
COMMAND_TIMEOUT_S = 300


class ShellTestParseError(Exception):
    """A .test file that shelltestrunner would not parse either."""


@dataclass(frozen=True)
class Matcher:
    """One expectation: `kind` is 'regex', 'not-regex', 'lines', 'number' or 'not-number'."""

    kind: str
    text: str

    def matches(self, actual: str) -> bool:
        """shelltest.hs `matches`: a regex is searched, lines and numbers must be equal."""
        if self.kind == "regex":
            return contains_regex(actual, self.text)
        if self.kind == "not-regex":
            return not contains_regex(actual, self.text)
        if self.kind in ("lines", "number"):
            return actual == self.text
        if self.kind == "not-number":
            return actual != self.text
        raise ValueError(f"unknown matcher kind {self.kind!r}")

    def describe(self) -> str:
        prefix = {"regex": "/", "not-regex": "!/", "not-number": "!"}.get(self.kind, "")
        suffix = "/" if "regex" in self.kind else ""
        return f"{prefix}{self.text}{suffix}"


#: `>>>=` with nothing after it: shelltestrunner's `anyMatcher`, the empty regex.
ANY = Matcher("regex", "")


@dataclass(frozen=True)
class ShellTest:
    """One test: where it is, its command, its stdin and what it expects."""

    file: str  # the file's stem, e.g. 'htools-hail'
    line: int  # the command's line, 1-based
    command: str
    stdin: str | None
    stdout: Matcher | None
    stderr: Matcher | None
    exit_code: Matcher

    @property
    def id(self) -> str:
        return f"{self.file}:{self.line}"

    def programs(self) -> tuple[str, ...]:
        """The ./test/hs programs the command calls, in order, each once."""
        found = _PROGRAM_IN_COMMAND.findall(self.command)
        return tuple(dict.fromkeys(found))


# ---------------------------------------------------------------- parsing (Parse.hs, format 1)


class _Text:
    """A cursor over a test file, with Parsec's primitives shelltestrunner's grammar uses."""

    def __init__(self, text: str, name: str) -> None:
        self.text = text
        self.name = name
        self.pos = 0

    def line_number(self) -> int:
        return self.text.count("\n", 0, self.pos) + 1

    def at_end(self) -> bool:
        return self.pos >= len(self.text)

    def rest_of_line(self) -> str:
        """`line`: up to and without the newline, which is consumed; at the end a line needs
        its newline (Parse.hs `line = anyChar manyTill newline`), so the file must end in one."""
        end = self.text.find("\n", self.pos)
        if end < 0:
            raise self.error("a line without its newline at the end of the file")
        line = self.text[self.pos : end]
        self.pos = end + 1
        return line

    def peek_line(self) -> str:
        end = self.text.find("\n", self.pos)
        return self.text[self.pos : end if end >= 0 else len(self.text)]

    def skip_whitespace(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in " \t":
            self.pos += 1

    def blank_or_comment_or_eof(self) -> bool:
        """`whitespaceorcommentlineoreof` at the cursor: consume it if there, else touch nothing."""
        if self.at_end():
            return True
        line = self.peek_line()
        stripped = line.lstrip(" \t")
        if stripped == "" or stripped.startswith("#"):
            self.pos += len(line) + 1
            return True
        return False

    def skip_blank_and_comment_lines(self) -> None:
        while not self.at_end() and self.blank_or_comment_or_eof():
            pass

    def error(self, what: str) -> ShellTestParseError:
        return ShellTestParseError(f"{self.name}:{self.line_number()}: {what}")


_DELIMITERS = ("$$$", "<<<", ">>>")  # a line starting with one ends an input or literal block


def _lines_until_delimiter(cur: _Text) -> str:
    """`linesmatcher1` / the input block: whole lines until one that starts a delimiter or
    the end, joined with their newlines (`unlines`)."""
    lines = []
    while not cur.at_end() and not cur.peek_line().startswith(_DELIMITERS):
        lines.append(cur.rest_of_line())
    return "".join(line + "\n" for line in lines)


def _regex(cur: _Text) -> str | None:
    """`regexmatcher`: `/.../` (`\\/` is a slash; the regex may span lines), then only
    blanks or a comment up to the end of its line."""
    if not cur.text.startswith("/", cur.pos):
        return None
    start = cur.pos
    i = cur.pos + 1
    chars = []
    while i < len(cur.text):
        if cur.text.startswith("\\/", i):
            chars.append("/")
            i += 2
        elif cur.text[i] == "/":
            break
        else:
            chars.append(cur.text[i])
            i += 1
    else:
        raise cur.error("a regex without its closing '/'")
    cur.pos = i + 1
    if not cur.blank_or_comment_or_eof():
        cur.pos = start
        return None
    return "".join(chars)


def _expectation(cur: _Text, delimiter: str) -> Matcher | None:
    """`expectedoutput1` / `expectederror1`: DELIMITER, blanks, then a regex, a negated one,
    or (the rest of the line blank) literal lines. Not there: None, the cursor unmoved."""
    start = cur.pos
    if not cur.text.startswith(delimiter, cur.pos):
        return None
    cur.pos += len(delimiter)
    cur.skip_whitespace()
    if (found := _regex(cur)) is not None:
        return Matcher("regex", found)
    if cur.text.startswith("!", cur.pos):
        cur.pos += 1
        if (found := _regex(cur)) is not None:
            return Matcher("not-regex", found)
        cur.pos -= 1
    if cur.blank_or_comment_or_eof():
        return Matcher("lines", _lines_until_delimiter(cur))
    cur.pos = start
    return None


def _exit_code(cur: _Text) -> Matcher:
    """`expectedexitcode1`: `>>>=`, blanks, then a regex, `!regex`, `N`, `!N` or nothing."""
    if not cur.text.startswith(">>>=", cur.pos):
        raise cur.error("expected the exit status line '>>>='")
    cur.pos += 4
    cur.skip_whitespace()
    if (found := _regex(cur)) is not None:
        return Matcher("regex", found)
    negated = cur.text.startswith("!", cur.pos)
    if negated:
        cur.pos += 1
        if (found := _regex(cur)) is not None:
            return Matcher("not-regex", found)
    digits = re.match(r"[0-9]+", cur.text[cur.pos :])
    if digits is None:
        if negated:
            raise cur.error("'!' not followed by a number or a regex")
        if not cur.blank_or_comment_or_eof():
            raise cur.error("an exit status that is not a number or a regex")
        return ANY
    cur.pos += digits.end()
    if not cur.blank_or_comment_or_eof():
        raise cur.error("text after the exit status")
    return Matcher("not-number" if negated else "number", digits.group())


def parse(text: str, name: str) -> list[ShellTest]:
    """The tests of one format-1 file (`name` is its stem, used in the tests' ids)."""
    cur = _Text(text.replace("\r\n", "\n").replace("\r", "\n"), name)
    tests = []
    while True:
        cur.skip_blank_and_comment_lines()
        if cur.at_end():
            return tests
        line = cur.line_number()
        command = cur.rest_of_line().lstrip(" \t")  # an indented command is a FixedCommand
        if command.startswith(_DELIMITERS):
            raise cur.error(f"expected a command, found {command!r}")
        stdin = None
        if cur.text.startswith("<<<", cur.pos):
            cur.pos += 3
            if not cur.blank_or_comment_or_eof():
                raise cur.error("text after '<<<'")
            stdin = _lines_until_delimiter(cur)
        stdout = (
            _expectation(cur, ">>>") if not cur.text.startswith((">>>2", ">>>="), cur.pos) else None
        )
        stderr = _expectation(cur, ">>>2")
        exit_code = _exit_code(cur)
        tests.append(ShellTest(name, line, command, stdin, stdout, stderr, exit_code))


def parse_file(path: Path) -> list[ShellTest]:
    return parse(path.read_text(encoding="utf-8"), path.stem)


def htools_test_files(shelltests_dir: Path) -> list[Path]:
    """Ganeti's htools test files in the order offline-test.sh's glob gives them; the
    monitoring collector's are not htools'."""
    return sorted(
        p for p in shelltests_dir.glob("htools-*.test") if p.stem != "htools-mon-collector"
    )


#: The program a command naming none judges, by file (else its file's previous test's):
#: htools-rapi.test's diff compares hinfo's views of a cluster read through RAPI and through
#: the text hscan saved of it, which offline-test.sh says checks hscan.
JUDGES_BY_FILE = {"htools-rapi": "hscan"}


def program_of(tests: list[ShellTest], index: int) -> str:
    """The program a test judges: the first its command calls, else `JUDGES_BY_FILE`'s for
    its file, else its file's previous test's (a `cat` or `diff` of the files that wrote)."""
    test = tests[index]
    if found := test.programs():
        return found[0]
    if test.file in JUDGES_BY_FILE:
        return JUDGES_BY_FILE[test.file]
    for earlier in reversed(tests[:index]):
        if found := earlier.programs():
            return found[0]
    raise ValueError(f"{test.id}: no program to judge")


# ---------------------------------------------------------------- regex-tdfa's flavour


def posix_regex(pattern: str) -> re.Pattern[str]:
    """regex-tdfa's `=~` with its default options, as a Python pattern (see the module's doc).

    POSIX extended syntax: a backslash makes the next character literal (regex-tdfa's
    extensions add nothing the tests use); inside a bracket expression a backslash is itself
    and `]` first is literal; a negated bracket, like `.`, never matches a newline (multiline).
    """
    out = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            if i + 1 == len(pattern):
                raise ValueError(f"regex {pattern!r} ends in a backslash")
            out.append(re.escape(pattern[i + 1]))
            i += 2
        elif char == "[":
            end, bracket = _bracket(pattern, i)
            out.append(bracket)
            i = end
        elif char == ".":
            out.append(r"[^\n]")
            i += 1
        elif char in "^$()|*+?{}":
            out.append(char)
            i += 1
        else:
            out.append(re.escape(char))
            i += 1
    return re.compile("".join(out), re.MULTILINE)


def _bracket(pattern: str, start: int) -> tuple[int, str]:
    """The bracket expression at `start`: (index after it, Python class)."""
    i = start + 1
    negated = pattern.startswith("^", i)
    if negated:
        i += 1
    members = []
    first = True
    while True:
        if i >= len(pattern):
            raise ValueError(f"regex {pattern!r}: '[' without its ']'")
        char = pattern[i]
        if char == "]" and not first:
            break
        if pattern.startswith("[:", i):
            end = pattern.find(":]", i + 2)
            if end < 0:
                raise ValueError(f"regex {pattern!r}: '[:' without ':]'")
            members.append(_CLASSES[pattern[i + 2 : end]])
            i = end + 2
        elif char == "-" and not first and not pattern.startswith("]", i + 1):
            members.append("-")
            i += 1
        else:
            members.append(re.escape(char))
            i += 1
        first = False
    body = "".join(members)
    return i + 1, (f"[^{body}\\n]" if negated else f"[{body}]")


_CLASSES = {
    "alnum": "a-zA-Z0-9",
    "alpha": "a-zA-Z",
    "blank": " \\t",
    "digit": "0-9",
    "lower": "a-z",
    "space": " \\t\\n\\r\\f\\v",
    "upper": "A-Z",
    "xdigit": "0-9A-Fa-f",
}


def contains_regex(actual: str, pattern: str) -> bool:
    """Utils.containsRegex: the empty regex is `^`, which every string contains."""
    return posix_regex(pattern or "^").search(actual) is not None


# ---------------------------------------------------------------- running (offline-test.sh)


@dataclass(frozen=True)
class Outcome:
    """What one command did, and what of it failed its expectations (empty: passed)."""

    test: ShellTest
    stdout: str
    stderr: str
    exit_code: int
    failures: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return not self.failures

    def report(self) -> str:
        lines = [f"{self.test.id}: {self.test.command}", *self.failures]
        lines.append(f"exit code {self.exit_code}")
        lines.append("stdout:\n" + _trimmed(self.stdout))
        lines.append("stderr:\n" + _trimmed(self.stderr))
        return "\n".join(lines)


def _trimmed(text: str, limit: int = 2000) -> str:
    return text if len(text) <= limit else text[:limit] + f"...({len(text) - limit} more)"


def judge(test: ShellTest, stdout: str, stderr: str, exit_code: int) -> Outcome:
    """shelltest.hs `shellTestToHUnitTest`: every given expectation must match; exit 127 (no
    such command) is always a failure."""
    failures = []
    for name, matcher, actual in (("stdout", test.stdout, stdout), ("stderr", test.stderr, stderr)):
        if matcher is not None and not matcher.matches(actual):
            failures.append(f"expected {name}: {matcher.describe()!r}")
    if not test.exit_code.matches(str(exit_code)):
        failures.append(f"expected exit code: {test.exit_code.describe()}")
    if exit_code == 127:
        failures.append("the shell could not find the command (exit 127)")
    return Outcome(test, stdout, stderr, exit_code, tuple(failures))


def real_programs() -> dict[str, Path]:
    """The real htools 3.0.2: each program its own name on PATH, hail Ganeti's iallocator."""
    found = {name: shutil.which(name) for name in PROGRAMS if name != "hail"}
    missing = [name for name, path in found.items() if path is None]
    hail = Path("/usr/lib/ganeti/iallocators/hail")
    if not hail.exists():
        missing.append("hail")
    if missing:
        raise FileNotFoundError(f"real htools missing: {', '.join(missing)}")
    return {"hail": hail, **{name: Path(path) for name, path in found.items() if path}}


def exalloc_scripts() -> dict[str, Path]:
    """exalloc's console scripts of this interpreter's environment."""
    bin_dir = Path(sys.executable).parent
    scripts = {name: bin_dir / name for name in ("exalloc", "exalloc-hail")}
    for name, path in scripts.items():
        if not path.exists():
            which = shutil.which(name)
            if which is None:
                raise FileNotFoundError(f"{name} is not installed (pip install -e .)")
            scripts[name] = Path(which)
    return scripts


class Workspace:
    """offline-test.sh's world: a top directory whose `test/hs/PROGRAM` runs the program
    under test, `$T` with the generated inputs, and the exported variables."""

    def __init__(
        self,
        root: Path,
        testsuite: Path,
        programs: Mapping[str, Path | list[str]],
        hspace: Path,
    ) -> None:
        """`programs`: for each name, a binary (linked, so a multi-call htools sees its name)
        or an argv prefix (run by a script); `hspace`: the real hspace that makes `$T`'s
        simulated clusters."""
        self.top = root / "top"
        self.tmp = root / "T"
        self.testdata = testsuite / "test/data/htools"
        self.pytestdata = testsuite / "test/data"
        self.hspace = hspace
        bin_dir = self.top / "test/hs"
        bin_dir.mkdir(parents=True)
        self.tmp.mkdir()
        for name, program in programs.items():
            target = bin_dir / name
            if isinstance(program, Path):
                target.symlink_to(program)
            else:
                quoted = " ".join(_sh_quote(arg) for arg in program)
                target.write_text(f'#!/bin/sh\nexec {quoted} "$@"\n')
                target.chmod(0o755)
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("BACKEND_", "EXALLOC_"))},
            "LC_ALL": "C.UTF-8",
            "TESTDATA_DIR": str(self.testdata),
            "PYTESTDATA_DIR": str(self.pytestdata),
            "T": str(self.tmp),
            "BACKEND_BAL_STD": f"-t{self.tmp}/simu-rebal-merged.standard",
            "BACKEND_BAL_TIER": f"-t{self.tmp}/simu-rebal-merged.tiered",
            "BACKEND_DYNU": f"-t {self.tmp}/simu-onegroup.standard",
            "BACKEND_EXCL": f"-t {self.tmp}/simu-onegroup.standard",
            "RAPI_URL": f"file://{self.testdata}/rapi",
        }
        self.preparation_errors: list[str] = []

    def prepare(self) -> None:
        """offline-test.sh's steps before `shelltest`, in its order. A failing step of the
        program under test is recorded (the tests that need its files then fail), a failing
        real hspace or sed raises."""
        for spec, prefix in (
            (["--simu", "p,4,8T,64g,16"], "simu-onegroup"),
            (["--simu", "p,4,8T,64g,16", "--simu", "p,4,8T,64g,16"], "simu-twogroups"),
            (["--simu", "u,4,8T,64g,16", "--simu", "p,4,8T,64g,16"], "simu-rebal-orig"),
        ):
            verbose = ["-v", "-v", "-v"] if prefix == "simu-onegroup" else []
            self._check_run(
                [
                    str(self.hspace),
                    *spec,
                    "-S",
                    str(self.tmp / prefix),
                    "--disk-template",
                    "drbd",
                    "-l",
                    "8",
                    *verbose,
                ]
            )
        for suffix in ("standard", "tiered"):
            self._sed(
                ["-re", r"s/^(node-.*|fake-uuid-)-02(|.*)/\1-01\2/"],
                self.tmp / f"simu-rebal-orig.{suffix}",
                self.tmp / f"simu-rebal-merged.{suffix}",
            )
        for mode in ("primary-only", "secondary-only", "all"):
            self._sed(
                [
                    "-e",
                    f's/"evac_mode": "all"/"evac_mode": "{mode}"/',
                    "-e",
                    r's/"spindles": [0-9]\+,//',
                ],
                self.testdata / "hail-node-evac.json",
                self.tmp / f"hail-node-evac.json.{mode}",
            )
        excl = 's/"exclusive_storage": false/"exclusive_storage": true/'
        for base in (
            "hail-alloc-drbd",
            "hail-alloc-invalid-twodisks",
            "hail-alloc-twodisks",
            "hail-change-group",
            "hail-node-evac",
            "hail-reloc-drbd",
            "hail-alloc-spindles",
        ):
            source = self.testdata / f"{base}.json"
            self._sed(["-e", excl], source, self.tmp / f"{base}.json.excl-stor")
            self._sed(
                ["-e", excl, "-e", r's/"spindles": [0-9]\+,//'],
                source,
                self.tmp / f"{base}.json.fail-excl-stor",
            )
        (self.tmp / "hscan").mkdir()
        self._shell_step("./test/hs/hscan -d $T/hscan/ -p -v -v $RAPI_URL >/dev/null 2>&1")
        saved = sorted((self.tmp / "hscan").glob("*.data"))
        if not saved:
            self.preparation_errors.append("hscan saved no .data file")
        else:
            self.env["RAPI_TXT"] = str(saved[0])
        self._shell_step(
            "./test/hs/hinfo -p --print-instances -m $RAPI_URL > $T/hscan/direct.hinfo 2>&1"
        )
        if saved:
            self._shell_step(
                './test/hs/hinfo -p --print-instances -t "$RAPI_TXT" > $T/hscan/fromtext.hinfo 2>&1'
            )

    def _check_run(self, argv: list[str]) -> None:
        proc = subprocess.run(
            argv, capture_output=True, text=True, env=self.env, timeout=COMMAND_TIMEOUT_S
        )
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: exit {proc.returncode}: {proc.stderr.strip()}")

    def _sed(self, script: list[str], source: Path, target: Path) -> None:
        with source.open("rb") as stdin, target.open("wb") as stdout:
            subprocess.run(["sed", *script], stdin=stdin, stdout=stdout, check=True, timeout=60)

    def _shell_step(self, command: str) -> None:
        proc = self._sh(command, None)
        if proc.returncode != 0:
            self.preparation_errors.append(f"{command}: exit {proc.returncode}")

    def _sh(self, command: str, stdin: str | None) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            ["/bin/sh", "-c", command],
            cwd=self.top,
            env=self.env,
            input=None if stdin is None else stdin.encode(),
            stdin=subprocess.DEVNULL if stdin is None else None,
            capture_output=True,
            timeout=COMMAND_TIMEOUT_S,
        )

    def run(self, test: ShellTest) -> Outcome:
        """One test's command through `sh -c` from the top directory, judged."""
        proc = self._sh(test.command, test.stdin)
        return judge(
            test,
            proc.stdout.decode("utf-8", "replace"),
            proc.stderr.decode("utf-8", "replace"),
            proc.returncode,
        )

    def run_all(self, tests: Iterable[ShellTest]) -> dict[str, Outcome]:
        return {test.id: self.run(test) for test in tests}


def _sh_quote(arg: str) -> str:
    return "'" + arg.replace("'", "'\\''") + "'"
