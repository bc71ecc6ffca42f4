"""Resource arithmetic against hand computations from the snapshot lines."""

from __future__ import annotations

import json
import random
import re
import subprocess
from collections import Counter
from dataclasses import replace

import pytest

from model.backends.text import load_text, parse_text
from model.cluster import DEFAULT_IPOLICY, Disk, Instance, IPolicy, ISpec, MinMax
from model.dedicated import allocation_vector, minimal_instances, repeat_count
from model.policy import policy_shortfall
from model.resources import (
    FailMode,
    InstanceDemand,
    MoveKind,
    add_primary,
    add_secondary,
    demand_of,
    primary_shortfalls,
    probe_demand,
    remove_primary,
    remove_secondary,
    safe_div,
)
from model.score import cluster_score
from model.state import node_states

# hail-alloc-dedicated-1.json (docs/htools-facts.md §3) as a text snapshot: 4 exclusive-storage
# nodes.
DEDICATED = """\
default|uuid-group-1|preferred||

node1-empty|4096|0|4096|40960|40960|5|N|uuid-group-1|5||Y|4|0|1.0
node2-quarter|4096|0|3072|40960|30720|5|N|uuid-group-1|5||Y|3|0|1.0
node3-half|4096|0|2048|40960|20480|5|N|uuid-group-1|5||Y|2|0|1.0
node4-full|4096|0|0|40960|0|5|N|uuid-group-1|5||Y|0|0|1.0

instance2-quarter|1024|10240|1|running|Y|node2-quarter||plain||1|1
instance3-half|2048|20480|2|running|Y|node3-half||plain||2|2
instance4-full|4096|40960|4|running|Y|node4-full||plain||4|4


{policy}
default{policy}
""".format(
    policy="|1024,1,10240,1,1,1|1022,1,10220,1,1,1;1024,1,10240,1,1,1;"
    "2046,2,20460,2,1,2;2048,2,20480,2,1,2;4094,4,40940,4,1,4;4096,4,40960,4,1,4|plain|1.0|1.0"
)
NEW_QUARTER = Instance(
    name="instance-new-quarter",
    memory_mib=1023,
    disks=(Disk(10230, 1),),
    vcpus=1,
    status="running",
    auto_balance=True,
    primary="",
    secondary=None,
    disk_template="plain",
)


@pytest.fixture(scope="module")
def excl_tags(ganeti):
    return node_states(load_text(ganeti.data_dir / "hbal-excl-tags.data"))


def test_memory_and_reserve_by_hand(excl_tags) -> None:
    """hbal-excl-tags.data: node-01 16384/0/14336 hosts dns1, dns2 (1024 each) as primary
    and ftp1, ftp2, admin (1024 each, primary node-02) as secondary."""
    n1, n2 = excl_tags.node("node-01"), excl_tags.node("node-02")
    assert n1.instance_memory_mib == 2048 and n1.missing_memory_mib == 16384 - 14336 - 2048
    assert n1.unallocated_memory_mib == 14336
    assert n1.reserved_memory_mib == 3 * 1024 and n1.peers == (("node-02", 3072),)
    assert n2.reserved_memory_mib == 2048 and n2.unallocated_memory_mib == 13312
    assert not n1.fail_n1 and not n2.fail_n1
    assert n1.p_mem == pytest.approx(14336 / 16384) and n1.p_rem == pytest.approx(3072 / 16384)
    assert n1.used_vcpus == 1 + 2 and n1.hi_cpu == 4 * 16
    assert n1.instance_spindles == 5 and n1.hi_spindles == 32
    assert n1.p_dsk == pytest.approx(153600 / 409600)
    # cluster tag htools:iextags:service-group: dns1 and dns2 clash on node-01
    assert n1.exclusion_tag_counts == (("service-group:dns", 2),)
    assert n1.conflicting_primaries == 1 and n2.conflicting_primaries == 0


