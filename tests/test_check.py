"""The independent checker: real violations on Ganeti's snapshots are reported, feasible
answers pass, and the claimed objectives are recomputed."""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_resources import DEDICATED, NEW_QUARTER

from model.backends.text import load_text, parse_text
from model.check import Move, Placement, check_allocation, check_moves, check_squeeze
from model.cluster import Cluster, Disk, Instance, ISpec
from model.errors import CheckFailedError
from model.score import cluster_score
from model.state import node_states


def new(name: str, mem: int, disk: int, vcpus: int, template: str = "drbd", **kw) -> Instance:
    return Instance(
        name=name,
        memory_mib=mem,
        disks=(Disk(disk),),
        vcpus=vcpus,
        status="running",
        auto_balance=True,
        primary="",
        secondary=None,
        disk_template=template,
        **kw,
    )


@pytest.fixture(scope="module")
def excl(ganeti) -> Cluster:
    """2 nodes, 16 GiB each; node-01: unallocated 14336, N+1 reserve 3072; node-02: 13312,
    reserve 2048; exclusion prefix service-group, dns1/dns2 primaries on node-01."""
    return load_text(ganeti.data_dir / "hbal-excl-tags.data")


def test_feasible_allocation_has_no_violation(excl) -> None:
    report = check_allocation(excl, [(new("web", 1024, 10240, 1), "node-02", "node-01")])
    assert report.ok, report.text()
    report.raise_if_failed()
    assert report.objectives["score"] == pytest.approx(
        cluster_score(report_cluster(excl, "web", "node-02", "node-01"))
    )
    assert report.objectives["remaining_disk_mib"] == 2 * (153600 - 10240)


def report_cluster(c: Cluster, name: str, p: str, s: str) -> Cluster:
    """The cluster with the instance really added, scored independently of the checker."""
    inst = replace(new(name, 1024, 10240, 1), primary=p, secondary=s)
    nodes = tuple(
        replace(
            n,
            free_memory_mib=n.free_memory_mib - (1024 if n.name == p else 0),
            free_disk_mib=n.free_disk_mib - 10240,
        )
        for n in c.nodes
    )
    return replace(c, nodes=nodes, instances=c.instances + (inst,))


def test_overcommitted_memory(excl) -> None:
    report = check_allocation(excl, [(new("big", 16384, 1024, 1), "node-01", "node-02")])
    assert not report.ok
    assert any(
        v.kind == "memory" and v.node == "node-01" and v.instance == "big"
        for v in report.violations
    )
    with pytest.raises(CheckFailedError):
        report.raise_if_failed()


def test_n1_broken_on_secondary(excl) -> None:
    # node-01 must reserve 3072 + 12288 MiB for node-02's primaries but has 14336
    report = check_allocation(excl, [(new("fat", 12288, 1024, 1), "node-02", "node-01")])
    assert any(v.kind == "n1" and v.node == "node-01" for v in report.violations)


def test_exclusion_tag_clash(excl) -> None:
    dns3 = new("dns3", 1024, 1024, 1, tags=("service-group:dns",))
    clash = check_allocation(excl, [(dns3, "node-01", "node-02")])
    assert [v.kind for v in clash.violations] == ["exclusion_tags"]
    assert check_allocation(excl, [(dns3, "node-02", "node-01")]).ok
    # two new instances with the same tag on one node clash with each other
    other = new("ntp", 512, 1024, 1, tags=("service-group:ntp",))
    batch = [(other, "node-02", "node-01"), (replace(other, name="ntp2"), "node-02", "node-01")]
    assert check_allocation(excl, batch).kinds == {"exclusion_tags"}


def test_vcpu_ratio_exceeded(ganeti) -> None:
    """hspace-tiered-vcpu.data: node-01-004 has 8 pcpus, n_cpu 4 and vcpu ratio 1.0."""
    c = load_text(ganeti.data_dir / "hspace-tiered-vcpu.data")
    one = new("a", 30720, 65536, 4, "plain")
    assert check_allocation(c, [(one, "node-01-004", None)]).ok
    report = check_allocation(
        c, [(one, "node-01-004", None), (replace(one, name="b"), "node-01-004")]
    )
    assert [(v.kind, v.instance) for v in report.violations] == [("vcpu", "b")]


def test_ipolicy_and_template(ganeti) -> None:
    c = load_text(ganeti.data_dir / "hspace-tiered-vcpu.data")  # min memory 30720
    small = check_allocation(c, [(new("s", 1024, 65536, 2, "plain"), "node-01-001", None)])
    assert small.kinds == {"ipolicy"}
    forth = load_text(ganeti.data_dir / "hbal-forth.data")  # templates drbd, plain, diskless
    report = check_allocation(forth, [(new("f", 256, 1024, 1, "file"), "node1", None)])
    assert report.kinds == {"template"}


def test_offline_drained_unknown_and_pairs(ganeti, excl) -> None:
    evac = load_text(ganeti.data_dir / "hbal-evac.data")
    offline = next(n.name for n in evac.nodes if n.offline)
    online = [n.name for n in evac.nodes if not n.offline]
    inst = new("o", 1024, 1024, 1)
    assert "offline_node" in check_allocation(evac, [(inst, offline, online[0])]).kinds
    drained = replace(
        excl, nodes=tuple(replace(n, drained=n.name == "node-02") for n in excl.nodes)
    )
    assert "drained_node" in check_allocation(drained, [(inst, "node-01", "node-02")]).kinds
    assert "unknown_node" in check_allocation(excl, [(inst, "node-01", "node-09")]).kinds
    assert "same_node" in check_allocation(excl, [(inst, "node-01", "node-01")]).kinds
    assert "secondary" in check_allocation(excl, [(inst, "node-01", None)]).kinds
    plain = new("p", 1024, 1024, 1, "plain")
    assert "secondary" in check_allocation(excl, [(plain, "node-01", "node-02")]).kinds
    dup = new("dns1", 1024, 1024, 1)
    assert "duplicate_instance" in check_allocation(excl, [(dup, "node-01", "node-02")]).kinds


