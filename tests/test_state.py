"""ClusterState, the one owner of state changes (model/state.py).

A freshly loaded state describes its snapshot exactly; every change, written back as a snapshot
and loaded again, gives the node states the change produced; a relocation refuses what the strict
adds refuse; removing and placing an instance again restores its nodes. hbal's five moves are held
to the real hbal in tests/test_resources.py (test_moves_replay_hbal), through `ClusterState.move`.
"""

from __future__ import annotations

import random

import pytest

from model.backends.text import dump_text, load_text, parse_text
from model.cluster import Instance
from model.resources import (
    FailMode,
    InstanceDemand,
    MoveKind,
    primary_shortfalls,
    secondary_shortfalls,
)
from model.state import ClusterState, node_states

SKIP = {"invalid-node.data", "hroller-full.data", "multiple-tags.data"}  # load errors
# what a reloaded snapshot must reproduce of each node (the load-time N+1 flag is judged on
# the reported free memory, not the allocated one, so it is not compared)
FIELDS = (
    "offline",
    "instance_memory_mib",
    "unallocated_memory_mib",
    "free_memory_forth_mib",
    "free_disk_mib",
    "free_disk_forth_mib",
    "used_vcpus",
    "used_vcpus_forth",
    "reserved_memory_mib",
    "peers",
    "instance_spindles",
    "location_score",
)


def _snapshots(ganeti) -> list:
    return [p for p in sorted(ganeti.data_dir.glob("*.data")) if p.name not in SKIP]


def _same_nodes(a: ClusterState, b: ClusterState) -> None:
    for name, st in a.nodes.items():
        other = b.nodes[name]
        for f in FIELDS:
            assert getattr(st, f) == getattr(other, f), (name, f)
        assert sorted(st.primaries) == sorted(other.primaries), name
        assert sorted(st.secondaries) == sorted(other.secondaries), name


def _reloaded(state: ClusterState) -> ClusterState:
    return node_states(parse_text(dump_text(state.snapshot()), "<snapshot>"))


def test_snapshot_of_a_loaded_state_is_the_file(ganeti) -> None:
    for path in _snapshots(ganeti):
        cluster = load_text(path)
        assert dump_text(node_states(cluster).snapshot()) == dump_text(cluster), path.name


# snapshots with at least three online nodes and instances, each name used once
ROUND_TRIP = (
    "hbal-evac.data",
    "hbal-location-1.data",
    "hbal-migration-1.data",
    "hbal-soft-errors.data",
    "hbal-split-insts.data",
    "hsqueeze-mixed-instances.data",
    "n1-failure.data",
    "plain-n1-restriction.data",
    "shared-n1-failure.data",
    "unique-reboot-order.data",
)


@pytest.mark.parametrize("name", ROUND_TRIP)
def test_changes_survive_a_snapshot_round_trip(ganeti, name: str) -> None:
    """Random relocations, moves, power changes and new instances: the snapshot, loaded again,
    has the node states the changes produced."""
    rng = random.Random(name)
    cluster = load_text(ganeti.data_dir / name)
    state = node_states(cluster)
    names = [n for n, st in state.nodes.items() if not st.offline]
    assert len(names) >= 3 and state.locations
    changed = 0
    for _ in range(60):
        inst = rng.choice(sorted(state.locations))
        p, s = state.location(inst)
        d = state.demands[inst]
        if d.forthcoming:
            continue
        if s is not None:
            kind = rng.choice(list(MoveKind))
            target = rng.choice([n for n in names if n not in (p, s)] or [None])
            if kind is MoveKind.FAILOVER_TO_ANY or (kind is not MoveKind.FAILOVER and not target):
                continue
            where = None if kind is MoveKind.FAILOVER else target
            after = state.move(inst, kind, where)
            if isinstance(after, FailMode):  # full nodes: hbal's forced moves (hard checks)
                after = state.move(inst, kind, where, force=True)
        else:
            after = state.relocate(inst, rng.choice(names), None, strict=False)
        if not isinstance(after, FailMode):
            state, changed = after, changed + 1
    fresh = Instance("fresh", 128, (), 1, "running", True, "", None, "diskless")
    new = state.place(fresh, rng.choice(names))
    if not isinstance(new, FailMode):
        state = new
    state = state.powered(off=[n for n in names if not state.nodes[n].primaries][:1])
    assert changed
    _same_nodes(state, _reloaded(state))


def test_relocate_refuses_what_the_strict_adds_refuse(ganeti) -> None:
    rng = random.Random(3)
    for path in _snapshots(ganeti)[:25]:
        state = node_states(load_text(path))
        online = [n for n, st in state.nodes.items() if not st.offline]
        for inst in sorted(state.locations)[:20]:
            d = state.demands[inst]
            p, s = state.location(inst)
            target = rng.choice(online) if online else p
            if target in (p, s):
                continue
            emptied = state.remove(inst)
            expected = bool(primary_shortfalls(emptied.nodes[target], d)) or (
                s is not None and bool(secondary_shortfalls(emptied.nodes[s], d, target))
            )
            got = state.relocate(inst, target, s)
            assert isinstance(got, FailMode) == expected, (path.name, inst, target)


def test_remove_then_place_restores_the_nodes(ganeti) -> None:
    for path in _snapshots(ganeti):
        state = node_states(load_text(path))
        for inst in sorted(state.locations)[:10]:
            p, s = state.location(inst)
            back = state.remove(inst).placed(state.demands[inst], p, s)
            for name in (p, s):
                if name is None:
                    continue
                for f in FIELDS[1:]:
                    assert getattr(back.nodes[name], f) == getattr(state.nodes[name], f), (
                        path.name,
                        inst,
                        f,
                    )
            assert back.location(inst) == (p, s)


def test_snapshot_names_instances_it_cannot_write(ganeti) -> None:
    state = node_states(load_text(ganeti.data_dir / "hbal-excl-tags.data"))
    placed = state.place(InstanceDemand("ghost", 128, 0, 1, "diskless"), "node-01")
    assert not isinstance(placed, FailMode)
    with pytest.raises(ValueError, match="ghost"):
        placed.snapshot()