def test_forthcoming_counters(ganeti) -> None:
    """hbal-forth.data: three forthcoming 128 MiB / 2176 MiB drbd instances node1 -> node2."""
    st = node_states(load_text(ganeti.data_dir / "hbal-forth.data"))
    n1, n2, n3 = (st.node(f"node{i}") for i in (1, 2, 3))
    assert n1.primaries == () and n1.primaries_forth == ("forthcoming-inst1",) + (
        "forthcoming-inst2",
        "forthcoming-inst3",
    )
    assert n1.unallocated_memory_mib == 65523 - 1023  # x_mem = -1023 is ignored
    assert n1.free_memory_forth_mib == 65523 - 3 * 128
    assert n1.free_disk_forth_mib == n2.free_disk_forth_mib == 3405248 - 3 * 2176
    assert n1.used_vcpus == 1 and n1.used_vcpus_forth == 4
    assert n1.instance_spindles_forth == n2.instance_spindles_forth == 3
    assert n3.instance_spindles_forth == 0 and n2.reserved_memory_mib == 0


def test_missing_memory_is_min_of_recorded_and_reported(ganeti) -> None:
    st = node_states(load_text(ganeti.data_dir / "missing-resources.data"))
    assert st.node("node2").missing_memory_mib == 1024
    assert st.node("node2").unallocated_memory_mib == 0
    assert st.node("node1").unallocated_memory_mib == 1024


def test_n_cpu_counts_as_used(ganeti) -> None:
    st = node_states(load_text(ganeti.data_dir / "hspace-tiered-vcpu.data"))
    n4 = st.node("node-01-004")  # 8 pcpus, n_cpu 4, vcpu_ratio 1.0
    assert n4.used_vcpus == 4 and n4.hi_cpu == 8 and n4.available_vcpus == 4
    four = InstanceDemand("x", 1024, 1024, 4, "plain")
    after = add_primary(n4, four)
    assert not isinstance(after, FailMode) and after.used_vcpus == 8
    assert add_primary(after, four) is FailMode.CPU


def test_add_remove_round_trip(excl_tags) -> None:
    d = demand_of(excl_tags.cluster.instance_index["ftp1"], excl_tags.rules)
    n1 = excl_tags.node("node-01")
    p = add_primary(n1, replace(d, name="x"))
    assert not isinstance(p, FailMode)
    assert p.unallocated_memory_mib == 14336 - 1024 and p.free_disk_mib == 153600 - 51200
    assert remove_primary(p, replace(d, name="x")) == replace(n1, fail_n1=p.fail_n1)
    s = add_secondary(excl_tags.node("node-02"), replace(d, name="y"), "node-01")
    assert not isinstance(s, FailMode)
    assert s.peer_memory_mib("node-01") == 3072 and s.reserved_memory_mib == 3072
    back = remove_secondary(s, replace(d, name="y"), "node-01")
    assert back.peers == excl_tags.node("node-02").peers and back.reserved_memory_mib == 2048


def test_strict_checks_and_their_order(excl_tags) -> None:
    n1 = excl_tags.node("node-01")
    base = InstanceDemand("new", 1024, 1024, 1, "plain")
    assert add_primary(n1, replace(base, memory_mib=14336)) is FailMode.MEM
    # 14336 - 11264 = 3072 <= rMem 3072: a new N+1 failure (reported as FailMem)
    fails = primary_shortfalls(n1, replace(base, memory_mib=11264))
    assert [f.kind for f in fails] == ["n1"] and fails[0].mode is FailMode.MEM
    assert add_primary(n1, replace(base, memory_mib=11264), strict=False) != FailMode.MEM
    assert add_primary(n1, replace(base, disk_mib=153600)) is FailMode.DISK
    assert add_primary(n1, replace(base, exclusion_tags=("service-group:dns",))) is FailMode.TAGS
    assert not isinstance(
        add_primary(excl_tags.node("node-02"), replace(base, exclusion_tags=("x",))), FailMode
    )
    # secondary: 13312 <= max(2048, 12288 + 0) is fine, 13312 <= 13312 is not
    drbd = replace(base, disk_template="drbd")
    assert not isinstance(
        add_secondary(excl_tags.node("node-02"), replace(drbd, memory_mib=13311), "x"), FailMode
    )
    assert (
        add_secondary(excl_tags.node("node-02"), replace(drbd, memory_mib=13312), "x")
        is FailMode.MEM
    )
    assert add_secondary(excl_tags.node("node-02"), base, "node-01") is FailMode.DISK


