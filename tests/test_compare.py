"""exalloc compare: both answers judged by exalloc's checkers, and exalloc alone without htools."""

from __future__ import annotations

import json
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

from model.backends.text import dump_text
from model.generate import ClusterSpec, generate_cluster, generate_request
from programs import compare, judging, tasks
from solvers.options import SolverOptions

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "data" / "bareon" / "fixtures"


def _args(*inputs: Path) -> Namespace:
    return Namespace(
        inputs=[str(p) for p in inputs],
        greedy_timeout=60.0,
        solver_options=SolverOptions(time_limit=30.0),
        json=False,
        master=None,
        luxi=None,
    )


def _snapshots(tmp_path: Path, seeds: range, **spec) -> list[Path]:
    paths = []
    for seed in seeds:
        cluster = generate_cluster(ClusterSpec(**spec), seed)
        path = tmp_path / f"snap-{seed}.data"
        path.write_text(dump_text(cluster))
        paths.append(path)
    return paths


def test_partition_against_lp_floor() -> None:
    inputs = sorted(FIXTURES.glob("two_disks_*.yaml")) + [
        FIXTURES / "three_disks_ceph_example.yaml"
    ]
    report = compare.run(_args(*inputs))
    assert len(report.records) == len(inputs)
    for r in report.records:
        assert r["problem"] == "partition" and r["status"] == "optimal", r.get("error")
        assert r["greedy"]["tool"] == "lp-floor"
        assert judging.verdict(r) in ("same", "exact better")
    text = report.text()
    assert "lp-floor" in text and "MiB lost" in text
    assert report.exit_code == 0


def test_squeeze_against_real_hsqueeze(htools, tmp_path: Path) -> None:
    """On ext clusters exalloc frees at least as many nodes, both plans pass the checker."""
    paths = _snapshots(tmp_path, range(4), nodes=6, templates=("ext",), fill=0.3)
    report = compare.run(_args(*paths))
    for r in report.records:
        assert r["error"] is None, r["error"]
        assert r["status"] == "optimal" and r["violations"] == 0
        greedy = r["greedy"]
        assert greedy["tool"] == "hsqueeze" and greedy["violations"] == 0
        assert r["value"] >= greedy["value"]
        assert judging.verdict(r) in ("same", "exact better")
    assert "hsqueeze" in report.text()


def test_hsqueeze_short_names_are_resolved(htools) -> None:
    """hsqueeze prints names without the common domain suffix; the checker needs them whole."""
    records = compare.run(_args(REPO / "data" / "clusters" / "mixed-two-groups.data")).records
    record = next(r for r in records if r["problem"] == "squeeze")  # two groups: n1 etc. too
    greedy = record["greedy"]
    assert greedy["violations"] == 0 and greedy["answer"]["moves"] > 0
    assert all(n.endswith(".example.com") for n in greedy["answer"]["nodes"])


