"""Instances to relocate across a super cluster, as plain data (docs/groups.md, "The exact method").

Redistribution, compression and node evacuation all ask the same thing: some instances
(*movers*) may or must leave their nodes, each for nodes it may use (`destinations`), such that
every node that receives something passes htools' strict adds and chosen nodes stay N+1
evacuable. This module turns a cluster state and the movers into what the master model needs
(formulations/relocation.py):

* movers grouped into *shapes*: instances asking the same of every node (their usage of every
  capacity row, failover reserve, counted memory, exclusion tags, kind of move, candidate
  nodes) are interchangeable; a shape is counted per origin (its (primary, secondary) now) and
  per target node, as hsqueeze's model counts shapes;
* the nodes with their capacity rows (`model.capacity`) on the cluster *without* any mover
  (`base0`), so that what stays and what arrives are both variables;
* per node, what its N+1 question needs: the memory of its fixed primaries and what it can
  offer the others (unallocated memory less one MiB, online nodes only).

drbd movers are counted by primary and by secondary node separately; which primary pairs with
which secondary (it decides the failover reserve on the secondary) is settled after the master
by a small pairing model (`PairingProblem`, formulations/relocation.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from model.capacity import N1, ROW_KINDS, CapacityRow, capacity_rows, primary_usage, secondary_usage
from model.groups import DRBD_MOVE, move_kind, placed_state
from model.resources import InstanceDemand
from model.state import ClusterState

Origin = tuple[str, str | None]


@dataclass(frozen=True)
class Shape:
    """Interchangeable movers and where they may go."""

    index: int
    kind: str  # model.groups DRBD_MOVE, MIGRATION or COPY
    group: str  # the group they leave (their primary's group)
    members: Mapping[Origin, tuple[str, ...]]  # instances by (primary, secondary) now
    must_move: bool
    usage_primary: Mapping[str, int]  # capacity row kind -> what one primary takes
    usage_secondary: Mapping[str, int]  # ... and one drbd secondary
    reserve_mib: int  # failover memory its secondary reserves (usesSecMem)
    memory_mib: int  # memory it uses on its primary (0 when stopped)
    exclusion_tags: tuple[str, ...]
    primaries: tuple[str, ...]  # nodes that may become its primary
    secondaries: tuple[str, ...] = ()  # drbd: nodes that may become its secondary
    demand: InstanceDemand | None = None  # one of them (the others ask the same)

    @property
    def drbd(self) -> bool:
        return self.kind == DRBD_MOVE

    @property
    def count(self) -> int:
        return sum(len(v) for v in self.members.values())

    def origin_count(self, origin: Origin) -> int:
        return len(self.members[origin])


@dataclass(frozen=True)
class NodeData:
    """A node as the master sees it, on the cluster without the movers (`base0`)."""

    name: str
    group: str
    online: bool
    rows: tuple[CapacityRow, ...]  # strict rows without any mover (N+1 reserve taken out)
    n1_row: bool  # the strict N+1 reserve row applies
    peers_mib: Mapping[str, int]  # failover memory reserved per primary, without movers
    reserve_mib: int  # the N+1 reserve without movers
    fixed_memory_mib: int  # memory of its primaries that never move (its N+1 need)
    fixed_items_mib: tuple[int, ...]  # ... of those that are re-placed, not failed over (non-drbd)
    fixed_failover_mib: Mapping[str, int]  # ... of those failed over, per secondary (drbd)
    room_mib: int  # unallocated memory less one MiB without movers: what it offers others
    disk_room_mib: int  # free disk less one MiB without movers (the hard disk check)
    exclusion_tags: frozenset[str]  # tags its fixed primaries carry
    receives: bool  # some shape may arrive here


@dataclass(frozen=True)
class RelocationProblem:
    """Everything the master model needs. `required` nodes must be evacuable after the plan
    (exact N+1, checked outside the model; the model holds necessary rows for them)."""

    shapes: tuple[Shape, ...]
    nodes: Mapping[str, NodeData]
    required: tuple[str, ...]
    group_nodes: Mapping[str, tuple[str, ...]]  # group uuid -> its nodes
    cross_weight: bool = True  # arrivals in another group count as cross-group moves

    def origins(self) -> list[tuple[int, Origin]]:
        return [(s.index, o) for s in self.shapes for o in s.members]


Destinations = Callable[[str], tuple[tuple[str, ...], tuple[str, ...]]]


def _demand_key(d: InstanceDemand) -> InstanceDemand:
    return replace(d, name="")


def _rows_of(state: ClusterState, name: str) -> tuple[CapacityRow, ...]:
    return capacity_rows(state.nodes[name])


def build_problem(
    state: ClusterState,
    movers: Sequence[str],
    must_move: Iterable[str],
    destinations: Destinations,
    required: Iterable[str],
) -> tuple[RelocationProblem, ClusterState]:
    """The master's data for `movers` (in cluster order), of which `must_move` must leave;
    `destinations(instance)` gives its candidate primary nodes and (drbd) secondary nodes.
    Returns the problem and `base0`, the cluster without the movers."""
    forced = set(must_move)
    base0 = placed_state(state, movers, ())
    groups: dict[tuple, list[str]] = defaultdict(list)
    info: dict[tuple, tuple] = {}
    for name in movers:
        d = state.demands[name]
        prim, sec = destinations(name)
        p, _ = state.locations[name]
        group = state.nodes[p].group_uuid
        key = (_demand_key(d), group, name in forced, prim, sec)
        groups[key].append(name)
        info[key] = (d, group, prim, sec)
    shapes: list[Shape] = []
    for k, (key, names) in enumerate(groups.items()):
        d, group, prim, sec = info[key]
        members: dict[Origin, list[str]] = defaultdict(list)
        for name in names:
            members[state.locations[name]].append(name)
        shapes.append(
            Shape(
                index=k,
                kind=move_kind(d.disk_template),
                group=group,
                members={o: tuple(v) for o, v in members.items()},
                must_move=key[2],
                usage_primary={kind: primary_usage(kind, d) for kind in ROW_KINDS},
                usage_secondary=(
                    {kind: secondary_usage(kind, d) for kind in ROW_KINDS}
                    if d.has_secondary
                    else {}
                ),
                reserve_mib=d.secondary_memory_mib if not d.forthcoming else 0,
                memory_mib=d.memory_mib if d.uses_memory else 0,
                exclusion_tags=d.exclusion_tags,
                primaries=prim,
                secondaries=sec if d.has_secondary else (),
                demand=d,
            )
        )
    receiving = {n for s in shapes for n in (*s.primaries, *s.secondaries)}
    fixed_names = set(state.demands) - set(movers)
    nodes: dict[str, NodeData] = {}
    for name, st0 in base0.nodes.items():
        fixed = [
            base0.demands[i]
            for i in st0.primaries
            if i in fixed_names and base0.demands[i].uses_memory
        ]
        nodes[name] = NodeData(
            name=name,
            group=st0.group_uuid,
            online=not st0.offline,
            rows=_rows_of(base0, name),
            n1_row=not (state.nodes[name].fail_n1 and st0.fail_n1),
            peers_mib=dict(st0.peers),
            reserve_mib=st0.reserved_memory_mib,
            fixed_memory_mib=sum(d.memory_mib for d in fixed),
            fixed_items_mib=tuple(sorted(d.memory_mib for d in fixed if not d.has_secondary)),
            fixed_failover_mib=_failovers(base0, name, fixed),
            room_mib=st0.unallocated_memory_mib - 1,
            disk_room_mib=st0.free_disk_mib - 1,
            exclusion_tags=frozenset(t for t, _ in st0.exclusion_tag_counts),
            receives=name in receiving,
        )
    group_nodes: dict[str, list[str]] = defaultdict(list)
    for name, st in state.nodes.items():
        group_nodes[st.group_uuid].append(name)
    problem = RelocationProblem(
        shapes=tuple(shapes),
        nodes=nodes,
        required=tuple(required),
        group_nodes={g: tuple(v) for g, v in group_nodes.items()},
    )
    return problem, base0


def _failovers(state: ClusterState, node: str, fixed: Iterable[InstanceDemand]) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for d in fixed:
        if d.has_secondary:
            secondary = state.locations[d.name][1]
            if secondary is not None:
                out[secondary] += d.memory_mib
    return dict(out)


# --- a node's failure, as a packing the master can hold (column-and-constraint generation) ---


@dataclass(frozen=True)
class ScenarioItem:
    """A class of the failing node's primaries that are re-placed (not failed over): what one
    takes from a bin and which bins admit it; counted as `fixed` ones plus movers that stay
    on the node (`stay`: (shape, origin)) and shapes that arrive on it (`arrive`)."""

    memory_mib: int
    disk_mib: int  # local disk charged on the bin (re-created plain instances)
    bins: tuple[str, ...]
    fixed: int = 0
    stay: tuple[tuple[int, Origin], ...] = ()
    arrive: tuple[int, ...] = ()


@dataclass(frozen=True)
class Scenario:
    """Node `node` fails: its drbd primaries fail over to their secondaries (fixed ones and
    movers that stay), every other primary needs a bin (exact N+1 in hard mode, the drbd
    arrivals counted as instances that may go to any bin: a relaxation of their pairing)."""

    node: str
    bins: tuple[str, ...]
    items: tuple[ScenarioItem, ...]


def scenario_of(
    state: ClusterState,
    base0: ClusterState,
    problem: RelocationProblem,
    node: str,
    *,
    offline_targets: bool = False,
) -> Scenario:
    """The packing `node`'s failure asks of its group, over the master's variables (the
    admissibility of `model.n1.packing_of`: migration tags for migrated instances, the
    group's policy for re-created ones)."""
    from model.n1 import MIGRATABLE_TEMPLATES
    from model.policy import policy_shortfall
    from model.resources import check_migration

    group = state.nodes[node].group_uuid
    bins = tuple(
        t
        for t, st in state.nodes.items()
        if t != node and st.group_uuid == group and (offline_targets or not st.offline)
    )
    source = state.nodes[node]

    def admitted(d: InstanceDemand) -> tuple[str, ...]:
        if d.disk_template in MIGRATABLE_TEMPLATES:
            return tuple(t for t in bins if check_migration(source, state.nodes[t]) is None)
        return tuple(
            t
            for t in bins
            if policy_shortfall(d, state.ipolicy_of(t), state.nodes[t].exclusive_storage) is None
        )

    classes: dict[tuple, dict] = {}

    def entry(d: InstanceDemand) -> dict:
        local = d.uses_local_storage
        key = (
            d.memory_mib if d.uses_memory else 0,
            d.disk_mib if local else 0,
            admitted(d),
        )
        return classes.setdefault(key, {"fixed": 0, "stay": [], "arrive": []})

    movers = {n for sh in problem.shapes for names in sh.members.values() for n in names}
    for name in base0.nodes[node].primaries:
        d = base0.demands[name]
        if name in movers or d.has_secondary:
            continue
        entry(d)["fixed"] += 1
    for sh in problem.shapes:
        d = sh.demand
        if d is None or sh.drbd:
            continue
        for o in sh.members:
            if o[0] == node:
                entry(d)["stay"].append((sh.index, o))
        if node in sh.primaries:
            entry(d)["arrive"].append(sh.index)
    for sh in problem.shapes:  # drbd arrivals: to any bin, memory only (pairing relaxed)
        if sh.drbd and node in sh.primaries and sh.memory_mib:
            key = (sh.memory_mib, 0, bins)
            classes.setdefault(key, {"fixed": 0, "stay": [], "arrive": []})["arrive"].append(
                sh.index
            )
    items = tuple(
        ScenarioItem(mem, disk, adm, v["fixed"], tuple(v["stay"]), tuple(v["arrive"]))
        for (mem, disk, adm), v in classes.items()
        if mem or disk
    )
    return Scenario(node, bins, items)


# --- pairing drbd primaries with secondaries ------------------------------------------------


@dataclass(frozen=True)
class PairingProblem:
    """In one group: drbd shapes counted per primary and per secondary node by the master;
    find pairs such that every secondary keeps htools' N+1 reserve row (its failover memory
    per primary) and, for a failing primary, can take its instances' failover."""

    group: str
    primaries: Mapping[int, Mapping[str, int]]  # shape -> primary node -> count
    secondaries: Mapping[int, Mapping[str, int]]  # shape -> secondary node -> count
    reserve_mib: Mapping[int, int]  # shape -> failover reserve of one instance
    memory_mib: Mapping[int, int]  # shape -> memory one instance uses (failover, hard)
    peer_cap_mib: Mapping[tuple[str, str], int]  # (secondary, primary) -> room for new reserve
    failover_cap_mib: Mapping[tuple[str, str], int]  # (secondary, primary) -> room for failovers
    forbidden: frozenset[tuple[int, str, str]] = field(default_factory=frozenset)
    cuts: tuple[tuple[tuple[tuple[int, str, str], int], ...], ...] = ()  # no-goods on pair counts

    def pairs(self) -> list[tuple[int, str, str]]:
        return [
            (s, p, q)
            for s, ps in self.primaries.items()
            for p, cp in ps.items()
            if cp > 0
            for q, cq in self.secondaries.get(s, {}).items()
            if cq > 0 and q != p and (s, p, q) not in self.forbidden
        ]


def failover_room(state: ClusterState, secondary: str, primary: str) -> int:
    """Memory the secondary can still take in failovers from `primary` if that one fails:
    unallocated memory less one MiB, less what `primary`'s running drbd instances with this
    secondary already need there (Node.hs, the hard memory check of a failover)."""
    st = state.nodes[secondary]
    used = sum(
        state.demands[i].memory_mib
        for i in state.nodes[primary].primaries
        if state.demands[i].uses_memory and state.locations[i][1] == secondary
    )
    return st.unallocated_memory_mib - 1 - used


def peer_room(state: ClusterState, secondary: str, primary: str) -> int | None:
    """Failover reserve the secondary can still add for `primary` under htools' strict N+1
    row (unallocated > reserve), None when that row does not apply (the node already fails
    N+1, htools skips the check)."""
    st = state.nodes[secondary]
    if st.fail_n1:
        return None
    return st.unallocated_memory_mib - 1 - st.peer_memory_mib(primary)


def pairing_problem(
    state_without_pairs: ClusterState,
    group: str,
    primaries: Mapping[int, Mapping[str, int]],
    secondaries: Mapping[int, Mapping[str, int]],
    shapes: Mapping[int, Shape],
) -> PairingProblem:
    """The pairing question of one group, on the cluster where every other arrival is in place
    (`state_without_pairs`: the drbd arrivals' primaries added, their secondaries not)."""
    st = state_without_pairs
    prim_nodes = {p for v in primaries.values() for p, c in v.items() if c > 0}
    sec_nodes = {q for v in secondaries.values() for q, c in v.items() if c > 0}
    peer_cap: dict[tuple[str, str], int] = {}
    fo_cap: dict[tuple[str, str], int] = {}
    for q in sec_nodes:
        for p in prim_nodes:
            if p == q:
                continue
            room = peer_room(st, q, p)
            if room is not None:
                peer_cap[q, p] = room
            fo_cap[q, p] = failover_room(st, q, p)
    return PairingProblem(
        group=group,
        primaries=primaries,
        secondaries=secondaries,
        reserve_mib={k: shapes[k].reserve_mib for k in primaries},
        memory_mib={k: shapes[k].memory_mib for k in primaries},
        peer_cap_mib=peer_cap,
        failover_cap_mib=fo_cap,
    )


def members_in_order(shape: Shape) -> list[tuple[Origin, str]]:
    return [(o, name) for o, names in shape.members.items() for name in names]


def redundant_rows(problem: RelocationProblem) -> dict[str, frozenset[str]]:
    """Per node, row kinds implied by another of its rows for every shape (same or smaller
    usage, larger cap): the master leaves them out (e.g. the *_forth rows when nothing is
    forthcoming)."""
    kinds = list(ROW_KINDS)

    def uses(kind: str) -> list[int]:
        out = []
        for s in problem.shapes:
            out.append(s.usage_primary.get(kind, 0))
            out.append(s.usage_secondary.get(kind, 0))
        return out

    vectors = {k: uses(k) for k in kinds}
    dominated_by = {
        (a, b): all(x >= y for x, y in zip(vectors[a], vectors[b], strict=True))
        for a in kinds
        for b in kinds
        if a != b and N1 not in (a, b)
    }
    out: dict[str, frozenset[str]] = {}
    for name, node in problem.nodes.items():
        caps = {r.kind: r.cap for r in node.rows}
        drop: set[str] = set()
        for b, cap_b in caps.items():
            for a, cap_a in caps.items():
                if a == b or a in drop or not dominated_by.get((a, b)):
                    continue
                # row a: Σ use_a ≤ cap_a implies Σ use_b ≤ cap_b when use_b ≤ use_a, cap_a ≤ cap_b
                if cap_a <= cap_b and (vectors[a] != vectors[b] or cap_a < cap_b or a < b):
                    drop.add(b)
                    break
        out[name] = frozenset(drop)
    return out


def shapes_by_index(problem: RelocationProblem) -> dict[int, Shape]:
    return {s.index: s for s in problem.shapes}


def nodes_of(problem: RelocationProblem, names: Iterable[str]) -> list[NodeData]:
    return [problem.nodes[n] for n in names]


def group_members(state: ClusterState) -> Mapping[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for n, st in state.nodes.items():
        out[st.group_uuid].append(n)
    return out