def test_dedicated_vectors_match_spec_table() -> None:
    """docs/htools-facts.md §3: before [1,2,4] / [0,1,3] / [0,1,2]; node2-quarter loses
    [0,0,1], 20490 left."""
    st = node_states(parse_text(DEDICATED))
    pol = st.ipolicy_of("node1-empty")
    assert [t.disk_mib for t in minimal_instances(pol)] == [40940, 20460, 10220]
    vectors = {n: allocation_vector(s, pol) for n, s in st.nodes.items()}
    assert vectors == {
        "node1-empty": (1, 2, 4),
        "node2-quarter": (0, 1, 3),
        "node3-half": (0, 1, 2),
        "node4-full": (0, 0, 0),
    }
    d = demand_of(NEW_QUARTER, st.rules)
    after = {n: add_primary(s, d) for n, s in st.nodes.items()}
    assert after["node4-full"] is FailMode.MEM
    lost = {
        n: tuple(a - b for a, b in zip(vectors[n], allocation_vector(s, pol), strict=True))
        for n, s in after.items()
        if not isinstance(s, FailMode)
    }
    assert lost == {"node1-empty": (1, 1, 1), "node2-quarter": (0, 0, 1), "node3-half": (0, 1, 1)}
    assert after["node2-quarter"].free_disk_mib == 20490  # type: ignore[union-attr]
    assert after["node2-quarter"].free_spindles == 2  # type: ignore[union-attr]


def test_repeat_count_is_sequential_adds() -> None:
    st = node_states(parse_text(DEDICATED))
    node = st.node("node1-empty")
    small = InstanceDemand("t", 100, 1000, 1, "plain", disk_spindles=0)
    count, cur = 0, node
    while not isinstance(cur := add_primary(cur, small), FailMode):
        count += 1
    assert repeat_count(node, small) == count == 5  # 5 vcpus at ratio 1.0


def test_policy_shortfall() -> None:
    pol = IPolicy(
        minmax=(
            MinMax(ISpec(128, 1, 1024, 1, 1, 1), ISpec(1024, 2, 2048, 2, 1, 2)),
            MinMax(ISpec(4096, 4, 4096, 1, 1, 1), ISpec(8192, 8, 8192, 4, 1, 4)),
        ),
        std=ISpec(128, 1, 1024, 1, 1, 1),
        disk_templates=("drbd", "plain"),
        vcpu_ratio=4.0,
        spindle_ratio=32.0,
    )
    fits = InstanceDemand("a", 512, 1024, 1, "plain", disk_sizes_mib=(1024,))
    assert policy_shortfall(fits, pol, False) is None
    second = replace(fits, memory_mib=4096, vcpus=4, disk_mib=4096, disk_sizes_mib=(4096,))
    assert policy_shortfall(second, pol, False) is None
    # between the pairs: the first pair's failure is reported
    assert policy_shortfall(replace(fits, memory_mib=2048), pol, False) is FailMode.MEM
    assert policy_shortfall(replace(fits, vcpus=3), pol, False) is FailMode.CPU
    assert policy_shortfall(replace(fits, disk_sizes_mib=(512,)), pol, False) is FailMode.DISK
    assert policy_shortfall(replace(fits, disk_sizes_mib=()), pol, False) is FailMode.DISK_COUNT
    assert policy_shortfall(replace(fits, disk_template="file"), pol, False) is FailMode.DISK
    assert policy_shortfall(replace(fits, disk_spindles=None), pol, True) is FailMode.SPINDLES
    assert policy_shortfall(replace(fits, disk_spindles=1), pol, True) is None
    assert policy_shortfall(fits, DEFAULT_IPOLICY, False) is None


def test_probe_and_safe_division() -> None:
    probe = probe_demand(ISpec(128, 1, 1024, 1, 1, 1), 2.0)
    assert (probe.memory_mib, probe.vcpus, probe.disk_mib, probe.disk_template) == (
        256,
        2,
        0,
        "ext",
    )
    assert safe_div(1, 0) == float("inf") and safe_div(0, 0) != safe_div(0, 0)


# --- the strict checks against the real hail ------------------------------------------

