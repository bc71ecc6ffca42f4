"""Readers proven against hostile input (issue 14): Hypothesis generates and mutates htools text
snapshots, IAllocator requests, Bareon schemas with yaql and hardware-info files
(tests/fuzz_inputs.py), runs each through the real CLI (cli.main, in process), and asserts:

- the exit code is 0, 1 or 2, and nothing is a traceback or an internal error (exit 70);
- a failure is one line, `exalloc: error: FILE...`, naming the file (and the line or key
  where the reader knows it);
- no input hangs: every run ends within RUN_BOUND_S (each solve has a --time-limit);
- an answer that says success passes the independent checker, run here again on the input
  (model.check for squeeze plans and IAllocator placements, model.bareon.check for layouts).

The default run tries a few dozen seeded inputs per reader; `pytest -m fuzz` tries
FUZZ_EXAMPLES (10,000) per reader and, with EXALLOC_FUZZ_STATS=FILE, appends what it saw to
FILE (docs/reliability.md records the figures).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fuzz_inputs as fi
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

import cli

#: No run may take longer (solves get --time-limit 10; loading and checking are quick).
RUN_BOUND_S = 60.0
SOLVE_LIMIT = ["--time-limit", "10"]
FUZZ_EXAMPLES = int(os.environ.get("EXALLOC_FUZZ_EXAMPLES", "10000"))
FUZZ_SEED = int(os.environ.get("EXALLOC_FUZZ_SEED", "14"))
_CHECKS = (HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example)
SMALL = settings(
    max_examples=25, derandomize=True, deadline=None, database=None, suppress_health_check=_CHECKS
)
FUZZ = settings(
    max_examples=FUZZ_EXAMPLES, deadline=None, database=None, suppress_health_check=_CHECKS
)

TEXT_SEEDS = fi.text_seeds()
REQUEST_SEEDS = fi.request_seeds()
FIXTURE_SEEDS = fi.fixture_seeds()


# -- running the CLI and judging what it did -----------------------------------------------------


class Outcome:
    """One run of the CLI: exit code, what it printed, how long it took."""

    def __init__(self, argv: list[str]) -> None:
        out, err = io.StringIO(), io.StringIO()
        start = time.perf_counter()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                self.code = cli.main(argv)
            except SystemExit as done:  # argparse
                self.code = done.code if isinstance(done.code, int) else 1
        self.seconds = time.perf_counter() - start
        self.out, self.err = out.getvalue(), err.getvalue()
        self.argv = argv


_LOCATED = re.compile(r"^exalloc: error: \S+?:\d+: |\(at [^)]+\)$|key '|space |disk ")


def clean(run: Outcome, *files: Path, stats: Counter) -> bool:
    """The properties every run has; True when it answered (exit 0)."""
    what = f"{run.argv}: exit {run.code}\n{run.err[-2000:]}"
    assert run.code in (0, 1, 2), what
    assert "Traceback" not in run.err and "internal error" not in run.err, what
    assert run.seconds < RUN_BOUND_S, what
    stats["runs"] += 1
    stats["max_ms"] = max(stats["max_ms"], round(run.seconds * 1000))
    if run.code == 0:
        stats["answered"] += 1
        return True
    lines = run.err.splitlines()
    assert len(lines) == 1, what
    line = lines[0]
    assert line.startswith("exalloc: error: "), what
    assert any(str(f) in line for f in files), what
    stats["rejected"] += 1
    if _LOCATED.search(line):
        stats["rejected, line or key named"] += 1
    else:  # the file alone: a whole-file problem (kept, in short, for the record)
        shape = re.sub(r"\d+", "N", line.replace(str(files[0]), "FILE"))[:90]
        UNLOCATED.setdefault(shape, 0)
        UNLOCATED[shape] += 1
    return False


UNLOCATED: dict[str, int] = {}


STATS: dict[str, Counter] = {}


@pytest.fixture(scope="module")
def folder() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="exalloc-fuzz-") as name:
        yield Path(name)
    report = os.environ.get("EXALLOC_FUZZ_STATS")
    if report:
        with open(report, "a", encoding="utf-8") as fh:
            for reader, counts in STATS.items():
                fh.write(json.dumps({"reader": reader, **counts}) + "\n")
            common = sorted(UNLOCATED.items(), key=lambda kv: -kv[1])[:40]
            fh.write(json.dumps({"file alone": dict(common)}) + "\n")


def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8", errors="surrogateescape")
    return path


# -- the four readers ----------------------------------------------------------------------------


def snapshot_case(folder: Path, data: st.DataObject, stats: Counter) -> None:
    """A text snapshot: `info`, and when it loads, `squeeze`, whose plan the checker judges."""
    from programs.judging import judge_squeeze

    text = fi.mutate_snapshot(data, data.draw(st.sampled_from(TEXT_SEEDS), label="seed"))
    path = _write(folder, "snapshot.data", text)
    if not clean(Outcome(["info", "-t", str(path)]), path, stats=stats):
        return
    run = Outcome(["--json", "squeeze", "-t", str(path), *SOLVE_LIMIT])
    if clean(run, path, stats=stats) and json.loads(run.out)["status"] in ("optimal", "feasible"):
        plan = json.loads(run.out)
        moves = [(m["instance"], m["to"]) for m in plan.get("moves") or ()]
        nodes = list(plan["nodes"] or ())
        judged = judge_squeeze(
            str(path), str(plan["mode"]), nodes, moves, plan["not_enough_capacity"]
        )
        assert judged["violations"] == 0, (text, plan, judged)
        stats["answers checked"] += 1


def request_case(folder: Path, data: st.DataObject, stats: Counter) -> None:
    """An IAllocator request: `hail`; a successful placement or move plan is judged by the
    checker."""
    from programs.judging import judge_allocation, judge_moves, response_placements
    from programs.tasks import MOVE_PROBLEMS

    tree = data.draw(st.sampled_from(REQUEST_SEEDS), label="seed")
    text = fi.dump_json(data, fi.mutate_tree(data, tree, fi.JSON_VALUES))
    path = _write(folder, "request.json", text)
    run = Outcome(["hail", *SOLVE_LIMIT, str(path)])
    if clean(run, path, stats=stats):
        response = json.loads(run.out)
        if response["success"] and response["result"]:
            kind = json.loads(path.read_text())["request"]["type"]
            if kind in MOVE_PROBLEMS:
                judged = judge_moves(str(path), response)
            else:
                judged = judge_allocation(str(path), response_placements(str(path), response))
            assert judged["violations"] == 0, (text, response, judged)
            stats["answers checked"] += 1


def _layout_checked(run: Outcome, problem_of: Callable[[], Any], stats: Counter) -> None:
    """The printed layout (allocator format) is feasible by model.bareon.check."""
    from model.bareon.check import check_layout
    from model.bareon.schema import ALLOCATOR_OVERHEADS, Layout

    report = json.loads(run.out)
    problem = problem_of()
    index = {s.space_id: k for k, s in enumerate(problem.spaces)}
    by_disk = {d["disk_id"]: d for d in report["layout"]}
    sizes = []
    for disk in problem.disks:
        row = [0] * len(problem.spaces)
        for space in by_disk[disk.disk_id]["spaces"]:
            if space["space_id"] in index:
                row[index[space["space_id"]]] = space["size"]
        sizes.append(tuple(row))
    check = check_layout(problem, Layout(tuple(sizes)), ALLOCATOR_OVERHEADS)
    if report["status"] in ("optimal", "feasible"):
        assert check.ok, (report, check.violations)
        stats["answers checked"] += 1


def fixture_case(folder: Path, data: st.DataObject, stats: Counter) -> None:
    """A Bareon fixture (schema with yaql + hardware in one file): `partition`."""
    from model.bareon.schema import read_problem

    doc = fi.copy.deepcopy(data.draw(st.sampled_from(FIXTURE_SEEDS), label="seed"))
    if data.draw(st.booleans(), label="schema or document"):
        doc["dynamic_schema"] = fi.mutate_schema(data, doc["dynamic_schema"])
    else:
        doc = fi.mutate_tree(
            data, doc, (*fi.JSON_VALUES, *(f"yaql={e}" for e in fi.YAQL_EXPRESSIONS))
        )
    path = _write(folder, "fixture.yaml", fi.dump_yaml(data, doc))
    run = Outcome(["--json", "partition", "--schema", str(path), *SOLVE_LIMIT])
    if clean(run, path, stats=stats):
        _layout_checked(run, lambda: read_problem(str(path)), stats)


def hardware_case(folder: Path, data: st.DataObject, stats: Counter) -> None:
    """A hardware-info file beside a valid schema that reads it through yaql: `partition`."""
    from model.bareon.schema import read_problem

    doc = data.draw(st.sampled_from(FIXTURE_SEEDS), label="seed")
    schema = _write(folder, "schema.yaml", fi.yaml.safe_dump(doc["dynamic_schema"]))
    hw = fi.mutate_hardware(data, fi.copy.deepcopy(doc["hw_info"]))
    hw_path = _write(folder, "hw.yaml", fi.dump_yaml(data, hw))
    run = Outcome(
        ["--json", "partition", "--schema", str(schema), "--hw-info", str(hw_path), *SOLVE_LIMIT]
    )
    if clean(run, schema, hw_path, stats=stats):
        _layout_checked(run, lambda: read_problem(str(schema), str(hw_path)), stats)


CASES = {
    "htools text snapshot": snapshot_case,
    "IAllocator request": request_case,
    "Bareon schema with yaql": fixture_case,
    "hw-info file": hardware_case,
}


def _check(reader: str, folder: Path, data: st.DataObject) -> None:
    stats = STATS.setdefault(reader, Counter())
    stats["inputs"] += 1
    CASES[reader](folder, data, stats)


SMALL_EXAMPLES = {"htools text snapshot": 100}


@pytest.mark.parametrize("reader", list(CASES))
def test_reader_survives_hostile_input(folder: Path, reader: str) -> None:
    """25 hostile inputs per reader (100 snapshots: most are rejected, quickly); some of them
    answered, so "every answer passes the checker" is met (the counts: EXALLOC_FUZZ_STATS)."""
    stats = Counter()

    @settings(SMALL, max_examples=SMALL_EXAMPLES.get(reader, 25))
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        CASES[reader](folder, data, stats)

    run()
    STATS.setdefault(reader, Counter()).update(stats)
    assert stats["runs"] >= 25 and stats["answers checked"] >= 1, stats


def test_every_answer_to_a_request_seed_passes_the_checker(folder: Path) -> None:
    """The requests the IAllocator fuzzing mutates, unmutated: most are answered, so the
    judging of `request_case` meets many answers (the mutated ones rarely are)."""
    from programs.judging import judge_allocation, judge_moves, response_placements
    from programs.tasks import MOVE_PROBLEMS

    checked = 0
    for k, tree in enumerate(REQUEST_SEEDS):
        path = _write(folder, f"seed-{k}.json", json.dumps(tree))
        run = Outcome(["hail", *SOLVE_LIMIT, str(path)])
        assert clean(run, path, stats=Counter())
        response = json.loads(run.out)
        if response["success"] and response["result"]:
            if tree["request"]["type"] in MOVE_PROBLEMS:
                judged = judge_moves(str(path), response)
            else:
                judged = judge_allocation(str(path), response_placements(str(path), response))
            assert judged["violations"] == 0, (k, response, judged)
            checked += 1
    assert checked >= len(REQUEST_SEEDS) // 2, (checked, len(REQUEST_SEEDS))


@pytest.mark.fuzz
@pytest.mark.parametrize("reader", list(CASES))
@seed(FUZZ_SEED)
@FUZZ
@given(data=st.data())
def test_fuzz_reader(folder: Path, reader: str, data: st.DataObject) -> None:
    _check(reader, folder, data)
