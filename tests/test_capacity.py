"""The capacity rows (model/capacity.py) against htools' strict adds, row for row.

For every kind of instance (templates with and without local storage, running, stopped and
offline, forthcoming, exclusive storage with known or unknown spindles) on node states taken
from Ganeti's own test snapshots and from random nodes:

* a new primary passes `add_primary` (strict) exactly when every row admits its usage, and each
  failing row names a check htools reports;
* a new drbd secondary passes `add_secondary` exactly when the disk and spindle rows admit it and
  the failover memory fits beside the N+1 reserve (the rule the formulations write separately);
* `copies_that_fit` equals repeated strict adds (`model.dedicated.repeat_count`).
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from model.backends.text import load_text
from model.capacity import (
    FORTH_ROWS,
    LOCAL_STORAGE_ROWS,
    N1,
    applies,
    capacity_rows,
    copies_that_fit,
    primary_usage,
    secondary_usage,
)
from model.cluster import Cluster, Disk, Instance, Node, NodeGroup
from model.dedicated import repeat_count
from model.resources import (
    FailMode,
    InstanceDemand,
    NodeState,
    add_secondary,
    demand_of,
    primary_shortfalls,
)
from model.state import node_states

TEMPLATES = ("plain", "drbd", "ext", "rbd", "sharedfile", "diskless", "file", "blockdev")
STATUSES = ("running", "ADMIN_down", "ADMIN_offline", "ERROR_up", "USER_down")
# htools' shortfall kinds each row stands for (the reserve rows are the disk rows' floor)
ROW_CHECKS = {
    "memory": {"memory"},
    "n1": {"n1", "memory"},
    "disk": {"disk", "disk_reserve"},
    "spindles": {"spindles"},
    "spindle_ratio": {"spindle_ratio"},
    "vcpu": {"vcpu"},
    "memory_forth": {"memory"},
    "disk_forth": {"disk", "disk_reserve"},
    "spindles_forth": {"spindles"},
    "spindle_ratio_forth": {"spindle_ratio"},
    "vcpu_forth": {"vcpu"},
}


def _demand(draw: st.DrawFn) -> InstanceDemand:
    template = draw(st.sampled_from(TEMPLATES))
    n_disks = draw(st.integers(0, 3))
    unknown = draw(st.booleans())
    disks = tuple(
        Disk(draw(st.integers(0, 400_000)), None if unknown else draw(st.integers(0, 6)))
        for _ in range(n_disks)
    )
    inst = Instance(
        name="new",
        memory_mib=draw(st.integers(0, 140_000)),
        disks=disks,
        vcpus=draw(st.integers(0, 40)),
        status=draw(st.sampled_from(STATUSES)),
        auto_balance=draw(st.booleans()),
        primary="",
        secondary=None,
        disk_template=template,
        spindle_use=draw(st.integers(0, 8)),
        forthcoming=draw(st.booleans()),
    )
    return demand_of(inst)


demands = st.composite(_demand)


def _random_node(rng: random.Random, exclusive: bool) -> NodeState:
    """One node of a random cluster, with instances loaded on it (N+1 reserve included)."""
    total_mem = rng.choice((16384, 65536, 131072))
    node = Node(
        name="n0",
        total_memory_mib=float(total_mem),
        node_memory_mib=rng.choice((0, 1024, 4096)),
        free_memory_mib=rng.randrange(0, total_mem),
        total_disk_mib=float(rng.choice((100_000, 1_000_000))),
        free_disk_mib=rng.randrange(0, 1_000_000),
        total_cpus=float(rng.choice((2, 8, 24))),
        group_uuid="g",
        spindles=rng.randrange(1, 12),
        exclusive_storage=exclusive,
        free_spindles=rng.randrange(0, 12),
    )
    other = Node(
        name="n1",
        total_memory_mib=65536.0,
        node_memory_mib=0,
        free_memory_mib=65536,
        total_disk_mib=1e6,
        free_disk_mib=1_000_000,
        total_cpus=8.0,
        group_uuid="g",
    )
    insts = []
    for k in range(rng.randrange(0, 6)):
        template = rng.choice(("plain", "drbd", "ext"))
        on_self = rng.random() < 0.6 or template != "drbd"
        insts.append(
            Instance(
                name=f"i{k}",
                memory_mib=rng.randrange(128, 8192),
                disks=(Disk(rng.randrange(1024, 50_000), rng.randrange(1, 3)),),
                vcpus=rng.randrange(1, 4),
                status=rng.choice(STATUSES),
                auto_balance=True,
                primary="n0" if on_self else "n1",
                secondary=("n1" if on_self else "n0") if template == "drbd" else None,
                disk_template=template,
                forthcoming=rng.random() < 0.15,
            )
        )
    cluster = Cluster((NodeGroup("g", "g"),), (node, other), tuple(insts))
    return node_states(cluster).nodes["n0"]


def _snapshot_states(ganeti) -> list[NodeState]:
    out: list[NodeState] = []
    for path in sorted(ganeti.data_dir.glob("*.data")):
        if path.name in ("invalid-node.data", "hroller-full.data", "multiple-tags.data"):
            continue  # load errors (the last two name an instance twice)
        out += list(node_states(load_text(path)).nodes.values())
    return out


def _rows_admit_primary(state: NodeState, d: InstanceDemand) -> tuple[bool, set[str]]:
    """Whether every row admits one more primary `d`, and the kinds of the rows that do not."""
    failing = set()
    for row in capacity_rows(state):
        cap = row.cap - state.reserved_memory_mib if row.kind == N1 else row.cap
        if applies(row.kind, d) and primary_usage(row.kind, d) > cap:
            failing.add(row.kind)
    return not failing, failing


def _assert_primary_rows(state: NodeState, d: InstanceDemand) -> None:
    shortfalls = [s for s in primary_shortfalls(state, d) if s.kind != "exclusion_tags"]
    admit, failing = _rows_admit_primary(state, d)
    assert admit == (not shortfalls), (state.name, d, failing, shortfalls)
    reported = {s.kind for s in shortfalls}
    for kind in failing:
        assert ROW_CHECKS[kind] & reported, (kind, reported)


def _assert_secondary_rows(state: NodeState, d: InstanceDemand, primary: str) -> None:
    """addSec = the disk/spindle rows + the failover memory beside the N+1 reserve."""
    result = add_secondary(state, d, primary)
    rows_ok = all(
        secondary_usage(row.kind, d) <= row.cap
        for row in capacity_rows(state)
        if row.kind in LOCAL_STORAGE_ROWS and (row.kind in FORTH_ROWS or not d.forthcoming)
    )
    unalloc = state.unallocated_memory_mib
    failover = d.secondary_memory_mib
    if d.forthcoming:
        memory_ok = failover < state.free_memory_forth_mib
    else:
        reserve = max(state.reserved_memory_mib, state.peer_memory_mib(primary) + failover)
        memory_ok = (
            failover < unalloc
            and (state.fail_n1 or unalloc > reserve)
            and failover < state.free_memory_forth_mib
        )
    assert (not isinstance(result, FailMode)) == (rows_ok and memory_ok and d.has_secondary), (
        state.name,
        d,
        result,
    )


@pytest.fixture(scope="module")
def snapshot_states(ganeti) -> list[NodeState]:
    return _snapshot_states(ganeti)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(d=demands(), pick=st.integers(0, 10**6))
def test_primary_rows_are_the_strict_adds_on_ganeti_snapshots(snapshot_states, d, pick) -> None:
    state = snapshot_states[pick % len(snapshot_states)]
    _assert_primary_rows(state, d)


@settings(max_examples=300, deadline=None)
@given(d=demands(), seed=st.integers(0, 10**6), exclusive=st.booleans())
def test_primary_rows_are_the_strict_adds_on_random_nodes(d, seed, exclusive) -> None:
    _assert_primary_rows(_random_node(random.Random(seed), exclusive), d)


@settings(max_examples=300, deadline=None)
@given(d=demands(), seed=st.integers(0, 10**6), exclusive=st.booleans())
def test_secondary_rows_are_the_strict_adds(d, seed, exclusive) -> None:
    state = _random_node(random.Random(seed), exclusive)
    for primary in ("n1", "nobody"):
        _assert_secondary_rows(state, d, primary)


@settings(max_examples=200, deadline=None)
@given(d=demands(), seed=st.integers(0, 10**6), exclusive=st.booleans())
def test_copies_that_fit_equals_repeated_adds(d, seed, exclusive) -> None:
    state = _random_node(random.Random(seed), exclusive)
    assert copies_that_fit(state, d) == repeat_count(state, d)
