"""`exalloc info` through the CLI: hinfo byte for byte; the JSON score equals the real hinfo's."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from conftest import sampled
from greedy_snapshots import PEERS_SNAPSHOT

import cli

SAMPLE = (
    "hbal-forth.data",
    "hbal-excl-tags.data",
    "hbal-location-exclusion.data",
    "hbal-split-insts.data",
    "hspace-groups-two.data",
    "hspace-tiered-dualspec-exclusive.data",
    "hsqueeze-overutilized.data",
    "missing-resources.data",
    "empty-cluster.data",
    "n1-failure.data",
)


def hinfo_score(hinfo: Path, path: Path) -> float:
    out = subprocess.run(
        [str(hinfo), "-t", str(path), "-v", "-v", "-v"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return float(re.search(r"^Cluster score: (\S+)$", out, re.M).group(1))  # type: ignore[union-attr]


def run_info(capsys, path: Path, *extra: str) -> tuple[int, str, str]:
    code = cli.main(["info", "-t", str(path), *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.reference
@pytest.mark.parametrize("name", SAMPLE)
def test_json_score_matches_hinfo(ganeti, capsys, name: str) -> None:
    path = ganeti.data_dir / name
    code, out, _ = run_info(capsys, path, "--json")
    assert code == 0
    data = json.loads(out)
    assert data["score"] == pytest.approx(hinfo_score(ganeti.hinfo, path), abs=1e-6)
    assert len(data["metrics"]) == 20
    assert data["score"] == pytest.approx(
        sum(data["metrics"][k] * w for k, w in data["weights"].items()), abs=1e-9
    )


def test_json_counts(ganeti, capsys) -> None:
    code, out, _ = run_info(capsys, ganeti.data_dir / "hbal-split-insts.data", "--json")
    data = json.loads(out)
    assert code == 0
    assert (data["groups"], data["nodes"], data["instances"]) == (2, 8, 128)
    assert [g["nodes"] for g in data["group_list"]] == [6, 2]
    assert data["n1_happy"] is True


#: Option sets hinfo's byte-for-byte comparison runs every Ganeti snapshot with: the shell
#: tests' (-v -v -p --print-instances), every verbosity, field lists, -O (a name that is no
#: node's too: hinfo's error after its first lines), --ignore-dynu.
HINFO_OPTIONS = (
    (),
    ("-v", "-v", "-p", "--print-instances"),
    ("-v", "-v", "-v", "-pname,pcnt,ptags,spindle_count"),
    ("-q",),
    ("-v", "-O", "node-01-001", "-p+idx,plist,slist"),
    ("-v", "-v", "-v", "-O", "no-such-node"),
    ("--ignore-dynu", "--print-instances", "-p"),
)

#: Snapshots whose reading is not hinfo's word for word: exalloc's one-line error names the
#: file and line (docs/info.md).
HINFO_UNLIKE = ("invalid-node.data",)


@pytest.mark.reference
@pytest.mark.parametrize("options", sampled(HINFO_OPTIONS), ids=" ".join)
def test_text_is_hinfos_byte_for_byte(ganeti, capsys, options: tuple[str, ...]) -> None:
    """stdout, stderr and exit code are the real hinfo's, on every Ganeti test snapshot."""
    paths = sorted(p for p in ganeti.data_dir.glob("*.data") if p.name not in HINFO_UNLIKE)
    assert len(paths) > 45
    for path in paths:
        real = subprocess.run(
            [str(ganeti.hinfo), "-t", str(path), *options],
            capture_output=True,
            text=True,
            timeout=60,
        )
        ours = run_info(capsys, path, *options)
        assert ours == (real.returncode, real.stdout, real.stderr), path.name


@pytest.mark.reference
@pytest.mark.parametrize(
    "argv",
    [[], ["unexpected-argument"], ["-t", "/dev/null", "-m", "localhost"]],
    ids=["no backend", "an argument", "two backends"],
)
def test_errors_are_hinfos(ganeti, capsys, argv: list[str]) -> None:
    real = subprocess.run([str(ganeti.hinfo), *argv], capture_output=True, text=True, timeout=60)
    code = cli.main(["info", *argv])
    captured = capsys.readouterr()
    assert (code, captured.out, captured.err) == (real.returncode, real.stdout, real.stderr)
    assert code == 1


