"""The docs' offline examples print what the code prints today (the brief: "the README says
what works today, with real output"). Each `$ exalloc ...` line of a code block in README.md
and docs/*.md whose command reads only files at hand and answers in about a second or less is
run in this process, from a folder where `data/` is the repository's and a bare Ganeti file
name (`hroller-online.data`, `test/data/htools/...`) is Ganeti's test file; its stdout (through
the example's `| cut`, `| sed -n`, `| head`) and stderr are compared with the lines the doc
shows under it, timings (`0.07 s`) masked.

A doc's `...` lines cut the output: each run of lines between them must appear in that order,
each run as consecutive lines; an example without `...` must match line for line. Shown lines
found on stderr (exalloc's notes) are matched against stderr in their order, the rest against
stdout, so a doc may place a note where a terminal shows it.

Left out, each for the reason `_skipped` gives: live clusters (`-m`, `-L`), servers and their
clients (`--socket`, `&`), redirects, the commands that run many inputs (`batch`, `compare`,
`generate`), `--json` (shown re-wrapped or in part), inputs made elsewhere (a benchmark's or a
test's file: `cluster.data`, `tiny.data`), two commands side by side, and an example with no
output shown. Those were checked by hand when this file was added (its commit)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import TESTSUITE as GANETI

import cli

REPO = Path(__file__).resolve().parent.parent
DOCS = (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")))

#: Commands that run many inputs or need a server: not run here.
SLOW_OR_SERVED = frozenset(
    {"batch", "compare", "generate", "report", "alloc-server", "hail-server", "create"}
    | {"verify", "state", "loadtest"}
)
#: Options whose value is an input file.
FILE_OPTIONS = frozenset({"-t", "--text-data", "--schema", "--hw-info", "-I"})
TIMING = re.compile(r"\b\d+(?:\.\d+)? s\b")


@dataclass(frozen=True)
class Example:
    """One `$ command` of a doc's code block and the lines shown under it."""

    where: str  # doc:line of the command, for the test id and the failure message
    command: str
    shown: tuple[str, ...]


def examples(path: Path) -> list[Example]:
    """Every `$ ` line inside a fenced block, with the lines up to the next `$ ` or the fence
    (the block's indentation removed: list items indent their blocks; trailing blank lines
    dropped)."""
    found: list[Example] = []
    inside, indent = False, ""
    command: tuple[int, str] | None = None
    shown: list[str] = []

    def close() -> None:
        if command is not None:
            while shown and not shown[-1].strip():
                shown.pop()
            name = path.relative_to(REPO)
            found.append(Example(f"{name}:{command[0]}", command[1], tuple(shown)))

    for number, raw in enumerate(path.read_text().splitlines(), 1):
        if raw.strip().startswith("```"):
            if inside:
                close()
            inside, indent, command, shown = (
                not inside,
                raw[: len(raw) - len(raw.lstrip())],
                None,
                [],
            )
            continue
        if not inside:
            continue
        line = raw[len(indent) :] if raw.startswith(indent) else raw
        if line.startswith("$ "):
            close()
            command, shown = (number, line[2:].strip()), []
        elif command is not None:
            shown.append(line)
    return found


def _words(example: Example) -> list[str]:
    return shlex.split(example.command.split("|")[0], comments=True)


def _input_present(name: str) -> bool:
    """A file the run folder gives: the repository's data/, or one of Ganeti's test files."""
    if name.startswith("data/"):
        return (REPO / name).exists()
    if name.startswith("test/"):
        return (GANETI / name).exists()
    return "/" not in name and (GANETI / "test/data/htools" / name).exists()


def _skipped(example: Example) -> str | None:
    """Why an example is not run here, or None."""
    if " $ " in example.command:
        return "two commands side by side"
    words = _words(example)
    if words[0] != "exalloc" or example.command.rstrip().endswith("&"):
        return "not an exalloc command run in the foreground"
    if words[1] in SLOW_OR_SERVED:
        return f"exalloc {words[1]}: many inputs or a server"
    if any(w == "-m" or w.startswith(("-L", "--luxi", "--socket")) for w in words):
        return "a live cluster or a server"
    if any(w.startswith((">", "2>")) for w in words):
        return "a redirect"
    if "--json" in words:
        return "--json: shown re-wrapped or in part"
    if not example.shown:
        return "no output shown"
    files = [b for a, b in zip(words, words[1:], strict=False) if a in FILE_OPTIONS]
    files += [w for w in words[2:] if w.endswith((".data", ".json", ".yaml"))]
    files += [
        w.split("=", 1)[1] for w in words if w.startswith(tuple(f"{o}=" for o in FILE_OPTIONS))
    ]
    if any(not _input_present(f) for f in files):
        return "an input made elsewhere (a benchmark's or a test's)"
    return None