def test_without_htools_exalloc_is_shown_alone(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no hsqueeze on PATH
    monkeypatch.setenv("EXALLOC_REAL_HAIL", str(tmp_path / "no-hail"))
    (data,) = _snapshots(tmp_path, range(1), nodes=4)
    fixture = FIXTURES / "single_disk_min_only.yaml"
    report = compare.run(_args(data, fixture))
    squeeze = next(r for r in report.records if r["problem"] == "squeeze")
    assert squeeze["greedy"]["error"] == tasks.INSTALL_HINT
    partition = next(r for r in report.records if r["problem"] == "partition")
    assert partition["greedy"]["value"] == 0  # the baseline needs no htools
    text = report.text()
    assert "scripts/get-ganeti-reference" in text and "showing exalloc alone" in text
    assert text.count("scripts/get-ganeti-reference") == 1


def test_requests_are_answered_by_real_hail(htools, tmp_path: Path) -> None:
    cluster = generate_cluster(ClusterSpec(nodes=5, fill=0.3), 4)
    request = tmp_path / "r.allocate.json"
    request.write_text(json.dumps(generate_request(cluster, 4)))
    (record,) = compare.run(_args(request)).records
    assert record["problem"] == "allocate"
    assert record["greedy"]["tool"] == "hail" and record["greedy"]["value"] in (0, 1)


def test_answer_lines() -> None:
    squeeze = {"mode": "offline", "nodes": ["n3", "n4"], "moves": 5}
    assert judging.answer_text(squeeze) == "power off n3, n4; 5 moves"
    assert judging.answer_text({"mode": "none", "nodes": [], "moves": 0}) == "no action"
    placed = {"placements": {"i1": ["n1", "n2"], "i2": ["n3"]}}
    assert judging.answer_text(placed) == "i1 -> n1/n2; i2 -> n3"
    layout = {
        "layout": [{"disk_id": "sda", "spaces": [{"space_id": "lv1", "size": 20},
                                                {"space_id": "lv2", "size": 0},
                                                {"space_id": "unallocated", "size": 80}]}],
        "unallocated_mib": 80,
    }  # fmt: skip
    assert judging.answer_text(layout) == "sda: lv1 20 (unallocated 80 MiB)"


def test_verdicts() -> None:
    base = {"problem": "squeeze", "error": None, "value": 3}
    assert judging.verdict({**base, "greedy": {"value": 2}}) == "exact better"
    assert judging.verdict({**base, "greedy": {"value": 3}}) == "same"
    assert judging.verdict({**base, "greedy": {"value": 4}}) == "greedy better"
    lost = {"problem": "partition", "error": None, "value": 0}
    assert judging.verdict({**lost, "greedy": {"value": 10}}) == "exact better"
    assert judging.verdict({**lost, "greedy": {"value": None}}) == "exact better"
    assert judging.verdict({**lost, "greedy": {"error": "x"}}) == "-"
    assert judging.verdict({**lost, "error": "bad"}) == "-"
    fewer_moves = {**base, "answer": {"moves": 2}, "greedy": {"value": 3, "answer": {"moves": 4}}}
    assert judging.verdict(fewer_moves) == "exact better"
    broken = {**base, "greedy": {"value": 3, "violations": 2}}
    assert judging.verdict(broken) == "exact better"


def test_response_placements(tmp_path: Path) -> None:
    request = tmp_path / "r.json"
    request.write_text('{"request": {"type": "allocate", "name": "i0"}}')
    one = {"success": True, "result": ["n1", "n2"]}
    assert judging.response_placements(str(request), one) == {"i0": ["n1", "n2"]}
    assert judging.response_placements(str(request), {"success": False, "result": []}) == {}
    multi = {"success": True, "result": [[["i1", ["n1"]], ["i2", ["n2", "n1"]]], ["i3"]]}
    assert judging.response_placements(str(request), multi) == {"i1": ["n1"], "i2": ["n2", "n1"]}


def test_dedicated_requests_against_real_hail(ganeti, tmp_path: Path) -> None:
    """Both answers judged by the checker: placed count and lost-allocation vector."""
    paths = [
        ganeti.data_dir / "hail-alloc-dedicated-1.json",
        ganeti.data_dir / "hail-multialloc-dedicated.json",
    ]
    for seed in range(2):
        cluster = generate_cluster(
            ClusterSpec(nodes=5, exclusive_storage=True, templates=("plain",)), seed
        )
        for kind in ("allocate", "multi-allocate"):
            path = tmp_path / f"s{seed}.{kind}.json"
            path.write_text(json.dumps(generate_request(cluster, seed, kind)))
            paths.append(path)
    report = compare.run(_args(*paths))
    for r in report.records:
        assert r["error"] is None, r["error"]
        assert r["violations"] == 0 and r["greedy"]["violations"] == 0
        assert r["greedy"]["tool"] == "hail"
        if r["value"] == 0:  # no node can take it: hail fails too
            assert r["status"] == "infeasible" and r["greedy"]["value"] == 0
        else:
            assert r["status"] == "optimal" and r["lost"]
        assert judging.verdict(r) in ("same", "exact better")
    assert report.records[0]["problem"] == "allocate"
    assert report.records[1]["problem"] == "multi-allocate"


def test_non_dedicated_request_is_answered_beside_hail(ganeti) -> None:
    """A normal group: htools' algorithm with the exact N+1 check places the instance too."""
    (record,) = compare.run(_args(ganeti.data_dir / "hail-alloc-drbd.json")).records
    assert record["error"] is None and record["value"] == 1
    assert record["greedy"]["value"] == 1


def test_missing_input_is_a_one_line_error(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cli", "compare", str(tmp_path / "nope.data")],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1 and "no such file or directory" in done.stderr
    assert "Traceback" not in done.stderr
