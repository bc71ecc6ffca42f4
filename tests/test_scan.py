"""`exalloc scan` prints and saves what the real hscan 3.0.2 does, byte for byte."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from ganeti_live import LuxiResponder, RapiAnswers, RapiServer

import cli
from model.backends.text import load_text

pytestmark = pytest.mark.reference


def hscan(*words: object) -> subprocess.CompletedProcess[str]:
    path = shutil.which("hscan")
    assert path, "hscan missing: run scripts/get-ganeti-reference"
    return subprocess.run([path, *map(str, words)], capture_output=True, text=True, timeout=60)


def scan(capsys: pytest.CaptureFixture[str], *words: object) -> tuple[int, str, str]:
    code = cli.main(["scan", *map(str, words)])
    out, err = capsys.readouterr()
    return code, out, err


def both(capsys, tmp_path: Path, *words: object) -> tuple[str, dict[str, bytes]]:  # noqa: ANN001
    """Run hscan and exalloc scan with `-d` folders of their own: the same stdout, exit code
    and saved files (by name and bytes); hscan's stdout and files."""
    theirs, ours = tmp_path / "hscan", tmp_path / "exalloc"
    theirs.mkdir()
    ours.mkdir()
    real = hscan("-d", theirs, *words)
    code, out, _ = scan(capsys, "-d", ours, *words)
    assert (code, out) == (real.returncode, real.stdout)
    files = {p.name: p.read_bytes() for p in theirs.iterdir()}
    assert {p.name: p.read_bytes() for p in ours.iterdir()} == files
    return real.stdout, files


@pytest.mark.parametrize(
    "options", [[], ["-p"], ["-pname,pcnt,fmem"], ["--no-headers", "-v", "-v"]]
)
def test_recorded_rapi_answers_as_hscan(capsys, ganeti, tmp_path, options) -> None:  # noqa: ANN001
    out, files = both(capsys, tmp_path, *options, f"file://{ganeti.data_dir}/rapi")
    assert len(files) == 1 and "13.83255238" in out
    assert load_text(tmp_path / "exalloc" / next(iter(files)))  # a snapshot exalloc reads back


@pytest.mark.parametrize(
    "name", ["hbal-split-insts.data", "hspace-tiered-mixed.data", "n1-failure.data"]
)
def test_served_snapshots_as_hscan(capsys, ganeti, tmp_path, name) -> None:  # noqa: ANN001
    """Ganeti's snapshots served over RAPI (several groups, exclusive storage, N+1 failures),
    two clusters in one run: the summary lines, node lists and saved files are hscan's."""
    answers = RapiAnswers.of_cluster(load_text(ganeti.data_dir / name))
    recorded = RapiAnswers.recorded(ganeti.data_dir / "rapi")
    with RapiServer(answers.bodies()) as first, RapiServer(recorded.bodies()) as second:
        out, files = both(capsys, tmp_path, "-p", first.url, second.url)
    assert len(files) == 2 and len(out.splitlines()) > 4


def test_unreadable_cluster_is_reported_and_the_others_scanned(capsys, ganeti, tmp_path) -> None:  # noqa: ANN001
    """hscan's paragraph for a cluster it cannot read (its details are exalloc's own words),
    the rest scanned, exit 2."""
    good = f"file://{ganeti.data_dir}/rapi"
    real = hscan("-d", tmp_path, "file:///no-such-folder", good)
    code, out, _ = scan(capsys, "-d", tmp_path, "file:///no-such-folder", good)
    assert code == real.returncode == 2
    head = "\nError for file:///no-such-folder: failed to load data. Details:\n"
    assert head in real.stdout and head in out
    assert out.splitlines()[-1] == real.stdout.splitlines()[-1]  # the good cluster's line


def test_local_cluster_through_luxi(capsys, ganeti, tmp_path) -> None:  # noqa: ANN001
    """No address: the local cluster through LUXI (-L SOCKET), named LOCAL."""
    recorded = RapiAnswers.recorded(ganeti.data_dir / "rapi")
    with tempfile.TemporaryDirectory(prefix="exl-", dir="/tmp") as folder:
        sock = Path(folder) / "q"
        with LuxiResponder(sock, recorded):
            out, files = both(capsys, tmp_path, f"-L{sock}")
    assert list(files) == ["LOCAL.data"] and out.splitlines()[1].startswith("LOCAL ")


def test_unwritable_folder_is_an_input_error(capsys, ganeti, tmp_path) -> None:  # noqa: ANN001
    code, _, err = scan(capsys, "-d", tmp_path / "missing", f"file://{ganeti.data_dir}/rapi")
    assert code == 1 and err.startswith("exalloc: error: ") and "missing" in err
    assert len(err.splitlines()) == 1


def test_help_completion_and_version(capsys) -> None:  # noqa: ANN001
    code, out, _ = scan(capsys, "--help-completion")
    assert code == 0
    lines = out.splitlines()
    assert "-d,--output-dir dir" in lines and "--no-headers none" in lines
    assert lines[-1] == "host 0 none"
    code, out, _ = scan(capsys, "--version")
    assert code == 0 and "hscan" in out


@pytest.fixture(autouse=True)
def _no_exit(monkeypatch) -> Iterator[None]:  # noqa: ANN001
    """argparse's exits (--version, --help-completion) come back as exit codes."""
    original = cli.main

    def main(argv):  # noqa: ANN001, ANN202
        try:
            return original(argv)
        except SystemExit as stop:
            return stop.code or 0

    monkeypatch.setattr(cli, "main", main)
    yield
