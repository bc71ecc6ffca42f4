"""Usage mistakes exit 2 with the command's usage line and create nothing (issue 40, item 9)."""

from __future__ import annotations

from pathlib import Path

import pytest

import cli

ROOT = Path(__file__).resolve().parent.parent


def _exit_code(words: list[str]) -> int:
    """What the process would exit with: argparse's own errors exit from inside main."""
    try:
        return cli.main(words)
    except SystemExit as ended:
        return int(ended.code or 0)


@pytest.mark.parametrize(
    "argv",
    [
        ["compare"],
        ["batch", "--out", "{out}/results/r.jsonl"],
        ["batch", str(ROOT / "data"), "--workers", "0", "--out", "{out}/results/r.jsonl"],
        ["generate", "--groups", "0", "--out", "{out}/gen"],
        ["generate", "--fill", "5", "--out", "{out}/gen"],
        ["generate", "--count", "-1", "--out", "{out}/gen"],
        ["generate", "--nodes", "0", "--out", "{out}/gen"],
        ["generate", "--templates", "floppy", "--out", "{out}/gen"],
        ["generate", "--multi-count", "0", "--out", "{out}/gen"],
    ],
    ids=lambda argv: " ".join(a for a in argv if "{out}" not in a and "/" not in a),
)
def test_a_usage_mistake_exits_2_with_the_usage_line_and_writes_nothing(tmp_path, capsys, argv):
    words = [a.replace("{out}", str(tmp_path)) for a in argv]
    code = _exit_code(words)
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith(f"usage: exalloc {words[0]} "), err
    last = err.rstrip("\n").splitlines()[-1]
    assert last.startswith("exalloc: error: ") and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_named_inputs_that_hold_none_are_an_input_error(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    code = cli.main(["compare", str(tmp_path / "empty")])
    err = capsys.readouterr().err
    assert code == 1 and "no inputs" in err and not err.startswith("usage:")


@pytest.mark.parametrize(
    "argv",
    [
        ["redistribute", "-t", "{missing}"],
        ["compress", "-t", "{missing}"],
        ["evacuate", "-t", "{missing}", "--nodes", "node-a1"],
    ],
)
def test_cpsat_on_the_relocation_models_is_refused_before_reading(tmp_path, capsys, argv):
    """Their N+1 reserves are continuous: CP-SAT's refusal came as an error about the file
    (issue 40, item 3); a missing file shows that nothing was read."""
    words = [a.replace("{missing}", str(tmp_path / "missing.data")) for a in argv]
    code = _exit_code([*words, "--solver", "cpsat"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith(f"usage: exalloc {words[0]} ")
    assert err.rstrip("\n").splitlines()[-1] == (
        f"exalloc: error: --solver cpsat cannot solve {words[0]}'s model (its N+1 reserves are "
        "continuous variables): use --solver highs, the default"
    )


def test_cpsat_on_a_continuous_hail_model_is_a_usage_error_not_the_requests(capsys):
    request = ROOT / "data" / "requests" / "normal-node-evacuate.json"
    code = _exit_code(["hail", "--solver", "cpsat", str(request)])
    err = capsys.readouterr().err
    assert code == 2, err
    last = err.rstrip("\n").splitlines()[-1]
    assert last.startswith("exalloc: error: --solver cpsat cannot solve this question's model")
    assert str(request) not in last and last.endswith("use --solver highs")


def test_cpsat_still_answers_what_it_can(capsys):
    request = ROOT / "data" / "requests" / "dedicated-12-nodes-multi.json"
    assert cli.main(["hail", "--solver", "cpsat", str(request)]) == 0
    assert '"success":true' in capsys.readouterr().out
