"""What htools programs say about a cluster they loaded (model/htools/loader.py), against hinfo."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from model.backends.text import load_text, parse_text
from model.errors import InputError
from model.htools.loader import (
    inconsistent_data_warning,
    loading_warning,
    suffix_note,
    update_missing,
)

# three nodes, the first and the last short of memory and disk, the middle one consistent
THREE_NODES = """\
default|fake-uuid-01|preferred||

node1|4096|0|1024|95367|0|4|N|fake-uuid-01|1
node2|1024|0|1024|95367|95367|4|N|fake-uuid-01|1
node3|8192|0|0|195367|0|4|N|fake-uuid-01|1


"""

_WARNING_BLOCK = re.compile(r"Warning: cluster has inconsistent data:\n(?:  - .*\n)*\n")


def hinfo(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["hinfo", *map(str, args)], capture_output=True, text=True, timeout=60)


def _valid_files(ganeti) -> list[Path]:  # noqa: ANN001
    files = []
    for path in sorted(ganeti.data_dir.glob("*.data")):
        try:
            load_text(path)
        except InputError:  # invalid-node.data, and the two naming an instance twice
            continue
        files.append(path)
    return files


@pytest.mark.reference
def test_warnings_are_hinfos_on_ganetis_files(ganeti, tmp_path: Path) -> None:  # noqa: ANN001
    """Every file hinfo and exalloc both read: the same inconsistent-data warning on stderr
    (missing-resources.data among those that have one), or none."""
    files = _valid_files(ganeti)
    with_warning = 0
    for path in files:
        proc = hinfo("-t", path)
        assert proc.returncode == 0, path.name
        real = "".join(m.group() for m in _WARNING_BLOCK.finditer(proc.stderr))
        assert loading_warning(load_text(path)) == real, path.name
        with_warning += bool(real)
    assert len(files) >= 45 and with_warning >= 3
    assert update_missing(load_text(ganeti.data_dir / "missing-resources.data")) == [
        "node node2 is missing 1024 MB ram and 93 GB disk"
    ]


@pytest.mark.reference
def test_warnings_come_last_node_first(htools, tmp_path: Path) -> None:  # noqa: ANN001
    path = tmp_path / "three.data"
    path.write_text(THREE_NODES)
    assert update_missing(parse_text(THREE_NODES)) == [
        "node node3 is missing 8192 MB ram and 190 GB disk",
        "node node1 is missing 3072 MB ram and 93 GB disk",
    ]
    assert hinfo("-t", path).stderr == loading_warning(parse_text(THREE_NODES))


def test_no_messages_no_warning() -> None:
    assert inconsistent_data_warning([]) == ""
    assert inconsistent_data_warning(["a", "b"]) == (
        "Warning: cluster has inconsistent data:\n  - a\n  - b\n\n"
    )


@pytest.mark.reference
def test_suffix_note_is_hinfos(ganeti) -> None:  # noqa: ANN001
    """hinfo -v -v prints the note exactly when exalloc finds a common suffix, with it."""
    noted = 0
    for path in _valid_files(ganeti):
        out = hinfo("-v", "-v", "-t", path).stdout
        note = suffix_note(load_text(path))
        real = re.search(r"^Note: Stripping common suffix of '.*' from names$", out, re.M)
        assert (real.group() if real else None) == note, path.name
        noted += note is not None
    assert noted >= 1  # common-suffix.data
