"""exalloc report: the HTML (or PNG folder) renders and carries the expected series."""

from __future__ import annotations

import json
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest

from model.errors import InputError
from programs import batch, report
from solvers.options import SolverOptions

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "data" / "bareon" / "fixtures"


def _record(name: str, problem: str, size: int, value: int, tool: str, greedy: int) -> dict:
    return {
        "input": f"in/{name}",
        "problem": problem,
        "size": size,
        "status": "optimal",
        "objective": [value],
        "bound": [value],
        "gap": [0.0],
        "build_s": 0.01,
        "solve_s": 0.02 * size,
        "wall_s": 0.05 * size,
        "error": None,
        "value": value,
        "greedy": {"tool": tool, "value": greedy, "wall_s": 0.01 * size},
    }


@pytest.fixture()
def results(tmp_path: Path) -> Path:
    records = [
        _record(f"snap-{k}.data", "squeeze", 4 + k, 2 + k % 2, "hsqueeze", 2) for k in range(5)
    ]
    records += [
        _record(f"b-{k}.yaml", "partition", 2 + k, 0, "lp-floor", 100 * k) for k in range(3)
    ]
    for k in range(3):
        alloc = _record(f"s{k}.multi-allocate.json", "multi-allocate", 5, 3, "hail", 3)
        alloc["lost"], alloc["greedy"]["lost"] = [0, 1, 2], [0, 2, 2 + k]
        records.append(alloc)
    records.append({"input": "in/bad.json", "problem": "unknown", "status": "error", "error": "x"})
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + '{"input": "torn')
    return path


def test_html_report_has_the_expected_series(results: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    done = report.run(Namespace(results=str(results), out=str(out)))
    page = out.read_text()
    assert page.startswith("<!doctype html>") and page.count("<svg") == 5
    for text in (
        "squeeze: nodes freed, exalloc vs hsqueeze",
        "partition: MiB lost, exalloc vs lp-floor",
        "multi-allocate: slots lost, exalloc vs hail",
        "hail multi-allocate",
        "solve time vs cluster size",
        "partition solve time vs disks",
        "exalloc squeeze",
        "hsqueeze squeeze",
        "exalloc partition",
        "lp-floor partition",
        "summary",
        "<h2>results</h2>",
        "exact better",
        "in/bad.json",
    ):
        assert text in page, text
    assert "squeeze-exact-vs-greedy: exalloc" in done.series
    assert "squeeze-exact-vs-greedy: hsqueeze" in done.series
    assert done.records == 12  # the torn line is ignored


def test_png_folder(results: Path, tmp_path: Path) -> None:
    out = tmp_path / "plots"
    done = report.run(Namespace(results=str(results), out=str(out)))
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert pngs == [
        "multi-allocate-exact-vs-greedy.png",
        "partition-exact-vs-greedy.png",
        "partition-time-vs-disks.png",
        "squeeze-exact-vs-greedy.png",
        "time-vs-size.png",
    ]
    for name in pngs:
        assert (out / name).read_bytes().startswith(b"\x89PNG")
    assert "summary" in (out / "summary.html").read_text()
    assert len(done.files) == 6


def test_empty_results_are_a_one_line_error(tmp_path: Path) -> None:
    empty = tmp_path / "r.jsonl"
    empty.write_text("")
    with pytest.raises(InputError, match="no results"):
        report.run(Namespace(results=str(empty), out=str(tmp_path / "r.html")))
    done = subprocess.run(
        [sys.executable, "-m", "cli", "report", str(tmp_path / "missing.jsonl"), "--out", "x.html"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        env={"PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 1 and "cannot read" in done.stderr and "Traceback" not in done.stderr


def test_batch_then_report_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    batch.run(
        Namespace(
            inputs=[str(FIXTURES / "two_disks_*.yaml")],
            out=str(out),
            workers=2,
            scheduler=None,
            compare=True,
            no_progress=True,
            progress=False,
            greedy_timeout=60.0,
            solver_options=SolverOptions(time_limit=20.0),
            json=False,
            master=None,
            luxi=None,
        )  # fmt: skip
    )
    html = tmp_path / "r.html"
    done = subprocess.run(
        [sys.executable, "-m", "cli", "report", str(out), "--out", str(html)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    page = html.read_text()
    assert "partition: MiB lost, exalloc vs lp-floor" in page and "exalloc partition" in page
