"""Writes that are all or nothing (issue 14): every output file goes through model.files.

Each case runs the real CLI in a process; a full disk is a file-size limit (RLIMIT_FSIZE:
Python ignores SIGXFSZ, so a write past the limit fails with EFBIG as it would with ENOSPC).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from model.errors import OutputError
from model.files import write_file, write_files

REPO = Path(__file__).resolve().parent.parent
SNAPSHOT = REPO / "data" / "squeeze" / "greedy-gap.data"
SCHEMA = REPO / "data" / "bareon" / "fixtures" / "two_disks_none_none.yaml"


def _cli(
    *args: str, file_limit: int | None = None, cwd: Path = REPO
) -> subprocess.CompletedProcess:
    def limit() -> None:
        if file_limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_limit, file_limit))

    return subprocess.run(
        [sys.executable, "-m", "cli", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        preexec_fn=limit,
        check=False,
        timeout=120,
    )


def _one_line_error(done: subprocess.CompletedProcess, *fragments: str) -> None:
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("exalloc: error: "), done.stderr
    for fragment in fragments:
        assert fragment in lines[0], done.stderr


def test_squeeze_save_into_a_missing_folder_is_one_line(tmp_path: Path) -> None:
    target = tmp_path / "missing" / "x"
    done = _cli("squeeze", "-t", str(SNAPSHOT), "-S", str(target))
    _one_line_error(done, f"{target}.original", "cannot write", "No such file or directory")


def test_squeeze_save_on_a_full_disk_leaves_nothing(tmp_path: Path) -> None:
    done = _cli(
        "squeeze", "-t", str(SNAPSHOT), "-S", "x", "-C", "x.sh", file_limit=600, cwd=tmp_path
    )
    _one_line_error(done, "cannot write", "File too large")
    assert list(tmp_path.iterdir()) == []  # no half set, no temporary left behind


def test_squeeze_failing_plan_writes_no_original(tmp_path: Path) -> None:
    done = _cli(
        "squeeze", "-t", str(SNAPSHOT), "-S", "x", "--minimal-resources", "nan", cwd=tmp_path
    )
    _one_line_error(done, "--minimal-resources")
    assert list(tmp_path.iterdir()) == []


def test_squeeze_writes_the_whole_set_once_planned(tmp_path: Path) -> None:
    done = _cli("squeeze", "-t", str(SNAPSHOT), "-S", "x", "-C", "x.sh", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.original", "x.sh", "x.squeezed"]
    # a new file gets the usual mode (0666 minus the umask), not mkstemp's 0600
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "x.original").stat().st_mode & 0o777 == 0o666 & ~umask


def test_squeeze_commands_to_an_unwritable_place_is_one_line(tmp_path: Path) -> None:
    target = tmp_path / "missing" / "x.sh"
    done = _cli("squeeze", "-t", str(SNAPSHOT), f"-C{target}")
    _one_line_error(done, str(target), "cannot write")


def test_partition_svg_unwritable_and_full_disk(tmp_path: Path) -> None:
    done = _cli("partition", "--schema", str(SCHEMA), "--svg", str(tmp_path / "no" / "x.svg"))
    _one_line_error(done, "x.svg", "cannot write")
    done = _cli(
        "partition", "--schema", str(SCHEMA), "--svg", "x.svg", file_limit=100, cwd=tmp_path
    )
    _one_line_error(done, "x.svg", "File too large")
    assert list(tmp_path.iterdir()) == []


def test_report_into_a_file_where_a_folder_should_be(tmp_path: Path) -> None:
    results = tmp_path / "r.jsonl"
    done = _cli("batch", str(SCHEMA), "--out", str(results), "--no-progress")
    assert done.returncode == 0, done.stderr
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    done = _cli("report", str(results), "--out", str(blocker / "report.html"))
    _one_line_error(done, "cannot")
    pngs = tmp_path / "pngs"
    done = _cli("report", str(results), "--out", str(pngs), file_limit=2000)
    _one_line_error(done, "File too large")
    assert not pngs.exists() or list(pngs.iterdir()) == []  # none of the set


def test_failed_set_keeps_the_old_files(tmp_path: Path) -> None:
    """A set that cannot be written entirely leaves every old file as it was."""
    old = {tmp_path / "a": "old a", tmp_path / "b": "old b"}
    for path, text in old.items():
        path.write_text(text)
    with pytest.raises(OutputError, match="missing"):
        write_files({tmp_path / "a": "new a", tmp_path / "missing" / "c": "new c"})
    assert {p: p.read_text() for p in old} == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]


def test_existing_mode_kept_symlink_followed_and_device_written_in_place(tmp_path: Path) -> None:
    target = tmp_path / "script.sh"
    target.write_text("old")
    target.chmod(0o750)
    link = tmp_path / "link.sh"
    link.symlink_to(target)
    write_file(link, "new")
    assert link.is_symlink() and target.read_text() == "new"
    assert target.stat().st_mode & 0o777 == 0o750
    write_file("/dev/null", "into a device, not over it")
    assert Path("/dev/null").is_char_device()
    with pytest.raises(OutputError, match="/dev/full: cannot write: No space left on device"):
        write_file("/dev/full", "x" * 100_000)
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())
