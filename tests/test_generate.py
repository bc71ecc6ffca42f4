"""Generated inputs are seeded, consistent, and load in exalloc and in the real htools."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from model.backends.text import dump_text, parse_text
from model.errors import InputError
from model.generate import (
    GENERATED_IPOLICY,
    ClusterSpec,
    generate_bareon,
    generate_cluster,
    generate_request,
    instance_shapes,
)
from model.state import node_states

REPO = Path(__file__).resolve().parent.parent


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cli", *args], cwd=REPO, capture_output=True, text=True, check=False
    )


SPECS = [
    ClusterSpec(nodes=6),
    ClusterSpec(nodes=9, groups=2, standby=2, fill=0.7),
    ClusterSpec(nodes=5, templates=("ext",), fill=0.3),
    ClusterSpec(nodes=4, exclusive_storage=True, templates=("plain",), fill=0.6),
]


@pytest.mark.parametrize("spec", SPECS)
def test_snapshot_is_seeded_and_round_trips(spec: ClusterSpec) -> None:
    a, b = generate_cluster(spec, 7), generate_cluster(spec, 7)
    assert dump_text(a) == dump_text(b)
    assert dump_text(generate_cluster(spec, 8)) != dump_text(a)
    again = parse_text(dump_text(a))
    assert dump_text(again) == dump_text(a)
    assert len(a.nodes) == spec.nodes
    assert sum(n.offline for n in a.nodes) == spec.standby


@pytest.mark.parametrize("spec", SPECS)
def test_snapshot_is_consistent(spec: ClusterSpec) -> None:
    """Reported free memory matches the instances: no memory goes missing, N+1 holds."""
    for seed in range(5):
        cluster = generate_cluster(spec, seed)
        states = node_states(cluster)
        for node in cluster.nodes:
            used = sum(i.memory_mib for i in cluster.primaries_of(node.name) if i.uses_memory)
            assert node.free_memory_mib == node.total_memory_mib - node.node_memory_mib - used
            assert node.free_disk_mib >= 0
            assert not cluster.primaries_of(node.name) or not node.offline
        assert states is not None
        for inst in cluster.instances:
            assert inst.disk_template in spec.templates
            assert (inst.secondary is not None) == (inst.disk_template == "drbd")


def test_standby_nodes_are_tagged_offline_and_empty() -> None:
    cluster = generate_cluster(ClusterSpec(nodes=6, standby=2), 3)
    standby = [n for n in cluster.nodes if n.offline]
    assert len(standby) == 2
    for n in standby:
        assert "htools:standby:auto" in n.tags
        assert not cluster.primaries_of(n.name) and not cluster.secondaries_of(n.name)


def test_instance_shapes_follow_the_ipolicy() -> None:
    top = GENERATED_IPOLICY.minmax[-1].max
    for shape in instance_shapes(GENERATED_IPOLICY):
        assert shape.memory_size % GENERATED_IPOLICY.std.memory_size == 0
        assert shape.memory_size <= top.memory_size and shape.disk_size <= top.disk_size


def test_node_types_option(tmp_path: Path) -> None:
    from model.backends.text import load_text

    out = tmp_path / "n"
    done = _cli("generate", "--out", str(out), "--count", "2", "--nodes", "5",
                "--node-types", "16384:204800:4", "--requests", "none")  # fmt: skip
    assert done.returncode == 0, done.stderr
    for k in range(2):
        for node in load_text(out / f"snap-000{k}.data").nodes:
            assert (node.total_memory_mib, node.total_disk_mib, node.total_cpus) == (
                16384, 204800, 4,
            )  # fmt: skip


def test_dedicated_policy_has_three_size_classes(tmp_path: Path) -> None:
    from model.backends.text import load_text
    from model.generate import DEDICATED_IPOLICY

    assert len(DEDICATED_IPOLICY.minmax) == 3
    for shape in instance_shapes(DEDICATED_IPOLICY):
        assert any(
            mm.min.memory_size <= shape.memory_size <= mm.max.memory_size
            and mm.min.disk_size <= shape.disk_size <= mm.max.disk_size
            for mm in DEDICATED_IPOLICY.minmax
        )
    out = tmp_path / "d"
    done = _cli("generate", "--out", str(out), "--count", "1", "--exclusive-storage")
    assert done.returncode == 0, done.stderr
    cluster = load_text(out / "snap-0000.data")
    assert all(n.exclusive_storage for n in cluster.nodes)
    assert cluster.groups[0].ipolicy == DEDICATED_IPOLICY
    request = json.loads((out / "snap-0000.multi-allocate.json").read_text())
    (group,) = request["nodegroups"].values()
    assert len(group["ipolicy"]["minmax"]) == 3


def test_requests_have_iallocator_shape() -> None:
    cluster = generate_cluster(ClusterSpec(nodes=5), 1)
    one = generate_request(cluster, 1)
    assert one["request"]["type"] == "allocate"
    assert set(one) >= {"nodes", "instances", "nodegroups", "cluster_tags", "enabled_hypervisors"}
    multi = generate_request(cluster, 2, "multi-allocate", count=4)
    assert len(multi["request"]["instances"]) == 4
    with pytest.raises(InputError):
        generate_request(cluster, 1, "relocate")


def test_bareon_pairs_are_feasible_fixtures() -> None:
    from model.bareon.schema import problem_from_data

    for seed in range(10):
        doc = generate_bareon(seed, disks=3, spaces=5)
        assert doc == generate_bareon(seed, disks=3, spaces=5)
        problem = problem_from_data(doc["dynamic_schema"], doc["hw_info"])
        total = sum(d.size_mib for d in problem.disks)
        assert sum(s.min_mib for s in problem.spaces) <= total


def test_generate_command_writes_named_files(tmp_path: Path) -> None:
    out = tmp_path / "gen"
    done = _cli("generate", "--out", str(out), "--count", "3", "--nodes", "4-6", "--bareon", "2")
    assert done.returncode == 0, done.stderr
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(
        [f"snap-000{k}.data" for k in range(3)]
        + [f"snap-000{k}.allocate.json" for k in range(3)]
        + [f"snap-000{k}.multi-allocate.json" for k in range(3)]
        + ["bareon-0000.yaml", "bareon-0001.yaml"]
    )
    assert yaml.safe_load((out / "bareon-0000.yaml").read_text())["hw_info"]["disks"]
    again = tmp_path / "again"
    _cli("generate", "--out", str(again), "--count", "3", "--nodes", "4-6", "--bareon", "2")
    for name in names:
        assert (out / name).read_bytes() == (again / name).read_bytes()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--nodes", "x"], "--nodes must be N or LOW-HIGH"),
        (["--nodes", "5-3"], "is empty"),
        (["--templates", "ext,zfs"], "--templates takes"),
        (["--fill", "2"], "fill must be within"),
        (["--requests", "evacuate"], "--requests takes"),
        (["--node-types", "64G:1T:8"], "--node-types takes"),
        (["--node-types", "0:100:8"], "sizes must be positive"),
    ],
)
def test_generate_bad_options_are_usage_errors(
    tmp_path: Path, args: list[str], message: str
) -> None:
    done = _cli("generate", "--out", str(tmp_path / "g"), *args)
    assert done.returncode == 2  # a usage error (issue 40, item 9), before the folder exists
    assert message in done.stderr and "Traceback" not in done.stderr
    assert done.stderr.startswith("usage: exalloc generate ")
    assert done.stderr.strip().splitlines()[-1].startswith("exalloc: error: ")
    assert not (tmp_path / "g").exists()


def test_real_htools_load_generated_inputs(htools, tmp_path: Path) -> None:
    """hinfo reads every snapshot without warnings; hail answers every request."""
    for k, spec in enumerate(SPECS):
        cluster = generate_cluster(spec, k)
        data = tmp_path / f"c{k}.data"
        data.write_text(dump_text(cluster))
        info = subprocess.run(
            [str(htools.hinfo), "-t", str(data)], capture_output=True, text=True, check=False
        )
        assert info.returncode == 0 and "missing" not in info.stderr, info.stderr
        for kind in ("allocate", "multi-allocate"):
            req = tmp_path / f"c{k}.{kind}.json"
            req.write_text(json.dumps(generate_request(cluster, k, kind)))
            done = subprocess.run(
                [str(htools.hail), str(req)], capture_output=True, text=True, check=False
            )
            assert done.returncode == 0, done.stderr
            assert "success" in json.loads(done.stdout)