def test_dedicated_objectives_match_hail() -> None:
    """docs/htools-facts.md §3: hail picks node2-quarter with score ([0,0,1],20490)."""
    c = parse_text(DEDICATED)
    metrics = {}
    for node in ("node1-empty", "node2-quarter", "node3-half"):
        report = check_allocation(c, [Placement(NEW_QUARTER, node)])
        assert report.ok, report.text()
        metrics[node] = report.objectives["placement_metrics"][0]
    assert metrics["node2-quarter"] == ((0, 0, 1), 20490)
    assert min(metrics.items(), key=lambda kv: kv[1])[0] == "node2-quarter"
    full = check_allocation(c, [Placement(NEW_QUARTER, "node4-full")])
    assert {"memory", "disk", "spindles"} <= full.kinds
    # multi-allocate (hail: node2-quarter then node3-half)
    second = replace(NEW_QUARTER, name="instance-new-quarter-2")
    batch = check_allocation(c, [(NEW_QUARTER, "node2-quarter", None), (second, "node3-half")])
    assert batch.ok
    assert batch.objectives["allocation_vector_before"] == (1, 4, 9)
    assert batch.objectives["lost_allocations_total"] == (0, 1, 2)
    assert batch.objectives["allocation_vector_after"] == (1, 3, 7)
    assert batch.objectives["remaining_disk_mib"] == 20490 + 10250


def test_moves_failover_is_feasible(excl) -> None:
    report = check_moves(excl, [Move("ftp1", "node-01")])
    assert report.ok, report.text()
    assert report.objectives["moves"] == 1
    # a no-op move does not count
    assert check_moves(excl, [Move("dns1", "node-01")]).objectives["moves"] == 0
    assert check_moves(excl, [Move("nope", "node-01")]).kinds == {"unknown_instance"}


def test_squeeze_plan_of_hsqueeze(ganeti) -> None:
    """hsqueeze-underutilized.data: hsqueeze offlines node-01-004/005, moving inst-40 to
    node-01-002 and inst-50 to node-01-003; every node keeps room for 2 × std (128 MiB)."""
    c = load_text(ganeti.data_dir / "hsqueeze-underutilized.data")
    std = ISpec(128, 1, 1024, 1, 1, 1)  # the built-in default (the file's policy is a tag)
    moves = [Move("inst-40", "node-01-002"), Move("inst-50", "node-01-003")]
    plan = check_squeeze(c, ["node-01-004", "node-01-005"], moves, std, factor=2.0)
    assert plan.ok, plan.text()
    assert plan.objectives["nodes_freed"] == 2 and plan.objectives["moves"] == 2
    # without the moves the instances stay on powered-off nodes
    stay = check_squeeze(c, ["node-01-004", "node-01-005"], [], std, factor=2.0)
    assert stay.kinds == {"primary_offline"}
    # one node too many: node-01-002 ends with 131 MiB, no room for a 256 MiB probe
    greedy = check_squeeze(
        c,
        ["node-01-003", "node-01-004", "node-01-005"],
        [("inst-30", "node-01-001"), ("inst-40", "node-01-002"), ("inst-50", "node-01-002")],
        std,
        factor=2.0,
    )
    assert "probe" in greedy.kinds
    assert "master_offline" in check_squeeze(c, ["node-01-000"], [], std).kinds


def test_checker_never_mutates_input(excl) -> None:
    before = node_states(excl)
    check_allocation(excl, [(new("x", 1024, 1024, 1), "node-01", "node-02")])
    check_moves(excl, [Move("ftp1", "node-01")], powered_off=["node-02"])
    assert node_states(excl).nodes == before.nodes


def test_migration_tags_and_unallocable_group(ganeti, excl) -> None:
    """hbal-migration-1.data: node-01 carries hv:new, node-02 nothing, node-03 hv:new."""
    mig = load_text(ganeti.data_dir / "hbal-migration-1.data")
    assert check_moves(mig, [Move("inst121", "node-02")]).kinds == {"migration"}
    assert check_moves(mig, [Move("inst131", "node-03")]).ok
    closed = replace(
        excl, groups=tuple(replace(g, alloc_policy="unallocable") for g in excl.groups)
    )
    report = check_allocation(closed, [(new("x", 1024, 1024, 1), "node-01", "node-02")])
    assert report.kinds == {"unallocable_group"}


def test_squeeze_expand_plan(ganeti) -> None:
    """hsqueeze-overutilized.data: hsqueeze powers on node-01-002 and node-01-004 (standby)
    and migrates inst-00, inst-10 / inst-01, inst-11 onto them."""
    c = load_text(ganeti.data_dir / "hsqueeze-overutilized.data")
    std = c.cluster_policy.std
    assert "probe" in check_squeeze(c, [], [], std, factor=2.0).kinds
    moves = [
        ("inst-00", "node-01-002"),
        ("inst-10", "node-01-004"),
        ("inst-01", "node-01-002"),
        ("inst-11", "node-01-004"),
    ]
    plan = check_squeeze(
        c, [], moves, std, factor=2.0, powered_on_nodes=["node-01-002", "node-01-004"]
    )
    assert plan.ok, plan.text()
    assert plan.objectives["nodes_powered_on"] == 2 and plan.objectives["moves"] == 4
