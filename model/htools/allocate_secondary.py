"""hail's allocate-secondary (Cluster/AllocateSecondary.hs; docs/hail.md,
"Allocate-secondary"): a secondary for an instance that has none, as when a plain instance is
converted to drbd.

The instance leaves its primary, becomes drbd, and the normal pair allocation runs with that
primary fixed and every other node of its group (offline ones too) as secondary, scored over
the whole cluster. htools' N+1 check then still sees the instance as it was (plain, on its
primary): `capacity.state_after` keeps the record the base cluster has.
"""

from __future__ import annotations

from dataclasses import replace

from model.htools.allocate import AllocOptions, try_alloc
from model.htools.solutions import AllocSolution
from model.resources import pair_location_score, remove_primary
from model.state import ClusterState


def try_allocate_secondary(
    opts: AllocOptions, state: ClusterState, name: str
) -> AllocSolution | str:
    """tryAllocateSecondary: the allocation solution (its log is hail's info), or an error."""
    primary, secondary = state.locations[name]
    if secondary is not None:
        return "Instance already has a secondary"
    old = state.demands[name]
    p = state.nodes[primary]
    base = state.with_nodes({primary: remove_primary(p, old, pair_location_score(p, None))})
    drbd = replace(old, disk_template="drbd")
    group = p.group_uuid
    candidates = [n for n, st in base.nodes.items() if st.group_uuid == group and n != primary]
    return try_alloc(opts, base, list(base.nodes), drbd, 2, [(primary, candidates)])
