"""A long solve shows its progress on stderr (issue 40, item 5): with --progress or on a
terminal, never on stdout, never in iallocator mode unless asked."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import cli
from solvers import progress

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOT = ROOT / "data" / "squeeze" / "mixed-standby.data"
REQUEST = ROOT / "data" / "requests" / "dedicated-12-nodes-multi.json"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _every_update_drawn(monkeypatch) -> None:
    monkeypatch.setattr(progress, "LINE_EVERY_S", 0.0)
    monkeypatch.setattr(progress, "REDRAW_EVERY_S", 0.0)


def test_progress_goes_to_stderr_with_the_stage_and_never_to_stdout(capsys, monkeypatch):
    _every_update_drawn(monkeypatch)
    assert cli.main(["squeeze", "--progress", "--json", "-t", str(SNAPSHOT)]) == 0
    out, err = capsys.readouterr()
    json.loads(out)  # stdout is the answer alone
    lines = [x for x in err.splitlines() if x.startswith("exalloc: ") and ", gap " in x]
    assert lines, err
    assert any("best " in x and "bound " in x and x.endswith(" s") for x in lines)
    assert "exalloc:" not in out


def test_a_terminal_gets_one_status_line_redrawn_and_cleared(monkeypatch, capsys):
    _every_update_drawn(monkeypatch)
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert cli.main(["squeeze", "-t", str(SNAPSHOT)]) == 0
    drawn = terminal.getvalue()
    assert "\rexalloc: " in drawn and drawn.endswith("\r\x1b[K")
    assert "exalloc:" not in capsys.readouterr().out


def test_iallocator_mode_shows_none_on_a_terminal_unless_asked(monkeypatch, capsys):
    _every_update_drawn(monkeypatch)
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert cli.hail_main([str(REQUEST)]) == 0
    assert "\rexalloc: " not in terminal.getvalue()
    assert cli.hail_main(["--progress", str(REQUEST)]) == 0
    assert "\rexalloc: " in terminal.getvalue()
    assert '"success":true' in capsys.readouterr().out


def test_cpsat_reports_its_incumbent_and_bound_during_the_solve(capsys, monkeypatch):
    """CP-SAT's incumbents and bounds reach the status line while it searches (its solution
    and bound callbacks), not only once a stage has ended (the lexicographic driver's line)."""
    import traceback

    _every_update_drawn(monkeypatch)
    during: list[tuple[float | None, float | None]] = []
    shown = progress.StatusLine.solving

    def solving(self, best, bound, gap):
        frames = traceback.extract_stack()
        if any(f.name == "solve" and f.filename.endswith("cpsat_backend.py") for f in frames):
            during.append((best, bound))
        shown(self, best, bound, gap)

    monkeypatch.setattr(progress.StatusLine, "solving", solving)
    args = ["squeeze", "--progress", "--json", "--solver", "cpsat", "-t", str(SNAPSHOT)]
    assert cli.main(args) == 0
    out, err = capsys.readouterr()
    answer = json.loads(out)
    assert during, err
    assert any(best is not None for best, _ in during)
    assert "exalloc:" not in out and answer
