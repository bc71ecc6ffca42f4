"""`space`, `balance` and `roll` in `exalloc batch` / `compare` / `report`
(programs/htools_batch.py, docs/batch.md): the folder decides the problem; the greedy side's
numbers are what the real hspace, hbal and hroller print on the same file (or, without them,
what exalloc's ports print, the same); exalloc's are never worse and pass the checkers."""

from __future__ import annotations

import re
import shutil
import subprocess
from argparse import Namespace
from pathlib import Path

import pytest
from test_compare import _args  # compare's own arguments, 30 s per solve

from programs import batch, compare, htools_batch, judging, report, tasks
from solvers.options import SolverOptions

REPO = Path(__file__).resolve().parent.parent
FOLDERS = [REPO / "data" / p for p in ("space", "balance", "roll")]


def _hspace(path: str) -> int:
    out = subprocess.run(
        ["hspace", "-t", path, "--machine-readable", "-q"], capture_output=True, text=True
    ).stdout
    return int(re.search(r"^HTS_ALLOC_INSTANCES=(\d+)$", out, re.M).group(1))


def _hbal(path: str) -> tuple[float, int]:
    """hbal's final score (its initial one when it finds no move) and its length."""
    out = subprocess.run(["hbal", "-t", path], capture_output=True, text=True).stdout
    length = int(re.search(r"^Solution length=(\d+)$", out, re.M).group(1))
    found = re.search(r"^Cluster score improved from \S+ to (\S+)$", out, re.M)
    score = found or re.search(r"^Initial score: (\S+)$", out, re.M)
    return float(score.group(1)), length


def _hroller(path: str) -> int:
    out = subprocess.run(["hroller", "-t", path], capture_output=True, text=True).stdout
    return len([line for line in out.splitlines()[1:] if line.strip()])


def test_the_folder_decides_the_problem(tmp_path: Path) -> None:
    snapshot = REPO / "data" / "squeeze" / "greedy-gap.data"
    for name in ("space", "balance", "roll", "elsewhere"):
        (tmp_path / name / "deeper").mkdir(parents=True)
        shutil.copy(snapshot, tmp_path / name / "deeper" / "s.data")
    found = {Path(t.input).parent.parent.name: t.problem for t in tasks.plan(
        tasks.discover(str(tmp_path)))}  # fmt: skip
    assert found == {"space": "space", "balance": "balance", "roll": "roll",
                     "elsewhere": "squeeze"}  # fmt: skip
    assert htools_batch.problem_of(str(tmp_path / "x.data")) is None


@pytest.fixture(scope="module")
def records() -> list[dict]:
    return list(compare.run(_args(*FOLDERS)).records)


@pytest.mark.slow
@pytest.mark.ci
def test_space_against_real_hspace(htools, records: list[dict]) -> None:
    space = [r for r in records if r["problem"] == "space"]
    assert len(space) == 3
    for r in space:
        assert r["error"] is None and r["status"] == "optimal", r
        g = r["greedy"]
        assert g["tool"] == "hspace" and g["violations"] == 0, g
        assert g["value"] == _hspace(r["input"])  # the batch's number is hspace's own
        assert r["value"] >= g["value"] and r["violations"] == 0
    # the bundled snapshots are ones where the proven count is above hspace's
    assert [judging.verdict(r) for r in space] == ["exact better"] * 3


@pytest.mark.slow
@pytest.mark.ci
def test_balance_against_real_hbal(htools, records: list[dict]) -> None:
    balance = [r for r in records if r["problem"] == "balance"]
    assert len(balance) == 3
    for r in balance:
        assert r["error"] is None and r["status"] == "optimal", r
        g = r["greedy"]
        score, length = _hbal(r["input"])
        assert g["tool"] == "hbal" and g["violations"] == 0, g
        assert g["value"] == pytest.approx(score, abs=1e-8)  # the checker's replay = hbal's
        assert r["answer"]["k"] == g["answer"]["k"] == length
        assert r["value"] <= g["value"] + 1e-9
    assert "exact better" in [judging.verdict(r) for r in balance]


@pytest.mark.slow
@pytest.mark.ci
def test_roll_against_real_hroller(htools, records: list[dict]) -> None:
    roll = [r for r in records if r["problem"] == "roll"]
    assert len(roll) == 3
    for r in roll:
        assert r["error"] is None and r["status"] == "optimal", r
        g = r["greedy"]
        assert g["tool"] == "hroller" and g["violations"] == 0, g
        assert g["value"] == _hroller(r["input"])
        assert r["value"] <= g["value"]
        assert sorted(v for rnd in r["answer"]["rounds"] for v in rnd) == sorted(
            v for rnd in g["answer"]["rounds"] for v in rnd
        )


@pytest.mark.slow
@pytest.mark.ci
def test_report_draws_the_new_problems(records: list[dict], tmp_path: Path) -> None:
    import json

    results = tmp_path / "r.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "report.html"
    done = report.run(Namespace(results=str(results), out=str(out)))
    for problem in ("space", "balance", "roll"):
        assert f"{problem}-exact-vs-greedy: exalloc" in done.series
        assert f"time-vs-size: exalloc {problem}" in done.series
    rows = {row["problem"]: row for row in batch.summarise(records)}
    assert rows["space"]["exact_total"] > rows["space"]["greedy_total"]
    assert rows["roll"]["metric"] == "rounds"


@pytest.mark.slow
@pytest.mark.ci
def test_ports_stand_in_without_htools(htools, tmp_path: Path, monkeypatch) -> None:
    """Without hspace, hbal and hroller on PATH the ports answer, labelled, with the real
    tools' numbers."""
    picks = [sorted(folder.glob("*.data"))[0] for folder in FOLDERS]
    real = {
        "space": _hspace(str(picks[0])),
        "balance": pytest.approx(_hbal(str(picks[1]))[0], abs=1e-8),
        "roll": _hroller(str(picks[2])),
    }
    monkeypatch.setenv("PATH", str(tmp_path))
    options = tasks.Options(solver=SolverOptions(time_limit=60.0), compare=True)
    for problem, path in zip(("space", "balance", "roll"), picks, strict=True):
        g = htools_batch.greedy(problem, str(path), options)
        assert g["tool"] == f"{htools_batch.TOOLS[problem]} (port)"
        assert g["value"] == real[problem] and g["violations"] == 0, g
