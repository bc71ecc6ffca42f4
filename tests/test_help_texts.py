"""Help texts and layouts that had drifted (issue 40, item 11)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import cli

ROOT = Path(__file__).resolve().parent.parent


def _help(capsys, *words: str) -> str:
    with pytest.raises(SystemExit):
        cli.main([*words, "--help"])
    return " ".join(capsys.readouterr().out.split())  # argparse's wrapping undone


def test_hail_help_gives_the_default_time_limit(capsys):
    assert "(default 60 s for the whole answer, as Ganeti waits)" in _help(capsys, "hail")


@pytest.mark.parametrize("command", ["compare", "batch"])
def test_compare_and_batch_say_live_sources_repeat(capsys, command):
    text = _help(capsys, command)
    assert text.count("repeat the option for more clusters, each one input") == 2


def test_generate_help_gives_every_default(capsys):
    text = _help(capsys, "generate")
    options = re.findall(r" (--[a-z-]+) [A-Z|,:.-]+ ", text)
    for option in ("--nodes", "--requests", "--bareon", "--fill", "--count", "--groups"):
        assert option in options
    for shown in ("(default 8)", "(default allocate,multi-allocate)", "(default 0)",
                  "0..1 (default 0.5)"):  # fmt: skip
        assert shown in text


def test_the_compare_tables_keep_labels_apart_from_values(htools, capsys):
    request = ROOT / "data" / "requests" / "dedicated-greedy-trap.json"
    assert cli.main(["hail", "--compare", str(request)]) == 0
    out = capsys.readouterr().out
    rows = out.split("after the answer", 1)[1].splitlines()[1:5]
    labels = ("instances placed/moved", "cluster score", "N+1 redundant (exact)",
              "N+1 (htools' greedy)")  # fmt: skip
    for row, label in zip(rows, labels, strict=True):
        assert row.startswith(label + "  "), row  # was "instances placed/moved2"
