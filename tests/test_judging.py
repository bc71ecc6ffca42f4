"""Verdicts against the greedy tools only where a greedy tool ran (issue 40, item 8)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import cli
from programs.batch import summarise
from programs.judging import verdict

ROOT = Path(__file__).resolve().parent.parent
RECORD = {"input": "a.json", "problem": "allocate", "value": 1, "lost": [0, 0, 3], "error": None}


def test_no_greedy_answer_is_no_verdict():
    assert verdict(dict(RECORD)) == "-"
    assert verdict({**RECORD, "greedy": None}) == "-"


def test_a_greedy_tool_that_found_nothing_loses():
    assert verdict({**RECORD, "greedy": {"tool": "hail", "value": None}}) == "exact better"
    same = {"tool": "hail", "value": 1, "lost": [0, 0, 3]}
    assert verdict({**RECORD, "greedy": same}) == "same"


def test_a_batch_without_compare_counts_no_verdicts(tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    request = ROOT / "data" / "requests" / "dedicated-12-nodes-allocate.json"
    assert cli.main(["batch", str(request), "--out", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    records = [json.loads(line) for line in out.read_text().splitlines()]
    (row,) = summarise(records)
    assert row["ok"] == 1
    assert (row["exact_better"], row["same"], row["greedy_better"]) == (None, None, None)
    line = next(x for x in text.splitlines() if x.startswith("allocate "))
    cells = re.split(r"\s{2,}", line)
    assert cells[6:9] == ["-", "-", "-"], line  # exact better, same, greedy better
