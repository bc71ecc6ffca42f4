"""The last line of defence in cli.main: a bug is one line and exit 70, the traceback only
with --debug (issue 14)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SNAPSHOT = REPO / "data" / "squeeze" / "greedy-gap.data"

# A real process running the real cli.main, in which one function the command calls has a bug:
# the score of the cluster divides by zero (no input can do that today: that is the point).
BUGGY = """
import sys
import cli
import model.htools.hinfo


def broken_score(*args, **kwargs):
    return 1 / 0


model.htools.hinfo.cluster_score = broken_score
sys.exit(cli.main(sys.argv[1:]))
"""


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", BUGGY, *args], cwd=REPO, capture_output=True, text=True, timeout=60
    )


def test_unexpected_exception_is_one_line_and_exit_70() -> None:
    done = _run("info", "-t", str(SNAPSHOT))
    assert done.returncode == 70
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("exalloc: internal error: ZeroDivisionError: division by zero at ")
    assert "please report it" in lines[0] and "--debug" in lines[0]
    assert "Traceback" not in done.stderr


def test_debug_shows_the_traceback() -> None:
    done = _run("--debug", "info", "-t", str(SNAPSHOT))
    assert done.returncode == 70
    assert "Traceback (most recent call last)" in done.stderr
    assert "broken_score" in done.stderr
    assert done.stderr.splitlines()[-1].startswith("exalloc: internal error: ZeroDivisionError")


def test_bad_input_is_still_exit_1_and_usage_2() -> None:
    done = _run("info", "-t", str(REPO / "no-such.data"))
    assert done.returncode == 1 and done.stderr.startswith("exalloc: error: ")
    done = _run("info", "--no-such-option")
    assert done.returncode == 2
