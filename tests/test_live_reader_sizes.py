"""Sizes past 2^20 MiB (1 TiB) through the live readers: RAPI and LUXI read memory and disk
with the MiB limit (model.validate.MAX_MIB), not the count limit. A node with 4 TiB of disk
once read as 0 MiB of disk through LUXI and RAPI (the reader's default swallowed the refusal),
so every live answer on such a cluster was about another cluster."""

from __future__ import annotations

import tempfile
from pathlib import Path

from ganeti_live import LuxiResponder, RapiAnswers, RapiServer

from model.backends.luxi import load_luxi
from model.backends.rapi import load_rapi
from model.backends.text import load_text

ROOT = Path(__file__).resolve().parent.parent


def _big_cluster(tmp_path: Path):  # noqa: ANN202
    """greedy-gap.data with 2 TiB of memory and 4-8 TiB of disk per node."""
    lines = []
    for line in (ROOT / "data/squeeze/greedy-gap.data").read_text().splitlines():
        fields = line.split("|")
        if line.startswith("node-"):
            fields[1] = str(2 * 2**20)  # total memory
            fields[3] = str(2**20 + 4096)  # free memory
            fields[4] = str(8 * 2**20)  # total disk
            fields[5] = str(4 * 2**20)  # free disk
        lines.append("|".join(fields))
    path = tmp_path / "big.data"
    path.write_text("\n".join(lines) + "\n")
    return load_text(str(path))


def _sizes(cluster) -> list[tuple]:  # noqa: ANN001
    return [
        (n.name, n.total_memory_mib, n.free_memory_mib, n.total_disk_mib, n.free_disk_mib)
        for n in cluster.nodes
    ]


def test_rapi_and_luxi_read_tebibytes(tmp_path: Path) -> None:
    cluster = _big_cluster(tmp_path)
    assert max(n.free_disk_mib for n in cluster.nodes) == 4 * 2**20
    answers = RapiAnswers.of_cluster(cluster)
    with RapiServer(answers.bodies()) as server:
        through_rapi = load_rapi(server.url)
    with tempfile.TemporaryDirectory(prefix="exl-", dir="/tmp") as folder:
        sock = Path(folder) / "master.sock"
        with LuxiResponder(sock, answers):
            through_luxi = load_luxi(str(sock))
    assert _sizes(through_rapi) == _sizes(cluster)
    assert _sizes(through_luxi) == _sizes(cluster)


def test_a_size_past_the_limit_is_refused_not_read_as_missing(tmp_path: Path) -> None:
    """LUXI reads a node's disk fields with a default for a missing value (htools'
    lvconvert); a disk past exalloc's 2^40 MiB limit is refused by name, never read as 0."""
    import pytest

    from model.errors import LiveSourceError

    answers = RapiAnswers.of_cluster(_big_cluster(tmp_path))
    answers.nodes[1]["dfree"] = 2**41
    with tempfile.TemporaryDirectory(prefix="exl-", dir="/tmp") as folder:
        sock = Path(folder) / "master.sock"
        with LuxiResponder(sock, answers), pytest.raises(LiveSourceError) as refused:
            load_luxi(str(sock))
    message = str(refused.value)
    assert "dfree" in message and "larger than 2^40" in message, message