HAIL_FILES = (
    "hbal-excl-tags.data",
    "hspace-tiered-vcpu.data",
    "hbal-forth.data",
    "hspace-groups-two.data",
    "hspace-tiered-dualspec-exclusive.data",
    "hbal-location-exclusion.data",
    "n1-failure.data",
    "missing-resources.data",
)


def _hail_counts(info: str) -> dict[str, tuple[int, dict[str, int]]]:
    """Per group: (successes, failure counts) from hail's info string."""
    groups = {}
    pattern = (
        r"Group (\S+) \((\w+)\): (?:score: .*?, successes (\d+), failures \d+(?: \(([^)]*)\))?"
        r"|No valid allocation solutions, failure reasons: ([A-Za-z0-9:, ]*?)(?=, Group |$))"
    )
    for m in re.finditer(pattern, info):
        fails = m.group(4) or m.group(5) or ""
        counts = {k: int(v) for k, v in re.findall(r"(Fail\w+): (\d+)", fails)}
        groups[m.group(1)] = (int(m.group(3) or 0), counts)
    return groups


def _my_counts(cluster, inst: Instance) -> dict[str, tuple[int, dict[str, int]]]:
    """hail's candidate loop: policy check, addPri, then addSec, one count per candidate."""
    st = node_states(cluster)
    d = demand_of(inst, st.rules)
    out = {}
    for g in cluster.groups:
        cands = [s for s in st.nodes.values() if s.group_uuid == g.uuid and not s.offline]
        pairs = (
            [(p, s) for p in cands for s in cands if s.name != p.name]
            if d.has_secondary
            else [(p, None) for p in cands]
        )
        succ, fails = 0, Counter()
        for p, s in pairs:
            fail = policy_shortfall(d, g.ipolicy, p.exclusive_storage)
            if fail is None:
                fail = add_primary(p, d)
                if not isinstance(fail, FailMode):
                    fail = None if s is None else add_secondary(s, d, p.name)
                    fail = fail if isinstance(fail, FailMode) else None
            if fail is None:
                succ += 1
            else:
                fails[str(fail)] += 1
        out[g.name] = (succ, dict(fails))
    return out


