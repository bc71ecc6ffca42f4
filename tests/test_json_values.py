"""JSON that says what it means (issue 40, item 10): no bound for an objective that is not
there, and null with a reason where htools' arithmetic gives NaN."""

from __future__ import annotations

import json
import math
from pathlib import Path

import cli

ROOT = Path(__file__).resolve().parent.parent
GAP = ROOT / "data" / "squeeze" / "greedy-gap.data"


def _json(capsys, *argv: str) -> dict:
    assert cli.main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_squeeze_with_nothing_to_do_reports_no_stage_at_all(tmp_path, capsys):
    empty = tmp_path / "empty.data"
    empty.write_text("default|uuid-default|preferred||\n\n\n\n\n")
    doc = _json(capsys, "squeeze", "-t", str(empty))
    assert doc["mode"] == "none"
    assert doc["objective"] == doc["bound"] == doc["gap"] == doc["stages"] == []


def test_squeeze_stages_objectives_and_bounds_pair_up(capsys):
    doc = _json(capsys, "squeeze", "-t", str(GAP))
    assert len(doc["objective"]) == len(doc["bound"]) == len(doc["gap"]) == len(doc["stages"])
    assert len(doc["stages"]) > 0


def _no_spindles(tmp_path: Path) -> Path:
    """greedy-gap.data with every node's spindle count 0: the spindle metrics are 0/0."""
    lines = []
    for line in GAP.read_text().splitlines():
        fields = line.split("|")
        if len(fields) >= 14 and fields[7] in ("N", "Y"):
            fields[9] = "0"
        lines.append("|".join(fields))
    path = tmp_path / "no-spindles.data"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_info_json_has_null_and_a_reason_for_nan(tmp_path, capsys):
    doc = _json(capsys, "info", "-t", str(_no_spindles(tmp_path)))
    nulls = {k for k, v in doc["metrics"].items() if v is None}
    assert nulls == {"spindles_cv", "spindles_cv_forth"}
    assert set(doc["not_finite"]) == nulls | {"score"} and doc["score"] is None
    assert doc["not_finite"]["spindles_cv"].startswith("NaN (as hinfo prints it): ")
    assert all(isinstance(v, int | float) and math.isfinite(v) for k, v in doc["metrics"].items()
               if k not in nulls)  # fmt: skip
    group = doc["group_list"][0]
    assert group["score"] is None and "score" in group["not_finite"]


def test_info_json_of_a_finite_cluster_has_no_reasons(capsys):
    doc = _json(capsys, "info", "-t", str(GAP))
    assert doc["not_finite"] == {} and isinstance(doc["score"], float)