def test_summary_is_exallocs_view(ganeti, capsys) -> None:
    path = ganeti.data_dir / "hspace-groups-two.data"
    code, out, _ = run_info(capsys, path, "--summary")
    assert code == 0
    assert "Loaded 4 nodes, 3 instances, 2 node groups" in out
    assert "Cluster is N+1 unhappy" in out
    assert f"Cluster score: {hinfo_score(ganeti.hinfo, path):.8f}" in out
    assert re.search(r"^   n1_cnt\s+6\.00000000\s+x1\.00$", out, re.M)
    assert "group-01 preferred" in out


def test_invalid_file_one_line_error(ganeti, capsys) -> None:
    code, out, err = run_info(capsys, ganeti.data_dir / "invalid-node.data")
    assert code == 1 and out == ""
    assert "Unknown node 'no-such-node' for instance new-0" in err
    assert "Traceback" not in err


def test_missing_file(tmp_path, capsys) -> None:
    code, _, err = run_info(capsys, tmp_path / "nope.data")
    assert code == 1 and "Traceback" not in err


@pytest.mark.reference
@pytest.mark.parametrize(
    "options",
    [
        ("-ppeermap,fmem,name",),  # PeerMap's order: largest memory first
        ("-v", "-O", "nodeA", "-O", "nodeB", "-O", "nodeC"),  # no online node: no metric
        ("-v", "-v", "-p", "--print-instances", "-O", "nodeC"),
    ],
    ids=" ".join,
)
def test_peers_snapshot_is_hinfos(ganeti, capsys, tmp_path, options: tuple[str, ...]) -> None:
    """Reduced differences with the real hinfo: `peermap` as htools' PeerMap list holds it,
    and with every node offline the coefficients table is its header alone."""
    path = tmp_path / "peers.data"
    path.write_text(PEERS_SNAPSHOT)
    real = subprocess.run(
        [str(ganeti.hinfo), "-t", str(path), *options], capture_output=True, text=True, timeout=60
    )
    assert run_info(capsys, path, *options) == (real.returncode, real.stdout, real.stderr)


@pytest.mark.reference
@pytest.mark.parametrize(
    "options", [(), ("-v", "-v", "-v", "-p", "--print-instances"), ("-q", "-q")], ids=" ".join
)
def test_requests_read_as_hinfo(ganeti, capsys, options: tuple[str, ...]) -> None:
    """`-I REQUEST`: hinfo merges the request's cluster twice (every instance on its nodes
    twice: the scores and node list; the instance list once: the counts and the instance
    map), each merge warning of inconsistent data; a refused request in hinfo's words. Every
    Ganeti request."""
    requests = sorted(ganeti.data_dir.glob("hail-*.json"))
    assert len(requests) > 15
    for request in requests:
        real = subprocess.run(
            [str(ganeti.hinfo), "-I", str(request), *options],
            capture_output=True,
            text=True,
            timeout=60,
        )
        code = cli.main(["info", "-I", str(request), *options])
        out = capsys.readouterr()
        assert (code, out.out, out.err) == (real.returncode, real.stdout, real.stderr), request


@pytest.mark.reference
@pytest.mark.parametrize(
    ("real", "ours"),
    [("hinfo", ["info"]), ("hbal", ["balance", "--greedy"]), ("hroller", ["roll", "--greedy"])],
    ids=lambda x: x if isinstance(x, str) else " ".join(x),
)
@pytest.mark.parametrize("value", ["x", "1.5", "0x10"])
def test_static_kvm_value_as_htools(ganeti, capsys, real: str, ours: list[str], value) -> None:
    """--static-kvm-node-memory read as htools reads it (`tryRead "static node memory"`: a bad
    value is its 'Error while parsing command line arguments', exit 1, not a usage error)."""
    path = ganeti.data_dir / "n1-failure.data"
    argv = ["-t", str(path), f"--static-kvm-node-memory={value}"]
    want = subprocess.run(
        [str(getattr(ganeti, real)), *argv], capture_output=True, text=True, timeout=60
    )
    try:
        code = cli.main([*ours, *argv])
    except SystemExit as e:  # the parser's exit
        code = e.code
    out = capsys.readouterr()
    assert (code, out.out, out.err) == (want.returncode, want.stdout, want.stderr)