@pytest.mark.reference
@pytest.mark.parametrize("name", HAIL_FILES)
def test_fit_checks_match_hail(ganeti, tmp_path, name: str) -> None:
    """Random requests: per group, our successes and failure modes equal hail's
    (`hail -t FILE --no-capacity-checks`, which reports exactly these counts)."""
    rng = random.Random(name)
    cluster = load_text(ganeti.data_dir / name)
    carrier = json.loads((ganeti.data_dir / "hail-alloc-drbd.json").read_text())
    for _ in range(25):
        template = rng.choice(["drbd", "drbd", "plain", "ext", "file", "diskless"])
        mem = rng.choice([128, 1024, 4096, 13312, 30720, 32768, 65536, 262144])
        size = rng.choice([0, 1024, 51200, 65536, 1048576, 4000000])
        spindles = rng.choice([None, 1, 2])
        disks = [] if template == "diskless" else [Disk(size, spindles)]
        inst = Instance(
            name="instance1",
            memory_mib=mem,
            disks=tuple(disks),
            vcpus=rng.choice([1, 2, 4, 8, 16]),
            status="running",
            auto_balance=True,
            primary="",
            secondary=None,
            disk_template=template,
            tags=tuple(rng.choice([[], [], ["service-group:dns"], ["test:ftp"]])),
            spindle_use=rng.choice([1, 2, 4]),
        )
        request = dict(
            carrier["request"],
            memory=mem,
            disks=[
                {"mode": "rw", "size": d.size_mib}
                | ({} if d.spindles is None else {"spindles": d.spindles})
                for d in disks
            ],
            disk_space_total=inst.disk_mib,
            vcpus=inst.vcpus,
            disk_template=template,
            tags=list(inst.tags),
            spindle_use=inst.spindle_use,
            required_nodes=2 if template == "drbd" else 1,
        )
        req = tmp_path / "req.json"
        req.write_text(json.dumps(dict(carrier, request=request)))
        out = subprocess.run(
            [str(ganeti.hail), "-t", str(ganeti.data_dir / name), "--no-capacity-checks", str(req)],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
        ref = _hail_counts(json.loads(out)["info"])
        assert ref, out
        mine = {g: v for g, v in _my_counts(cluster, inst).items() if g in ref}
        assert mine == ref, (request, out)


# --- moves against the real hbal -------------------------------------------------------

HBAL_FILES = (
    "hbal-desiredlocation-2.data",
    "hbal-evac.data",
    "hbal-forth.data",
    "hbal-location-1.data",
    "hbal-location-exclusion.data",
    "hbal-migration-1.data",
    "hbal-migration-3.data",
    "hspace-groups-one.data",
    "partly-used.data",
)
HBAL_STEP = re.compile(r"^\s+\d+\. (\S+)\s+\S+ => (\S+):(\S*)\s+([\d.]+) a=(.*)$", re.M)


def _move_kind(code: str) -> tuple[MoveKind, str | None]:
    if code == "f":
        return MoveKind.FAILOVER, None
    if code.startswith("fa:"):
        return MoveKind.FAILOVER_TO_ANY, code[3:]
    m = re.fullmatch(r"(f )?r:(\S+)( f)?", code)
    assert m, code
    kinds = {
        (False, False): MoveKind.REPLACE_SECONDARY,
        (False, True): MoveKind.REPLACE_AND_FAILOVER,
        (True, False): MoveKind.FAILOVER_AND_REPLACE,
        (True, True): MoveKind.REPLACE_PRIMARY,
    }
    return kinds[(bool(m.group(1)), bool(m.group(3)))], m.group(2)


@pytest.mark.reference
@pytest.mark.parametrize("name", HBAL_FILES)
def test_moves_replay_hbal(ganeti, name: str) -> None:
    """Replaying hbal's solution move by move gives its nodes and its score at each step."""
    cluster = load_text(ganeti.data_dir / name)
    group = cluster.groups[0]
    out = subprocess.run(
        [str(ganeti.hbal), "-t", str(ganeti.data_dir / name), "-G", group.name],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    steps = HBAL_STEP.findall(out)
    assert steps, out
    st = node_states(cluster)
    for inst, new_p, new_s, score, code in steps:
        kind, target = _move_kind(code.strip())
        result = st.move(inst, kind, target)
        assert not isinstance(result, FailMode), (inst, code, result)
        st = result
        primary, secondary = st.location(inst)
        assert (primary, secondary or "") == (new_p, new_s)
        assert cluster_score(st, group.uuid) == pytest.approx(float(score), abs=1e-6)


def test_repeat_count_equals_sequential_adds_random(ganeti) -> None:
    rng = random.Random(7)
    for name in ("hbal-forth.data", "missing-resources.data", "hspace-tiered-exclusive.data"):
        st = node_states(load_text(ganeti.data_dir / name))
        for node in st.nodes.values():
            for _ in range(15):
                d = InstanceDemand(
                    "t",
                    rng.choice([1, 100, 1000, 4096, 30000]),
                    rng.choice([0, 1, 10240, 100000]),
                    rng.choice([0, 1, 3]),
                    rng.choice(["plain", "drbd", "ext"]),
                    disk_spindles=rng.choice([0, 1, None]),
                    spindle_use=rng.choice([0, 1, 2]),
                    status=rng.choice(["running", "ADMIN_down"]),
                )
                count, cur = 0, node
                while count <= 3000 and not isinstance(
                    cur := add_primary(cur, replace(d, name=f"t{count}")), FailMode
                ):
                    count += 1
                if count <= 3000:
                    assert repeat_count(node, d) == count, (name, node.name, d)


def test_cluster_state_place(excl_tags) -> None:
    d = InstanceDemand("web", 1024, 10240, 1, "drbd")
    placed = excl_tags.place(d, "node-02", "node-01")
    assert not isinstance(placed, FailMode)
    assert placed.node("node-01").peer_memory_mib("node-02") == 3072 + 1024
    assert placed.node("node-02").primaries[-1] == "web" and "web" in placed.demands
    assert excl_tags.place(replace(d, memory_mib=20000), "node-02", "node-01") is FailMode.MEM