def _filtered(stdout: str, stages: list[list[str]]) -> list[str]:
    """stdout through the example's pipe: `cut -cA-B`, `sed -n A,Bp`, `head [-n] N`."""
    lines = stdout.splitlines()
    for stage in stages:
        if stage[0] == "cut" and len(stage) == 2 and stage[1].startswith("-c"):
            first, _, last = stage[1][2:].partition("-")
            lines = [s[int(first) - 1 : int(last) if last else None] for s in lines]
        elif stage[0] == "sed" and stage[1:2] == ["-n"] and re.fullmatch(r"\d+,\d+p", stage[2]):
            first, last = map(int, stage[2][:-1].split(","))
            lines = lines[first - 1 : last]
        elif stage[0] == "head":
            lines = lines[: int(stage[-1].lstrip("-"))]
        else:
            raise AssertionError(f"a pipe this test does not know: {' '.join(stage)}")
    return lines


def _segments(lines: list[str]) -> list[list[str]]:
    """The runs of lines between `...` lines."""
    runs: list[list[str]] = [[]]
    for line in lines:
        if line.strip() in ("...", "…"):
            runs.append([])
        else:
            runs[-1].append(line)
    return [r for r in runs if r]


def _same(shown: str, actual: str) -> bool:
    """A shown line is the printed one, or its start when it ends with `...` (a long line cut:
    `Redistribution: 6 relocation(s), optimal (...); ...`)."""
    if shown.endswith("...") and shown.strip() != "...":
        return actual.startswith(shown[:-3])
    return shown == actual


def _run_matches(actual: list[str], run: list[str]) -> bool:
    return len(actual) == len(run) and all(map(_same, run, actual))


def _contains_in_order(actual: list[str], runs: list[list[str]]) -> bool:
    """Each run found as consecutive lines of `actual`, the runs in their order."""
    start = 0
    for run in runs:
        for at in range(start, len(actual) - len(run) + 1):
            if _run_matches(actual[at : at + len(run)], run):
                start = at + len(run)
                break
        else:
            return False
    return True


def _subsequence(actual: list[str], wanted: list[str]) -> bool:
    it = iter(actual)
    return all(any(_same(w, a) for a in it) for w in wanted)


ALL = [e for path in DOCS for e in examples(path)]
RUN = [e for e in ALL if _skipped(e) is None]


def test_the_examples_are_found() -> None:
    """The parser sees the docs' examples (a test that ran none would always pass)."""
    commands = {(e.where.split(":")[0], e.command.split()[1]) for e in RUN}
    readme = {c for d, c in commands if d == "README.md"}
    assert {"info", "hail", "n1", "redistribute", "squeeze", "roll", "partition"} <= readme
    assert {d for d, _ in commands} >= {"README.md", "docs/roll.md", "docs/groups.md"}
    assert all(e.shown for e in RUN)


def test_the_helpers_cut_as_the_shell_does() -> None:
    out = "one\ntwo\nthree\nfour\n"
    assert _filtered(out, [["sed", "-n", "2,3p"], ["cut", "-c1-2"]]) == ["tw", "th"]
    assert _filtered(out, [["head", "-1"]]) == ["one"]
    assert _contains_in_order(["a", "b", "c", "d"], [["a"], ["c", "d"]])
    assert not _contains_in_order(["a", "b", "c", "d"], [["c"], ["a"]])
    assert not _contains_in_order(["a", "b", "c", "d"], [["a", "c"]])
    assert _same("Redistribution: 6; ...", "Redistribution: 6; 1 round(s)")
    assert not _same("Redistribution: 5; ...", "Redistribution: 6; 1 round(s)")
    assert not _run_matches(["a", "b"], ["a"])
    assert _skipped(Example("x:1", "exalloc squeeze -t cluster.data", ("x",))) is not None


@pytest.fixture
def run_folder(tmp_path: Path, ganeti_data, monkeypatch: pytest.MonkeyPatch) -> Path:  # noqa: ANN001
    """`data/...` names the repository's files, `test/...` and a bare name Ganeti's."""
    (tmp_path / "data").symlink_to(REPO / "data")
    (tmp_path / "test").symlink_to(ganeti_data.data_dir.parent.parent)
    for path in ganeti_data.data_dir.iterdir():
        (tmp_path / path.name).symlink_to(path)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("example", RUN, ids=[e.where for e in RUN])
def test_example_prints_what_is_shown(
    example: Example,
    run_folder: Path,
    capfd: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
) -> None:
    words = _words(example)
    if "--compare" in words:
        request.getfixturevalue("htools")  # the real tool beside exalloc's answer
    try:
        cli.main(words[1:])
    except SystemExit:  # a usage error: its message is the output to compare
        pass
    out, err = capfd.readouterr()
    pipe = [shlex.split(p) for p in example.command.split("|")[1:]]
    stdout = [TIMING.sub("T s", s) for s in _filtered(out, pipe)]
    stderr = [TIMING.sub("T s", s) for s in err.splitlines()]
    shown = [TIMING.sub("T s", s) for s in example.shown]
    on_stderr = [s for s in shown if any(_same(s, e) for e in stderr)]
    rest = [s for s in shown if not any(_same(s, e) for e in stderr)]
    message = f"{example.where}: $ {example.command}\nprints:\n" + "\n".join(
        [*stdout, "-- stderr:", *stderr]
    )
    if any(s.strip() in ("...", "…") for s in rest):
        assert _contains_in_order(stdout, _segments(rest)), message
        assert _subsequence(stderr, on_stderr), message
    else:
        assert _run_matches(stdout, rest), message
        assert _run_matches(stderr, on_stderr), message
