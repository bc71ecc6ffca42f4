"""hsqueeze's question as plain data, and its answer as Ganeti commands (docs/squeeze.md).

Which nodes may be powered down (shrink) or which standby nodes must be powered up (expand),
so that every online node can host hsqueeze's probe instance. This module holds the domain
rules and nothing of Pyomo:

* which instances may move (`movable`) and which nodes are candidates
  (`offline_candidates`, `online_candidates`), as hsqueeze decides them;
* the *rooms* of a node: what its movable instances may use while the probe, the N+1 reserve
  and the fixed load still fit, read off the node's capacity rows (`model.capacity`);
* the problem the model solves (`SqueezeProblem`: nodes, shapes of interchangeable
  instances, DRBD pair choices), built from a `ClusterState` (`build_problem`);
* the way back: counts per shape and node (`SqueezeAssignment`) into named migrations
  (`migrations`), ordered into jobsets that pass htools' strict checks step by step
  (`order_moves`, through `ClusterState.relocate`), hsqueeze's command texts (`move_commands`,
  `format_jobs`, `plan_commands`) and the squeezed snapshot (`squeezed_cluster`).

formulations/squeeze.py writes the model over these data; solvers/strategies/squeeze.py solves
it and checks the plan.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from model.backends.iallocator_response import power_opcodes, tags_opcode
from model.backends.jobs import JobSet, moving
from model.capacity import (
    DISK,
    DISK_FORTH,
    MEMORY,
    MEMORY_FORTH,
    N1,
    VCPU,
    VCPU_FORTH,
    rooms_beside,
    spindle_ratio_room,
)
from model.check import Violation
from model.cluster import Cluster, Instance
from model.errors import InputError, SolverError
from model.operations import Step, command, opcode
from model.resources import (
    InstanceDemand,
    NodeState,
    add_primary,
    remove_primary,
    remove_secondary,
)
from model.state import ClusterState, StateEdit

SHRINK = "shrink"
EXPAND = "expand"
#: Node states in a problem: "on" stays on, "candidate" may be powered down (shrink),
#: "standby" may be powered up (expand). Nodes that stay off are not part of the problem.
NODE_STATES = ("on", "candidate", "standby")
#: `--move`: which instances may move (see `movable`).
MOVE_MODES = ("ext", "drbd", "all")
STANDBY_PREFIX = "htools:standby:"
STANDBY_AUTO = "htools:standby:auto"
#: The head of the script `-CFILE` writes, as hsqueeze writes it.
SH_TEMPLATE = (
    "#!/bin/sh\n\n"
    "# Auto-generated script for executing cluster rebalancing\n\n"
    "# To stop, touch the file /tmp/stop-htools\n\n"
    "set -e\n\n"
    "check() {\n"
    "  if [ -f /tmp/stop-htools ]; then\n"
    "    echo 'Stop requested, exiting'\n"
    "    exit 0\n"
    "  fi\n"
    "}\n\n"
)


def _factor(value: float, option: str) -> float:
    if not math.isfinite(value) or value < 0:
        raise InputError(f"{option} must be a finite number >= 0, not {value!r}")
    return value


@dataclass(frozen=True)
class SqueezeRequest:
    """hsqueeze's options that shape the answer: the probe factors (multiples of the cluster
    policy's std spec) and which instances may move. Bad factors are refused here."""

    minimal_resources: float = 2.0  # every node must host this probe, else expand
    target_resources: float = 2.0  # after shrinking every online node hosts this probe
    move: str = "ext"  # one of MOVE_MODES

    def __post_init__(self) -> None:
        _factor(self.minimal_resources, "--minimal-resources")
        _factor(self.target_resources, "--target-resources")
        if self.move not in MOVE_MODES:
            raise InputError(f"--move must be one of {', '.join(MOVE_MODES)}, not {self.move!r}")


# -- which instances move, which nodes are candidates ------------------------------------------


def movable(inst: Instance, move: str) -> bool:
    """Instances the plan may relocate: htools moves only auto-balanced, movable instances.

    ext: externally mirrored (live migration, as hsqueeze); drbd: also DRBD instances
    (failover, new secondary, or both); all: ext, DRBD and diskless/file instances
    (`gnt-instance move`, with downtime). Plain instances never move.
    """
    if not inst.auto_balance or inst.forthcoming:
        return False
    if inst.mirrored:
        return move in ("drbd", "all") and inst.secondary is not None
    if inst.secondary:
        return False
    if move == "all":
        return not inst.uses_local_storage
    return inst.externally_mirrored


def offline_candidates(cluster: Cluster, move: str = "ext") -> list[str]:
    """hsqueeze's list: online, not master, no secondaries, only non-local primaries; sorted by
    primary count descending (stable, so ties keep node order). With --move drbd/all a node
    qualifies when every instance on it (primary or secondary) may move."""
    has_secondary = {i.secondary for i in cluster.instances if i.secondary}
    prim: dict[str, list[Instance]] = defaultdict(list)
    sec: dict[str, list[Instance]] = defaultdict(list)
    for i in cluster.instances:
        prim[i.primary].append(i)
        if i.secondary:
            sec[i.secondary].append(i)

    def emptiable(name: str) -> bool:
        if move == "ext":
            return name not in has_secondary and not any(i.uses_local_storage for i in prim[name])
        return all(movable(i, move) for i in prim[name] + sec[name])

    out = [n for n in cluster.nodes if n.online and not n.master and emptiable(n.name)]
    out.sort(key=lambda n: -len(prim[n.name]))
    return [n.name for n in out]


def online_candidates(cluster: Cluster) -> list[str]:
    """Offline nodes carrying a `htools:standby:` tag, in node order."""
    return [
        n.name
        for n in cluster.nodes
        if n.offline and any(t.startswith(STANDBY_PREFIX) for t in n.tags)
    ]


def fits(state: NodeState, probe: InstanceDemand) -> bool:
    """htools `Node.addPri` (strict) succeeds."""
    return isinstance(add_primary(state, probe), NodeState)


# -- rooms: what movable instances may use on a node with the probe still fitting --------------


@dataclass(frozen=True)
class Rooms:
    """What the movable instances may take from one node with the probe still fitting."""

    memory_mib: int  # bound on Σ counted memory of movable primaries
    memory_forth_mib: int  # bound on Σ memory (all statuses) of movable primaries
    vcpus: int
    min_memory_mib: int  # lower bound (keeps an N+1-failing node failing, see `rooms`)
    disk_mib: int  # bound on Σ local disk of new primaries and secondaries (DRBD moves)


#: Room for vCPUs on a node without a vCPU limit (negative vcpu ratio).
UNLIMITED_VCPUS = 10**9


def rooms(base: NodeState, probe: InstanceDemand) -> Rooms:
    """Rooms of a node emptied of its movable primaries (`base`), for a probe: its capacity
    rows (`model.capacity`) minus what the probe takes.

    A node that passes N+1 must keep `unallocated − probe > rMem` (the N1 row). A node that
    already fails N+1 is exempt from that test only while it keeps failing (htools
    recomputes the flag after every move), so its load is kept at or above
    `unallocated − rMem`.
    """
    left = rooms_beside(base, probe)
    memory = left[MEMORY]
    if N1 in left:
        memory = min(memory, left[N1] - base.reserved_memory_mib)
    low = base.unallocated_memory_mib - base.reserved_memory_mib if base.fail_n1 else 0
    vcpus = min((left[k] for k in (VCPU, VCPU_FORTH) if k in left), default=UNLIMITED_VCPUS)
    disk = min(left[DISK], left[DISK_FORTH])
    return Rooms(memory, left[MEMORY_FORTH], vcpus, max(low, 0), disk)


# -- the problem the model solves --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SqueezeNode:
    """One node as the model sees it; `room_*` already subtracts fixed load and the probe."""

    name: str
    state: str  # one of NODE_STATES
    room_memory_mib: int  # Σ counted mem of movable primaries allowed, probe + N+1 kept
    room_memory_forth_mib: int  # Σ mem (any status) allowed by htools' *_forth counters
    room_vcpus: int  # Σ VCPUs of movable primaries allowed here, probe kept
    total_memory_mib: float  # for the utilisation objective
    fixed_used_memory_mib: float  # memory used with no movable instance on the node
    min_memory_mib: int = 0  # Σ counted mem must stay ≥ this (an N+1-failing node stays so)
    bare_room_memory_mib: int = 0  # the rooms without the probe (soft mode)
    bare_room_memory_forth_mib: int = 0
    bare_room_vcpus: int = 0
    group: str = ""  # instances move within their node group only
    # DRBD (--move drbd): memory before any N+1 reserve, disk and spindle rooms, fixed peers
    n1_room_memory_mib: int = 0  # unallocated − probe − 1, with every movable instance gone
    room_disk_mib: int = 0
    room_spindles: float = 0.0
    fixed_peers: tuple[tuple[int, int], ...] = ()  # (primary node index, reserve MiB)


@dataclass(frozen=True, slots=True)
class Shape:
    """Interchangeable movable instances: same counted memory and VCPUs, same tags."""

    key: str
    memory_mib: int  # memory counted on the primary (0 for stopped instances)
    memory_forth_mib: int  # memory as the *_forth counters count it (any status)
    vcpus: int  # VCPUs counted (0 for ADMIN_offline)
    exclusion_tags: tuple[str, ...] = ()
    counts: tuple[tuple[int, int], ...] = ()  # (node index, instances there now)
    homeless: int = 0  # instances on nodes outside the problem (offline): they must move
    group: str = ""

    @property
    def total(self) -> int:
        return sum(c for _, c in self.counts) + self.homeless


@dataclass(frozen=True, slots=True)
class PairChoice:
    """A DRBD instance's (primary, secondary) after the plan and what getting there costs:
    1 per live migration or failover, 2 per disk replacement (a full resync)."""

    primary: int
    secondary: int
    cost: int


@dataclass(frozen=True, slots=True)
class MirroredInstance:
    """A DRBD instance that may move: identity matters (its pair, the N+1 reserve it puts on
    its secondary for its primary), so it gets one binary per pair it may end on."""

    name: str
    memory_mib: int  # counted on the primary
    memory_forth_mib: int
    vcpus: int
    reserve_mib: int  # memory its secondary keeps for a failover
    disk_mib: int  # on both nodes
    spindle_use: float  # instance spindles on both nodes
    exclusion_tags: tuple[str, ...]
    choices: tuple[PairChoice, ...]
    current: tuple[int, int]  # the pair now (node indices, -1 outside the problem)


ChoiceKey = tuple[int, int]  # (DRBD instance index, choice index)


@dataclass(frozen=True)
class SqueezeProblem:
    """Everything the model needs; node indices refer to `nodes`. The derived tables below
    are computed once per problem."""

    mode: str  # SHRINK or EXPAND
    nodes: tuple[SqueezeNode, ...]
    shapes: tuple[Shape, ...]
    # (node index, exclusion tag) -> instances with that tag that cannot move off the node
    fixed_tag_counts: Mapping[tuple[int, str], int] = field(default_factory=dict)
    soft_probe: bool = False  # expand fallback: maximise the nodes that host the probe
    mirrored: tuple[MirroredInstance, ...] = ()  # DRBD instances that may move (--move drbd)

    def decided(self) -> list[int]:
        """The nodes whose power state the plan decides (candidates, or standby nodes)."""
        wanted = "candidate" if self.mode == SHRINK else "standby"
        return [i for i, n in enumerate(self.nodes) if n.state == wanted]

    @cached_property
    def counts(self) -> dict[tuple[int, int], int]:
        """(shape, node) -> instances of the shape on the node now (only where some are)."""
        return {(s, n): c for s, sh in enumerate(self.shapes) for n, c in sh.counts}

    @cached_property
    def choices(self) -> tuple[ChoiceKey, ...]:
        """Every (DRBD instance, pair choice), in instance then choice order."""
        return tuple((i, k) for i, mi in enumerate(self.mirrored) for k in range(len(mi.choices)))

    @cached_property
    def choices_as_primary(self) -> dict[int, list[ChoiceKey]]:
        """node -> the choices that make it a DRBD instance's primary."""
        out: dict[int, list[ChoiceKey]] = defaultdict(list)
        for i, k in self.choices:
            out[self.mirrored[i].choices[k].primary].append((i, k))
        return out

    @cached_property
    def choices_touching(self) -> dict[int, list[ChoiceKey]]:
        """node -> the choices that put a DRBD instance's disks on it (either role)."""
        out: dict[int, list[ChoiceKey]] = defaultdict(list)
        for i, k in self.choices:
            ch = self.mirrored[i].choices[k]
            out[ch.primary].append((i, k))
            out[ch.secondary].append((i, k))
        return out

    @cached_property
    def choices_by_pair(self) -> dict[tuple[int, int], list[ChoiceKey]]:
        """(secondary, primary) -> the choices that make that node pair a DRBD pair."""
        out: dict[tuple[int, int], list[ChoiceKey]] = defaultdict(list)
        for i, k in self.choices:
            ch = self.mirrored[i].choices[k]
            out[ch.secondary, ch.primary].append((i, k))
        return out


@dataclass(frozen=True)
class SqueezeAssignment:
    """A solved problem read back as plain data (formulations.squeeze.solution)."""

    on: Mapping[int, bool] = field(default_factory=dict)  # node -> powered on after the plan
    counts: Mapping[tuple[int, int], int] = field(default_factory=dict)  # (shape, node) -> y > 0
    pairs: Mapping[int, int] = field(default_factory=dict)  # DRBD instance -> chosen pair


@dataclass(frozen=True)
class TypeShares:
    """The node-type aggregate read back (formulations.squeeze.type_aggregate_solution):
    nodes of equal state and rooms form a type; how many of each stay on and how many
    instances of each shape go to each type."""

    types: tuple[tuple[int, ...], ...]  # node indices per type, in first-appearance order
    powered_on: tuple[int, ...]  # per type
    share: Mapping[tuple[int, int], int]  # (shape, type) -> instances


# -- building the problem ----------------------------------------------------------------------


@dataclass(frozen=True)
class BuiltProblem:
    """A problem plus what is needed to read its solution back into instance names."""

    problem: SqueezeProblem
    members: dict[tuple[int, int], list[str]]  # (shape, node) -> instances there now
    homeless: dict[int, list[str]]  # shape -> instances on nodes outside the problem
    node_names: list[str]


def build_problem(
    state: ClusterState,
    mode: str,
    probe: InstanceDemand,
    move: str,
    *,
    decided: Sequence[str],
    always_on: Sequence[str] = (),
    soft_probe: bool = False,
    rehome: bool = True,
) -> BuiltProblem:
    """Nodes: online ones plus `always_on`; `decided` are the candidates (or standby nodes).
    `rehome`: movable instances on nodes outside the problem (offline) must move into it;
    without, they stay where they are, as hsqueeze leaves them."""
    cluster = state.cluster
    bare_probe = replace(probe, memory_mib=0, vcpus=0)
    decided_set, forced = set(decided), set(always_on)
    names = [n.name for n in cluster.nodes if n.online or n.name in decided_set or n.name in forced]
    index = {name: k for k, name in enumerate(names)}
    moving = [i for i in cluster.instances if movable(i, move)]
    if not rehome:
        moving = [i for i in moving if i.primary in index and i.secondary in (None, *index)]
    pairs = [i for i in moving if i.mirrored]
    moving_names = {i.name for i in moving}
    bases = {name: state.node(name) for name in names}
    for inst in moving:
        d = state.demands[inst.name]
        if inst.primary in bases:
            bases[inst.primary] = remove_primary(bases[inst.primary], d)
        if inst.secondary in bases:
            bases[inst.secondary] = remove_secondary(bases[inst.secondary], d, inst.primary)
    # keep the N+1 exemption only where both the load-time flag and the recomputed one say
    # the node fails N+1, so that moved and untouched nodes are judged alike (conservative);
    # with DRBD moves the reserve itself moves, so every node passes N+1 strictly
    for name in names:
        if bases[name] is not state.node(name) or pairs:
            b = bases[name]
            failing = b.unallocated_memory_mib <= b.reserved_memory_mib
            keep = failing and state.node(name).fail_n1 and not pairs
            bases[name] = replace(b, fail_n1=keep)

    shape_key: dict[tuple, int] = {}
    shapes_raw: list[dict] = []
    members: dict[tuple[int, int], list[str]] = defaultdict(list)
    homeless: dict[int, list[str]] = defaultdict(list)
    for inst in moving:
        if inst.mirrored:
            continue
        d = state.demands[inst.name]
        mem = d.memory_mib if d.uses_memory else 0
        group = cluster.node(inst.primary).group_uuid
        key: tuple = (mem, d.memory_mib, d.counted_vcpus, d.exclusion_tags, group)
        if d.exclusion_tags:
            key = (*key, inst.name)  # identity matters: a shape of its own
        if key not in shape_key:
            shape_key[key] = len(shapes_raw)
            shapes_raw.append(
                dict(
                    mem=mem,
                    mem_all=d.memory_mib,
                    cpu=d.counted_vcpus,
                    tags=d.exclusion_tags,
                    key=inst.name,
                    group=group,
                )
            )
        s = shape_key[key]
        if inst.primary in index:
            members[s, index[inst.primary]].append(inst.name)
        else:
            homeless[s].append(inst.name)

    mirrored, max_reserve = _pair_choices(state, pairs, names, index)
    nodes: list[SqueezeNode] = []
    for name in names:
        base = bases[name]
        r, bare = rooms(base, probe), rooms(base, bare_probe)
        if name in decided_set:
            st = "candidate" if mode == SHRINK else "standby"
        else:
            st = "on"
        # a DRBD secondary needs its failover memory below the *_forth free memory
        forth_cut = max_reserve.get(name, 0)
        nodes.append(
            SqueezeNode(
                name=name,
                state=st,
                room_memory_mib=r.memory_mib,
                room_memory_forth_mib=min(r.memory_forth_mib, bare.memory_forth_mib - forth_cut),
                room_vcpus=r.vcpus,
                min_memory_mib=r.min_memory_mib,
                total_memory_mib=base.total_memory_mib,
                fixed_used_memory_mib=base.total_memory_mib - base.unallocated_memory_mib,
                bare_room_memory_mib=bare.memory_mib,
                bare_room_memory_forth_mib=bare.memory_forth_mib - forth_cut,
                bare_room_vcpus=bare.vcpus,
                group=base.group_uuid,
                n1_room_memory_mib=base.unallocated_memory_mib
                - (probe.memory_mib if probe.uses_memory else 0)
                - 1,
                room_disk_mib=r.disk_mib,
                room_spindles=spindle_ratio_room(base),
                fixed_peers=tuple((index[p], mem) for p, mem in base.peers if p in index and mem),
            )
        )
    shapes = []
    for s, raw in enumerate(shapes_raw):
        counts = tuple(sorted((n, len(v)) for (ss, n), v in members.items() if ss == s))
        shapes.append(
            Shape(
                key=raw["key"],
                memory_mib=raw["mem"],
                memory_forth_mib=raw["mem_all"],
                vcpus=raw["cpu"],
                exclusion_tags=raw["tags"],
                counts=counts,
                homeless=len(homeless.get(s, ())),
                group=raw["group"],
            )
        )
    fixed_tags: dict[tuple[int, str], int] = {}
    for name in names:
        for tag, cnt in state.node(name).exclusion_tag_counts:
            moved_here = sum(
                1
                for i in state.node(name).primaries_forth
                if i in moving_names and tag in state.demands[i].exclusion_tags
            )
            if cnt - moved_here > 0:
                fixed_tags[index[name], tag] = cnt - moved_here
    problem = SqueezeProblem(
        mode=mode,
        nodes=tuple(nodes),
        shapes=tuple(shapes),
        fixed_tag_counts=fixed_tags,
        soft_probe=soft_probe,
        mirrored=tuple(mirrored),
    )
    return BuiltProblem(problem, dict(members), dict(homeless), names)


def _pair_choices(
    state: ClusterState,
    pairs: Sequence[Instance],
    names: Sequence[str],
    index: dict[str, int],
) -> tuple[list[MirroredInstance], dict[str, int]]:
    """Every (primary, secondary) a DRBD instance may end on, with hbal's move costs.

    With p, s the current pair and t any other node of the group (not exclusive storage):
    stay (p,s) 0; failover (s,p) 1; replace secondary (p,t) 2; failover and replace (s,t) 3;
    replace and failover (t,p) 3; replace primary (t,s) 4. A pair with a node outside the
    problem (offline) is never kept.
    """
    cluster = state.cluster
    out: list[MirroredInstance] = []
    max_reserve: dict[str, int] = defaultdict(int)
    for inst in pairs:
        d = state.demands[inst.name]
        p, s = inst.primary, inst.secondary or ""
        group = cluster.node(p).group_uuid
        others = [
            n
            for n in names
            if n not in (p, s)
            and cluster.node(n).group_uuid == group
            and not cluster.node(n).exclusive_storage
        ]
        raw = [(p, s, 0), (s, p, 1)]
        for t in others:
            raw += [(p, t, 2), (s, t, 3), (t, p, 3), (t, s, 4)]
        choices = tuple(
            PairChoice(index[a], index[b], c) for a, b, c in raw if a in index and b in index
        )
        for c in choices:
            max_reserve[names[c.secondary]] = max(
                max_reserve[names[c.secondary]], d.secondary_memory_mib
            )
        local = not cluster.node(p).exclusive_storage
        out.append(
            MirroredInstance(
                name=inst.name,
                memory_mib=d.memory_mib if d.uses_memory else 0,
                memory_forth_mib=d.memory_mib,
                vcpus=d.counted_vcpus,
                reserve_mib=d.secondary_memory_mib,
                disk_mib=d.disk_mib,
                spindle_use=float(d.spindle_use) if local else 0.0,
                exclusion_tags=d.exclusion_tags,
                choices=choices,
                current=(index.get(p, -1), index.get(s, -1)),
            )
        )
    return out, dict(max_reserve)


# -- from counts to named migrations, ordered and checked --------------------------------------


@dataclass(frozen=True)
class Migration:
    """One instance's move: to a new primary (and, for DRBD, possibly a new secondary)."""

    instance: str
    source: str
    target: str
    old_secondary: str | None = None
    secondary: str | None = None

    def nodes(self) -> set[str]:
        return {n for n in (self.source, self.target, self.old_secondary, self.secondary) if n}


def migrations(
    cluster: Cluster, built: BuiltProblem, assignment: SqueezeAssignment
) -> list[Migration]:
    """Which instances move where: of each shape, the last ones (file order) leave a node,
    and the arrivals are handed out in node order."""
    names = built.node_names
    out: list[Migration] = []
    for s, shape in enumerate(built.problem.shapes):
        now = dict(shape.counts)
        leaving: list[str] = list(built.homeless.get(s, ()))
        slots: list[int] = []
        for n in range(len(names)):
            c, y = now.get(n, 0), assignment.counts.get((s, n), 0)
            if c > y:
                leaving += built.members[s, n][y:]
            elif y > c:
                slots += [n] * (y - c)
        if len(leaving) != len(slots):
            raise SolverError(f"inconsistent solution for shape {shape.key}")
        for inst, n in zip(leaving, slots, strict=True):
            out.append(Migration(inst, cluster.instance_index[inst].primary, names[n]))
    for i, mi in enumerate(built.problem.mirrored):
        ch = mi.choices[assignment.pairs[i]]
        inst = cluster.instance_index[mi.name]
        a, b = names[ch.primary], names[ch.secondary]
        if (a, b) != (inst.primary, inst.secondary):
            out.append(Migration(mi.name, inst.primary, a, inst.secondary, b))
    return out


def _step(edit: StateEdit, mv: Migration) -> bool:
    """One migration made on `edit`; False (nothing done) when htools' strict checks refuse
    it."""
    secondary = mv.secondary if mv.secondary else None
    return edit.relocate(mv.instance, mv.target, secondary) is None


def order_moves(state: ClusterState, moves: list[Migration]) -> list[list[Migration]]:
    """Jobsets in which every migration passes htools' strict checks when it runs.

    Migrations in one jobset touch disjoint nodes, so they run in parallel. Greedy, one pass
    per jobset: take each pending migration whose nodes are still free in this jobset and
    which htools accepts at that point. Migrations that never become acceptable on their own
    (a swap) form the last jobsets; the checker judges the final layout either way.
    """
    pending = list(moves)
    jobsets: list[list[Migration]] = []
    edit = StateEdit(state)
    while pending:
        busy: set[str] = set()
        jobset: list[Migration] = []
        rest: list[Migration] = []
        for mv in pending:
            touched = mv.nodes()
            if touched & busy:
                rest.append(mv)
                continue
            if not _step(edit, mv):
                rest.append(mv)
                continue
            busy |= touched
            jobset.append(mv)
        if not jobset:
            jobsets += [[mv] for mv in rest]
            break
        jobsets.append(jobset)
        pending = rest
    return jobsets


def not_preexisting(
    cluster: Cluster, violations: Sequence[Violation], moves: Sequence[Migration]
) -> tuple[Violation, ...]:
    """The checker's verdict minus what the plan did not cause: an instance that may not move
    and already sat on an offline node stays there (htools' hsqueeze then does nothing;
    the exact plan still frees what it can around it)."""
    moved = {m.instance for m in moves}
    offline = {n.name for n in cluster.nodes if n.offline}

    def preexisting(v: Violation) -> bool:
        return (
            v.kind in ("primary_offline", "secondary_offline")
            and v.instance is not None
            and v.instance not in moved
            and v.node in offline
        )

    return tuple(v for v in violations if not preexisting(v))


# -- Ganeti commands and the squeezed snapshot -------------------------------------------------


def move_steps(cluster: Cluster, mv: Migration) -> list[Step]:
    """The Ganeti operations of one move in order, as htools' iMoveToJob (model/operations.py:
    a DRBD failover is a migration without target)."""
    inst = cluster.instance_index[mv.instance]
    if not inst.mirrored:
        return [("migrate" if inst.externally_mirrored else "move", mv.target)]
    failover: Step = ("migrate", None)
    p, s, a, b = mv.source, mv.old_secondary, mv.target, mv.secondary
    if (a, b) == (s, p):
        return [failover]
    if a == p:
        return [("replace", b)]
    if a == s:
        return [failover, ("replace", b)]
    if b == p:
        return [("replace", a), failover]
    return [failover, ("replace", a), failover]


def move_commands(cluster: Cluster, mv: Migration) -> list[str]:
    """The gnt-instance commands of one job, as hbal writes them."""
    return [f"gnt-instance {command(mv.instance, step)}" for step in move_steps(cluster, mv)]


def move_opcodes(cluster: Cluster, mv: Migration) -> tuple[dict[str, Any], ...]:
    """The opcodes of one job, as htools submits them with -X (iMoveToJob)."""
    return tuple(opcode(mv.instance, step) for step in move_steps(cluster, mv))


def format_jobs(cluster: Cluster, jobsets: Sequence[Sequence[Migration]]) -> str:
    """htools' `formatCmds`: an empty line and `echo jobset` per jobset, `check` per job."""
    lines: list[str] = []
    for jsn, js in enumerate(jobsets, 1):
        for sn, mv in enumerate(js, 1):
            if sn == 1:
                lines += ["", f"echo jobset {jsn}, {len(js)} jobs"]
            lines += [f"  echo job {jsn}/{sn}", "  check"]
            lines += ["  " + cmd for cmd in move_commands(cluster, mv)]
    return "".join(line + "\n" for line in lines)


def plan_commands(
    cluster: Cluster,
    mode: str,
    nodes: Sequence[str],
    jobsets: Sequence[Sequence[Migration]],
) -> str:
    """hsqueeze's command script body for a plan (`mode`: offline, online or none): shrink
    moves, tags and powers off; expand powers on, then moves."""
    if mode == "offline":
        return (
            format_jobs(cluster, jobsets)
            + "\necho Tagging Commands\n"
            + "".join(f"  gnt-node add-tags {n} {STANDBY_AUTO}\n" for n in nodes)
            + "\necho Power Commands\n"
            + "".join(f"  gnt-node power -f off {n}\n" for n in nodes)
        )
    if mode == "online":
        return (
            "echo Power Commands\n"
            + "".join(f"  gnt-node power -f on {n}\n" for n in nodes)
            + format_jobs(cluster, jobsets)
        )
    return "echo Nothing to do"


def plan_job_sets(
    cluster: Cluster,
    mode: str,
    nodes: Sequence[str],
    jobsets: Sequence[Sequence[Migration]],
) -> list[JobSet]:
    """hsqueeze's job sets for -X, in its order: shrink runs the moves' job sets, a tagging set
    per node, then one job setting the nodes offline and powering them off; expand powers on
    first, then moves. The descriptions are hsqueeze's."""
    moves = [
        moving([mv.instance for mv in js], [move_opcodes(cluster, mv) for mv in js])
        for js in jobsets
        if js
    ]
    # No power job without nodes: hsqueeze submits one (expanding when nothing can be
    # powered on), and Ganeti reads an out-of-band command naming no node as one for every
    # node (LUOobCommand).
    if mode == "offline" and nodes:
        tags = [
            JobSet(f"Tagging node {n} with standby", ((tags_opcode(n, [STANDBY_AUTO]),),))
            for n in nodes
        ]
        return [*moves, *tags, JobSet("Powering off nodes", (power_opcodes(nodes, on=False),))]
    if mode == "online" and nodes:
        return [JobSet("Powering on nodes", (power_opcodes(nodes, on=True),)), *moves]
    return moves


def squeezed_cluster(
    state: ClusterState, off: Sequence[str], on: Sequence[str], moves: Sequence[Migration]
) -> Cluster:
    """The cluster after the plan; reported free memory and disk follow the moved instances."""
    after = state.powered(off=off, on=on)
    for mv in moves:
        after = after.relocated(
            mv.instance, mv.target, mv.secondary or after.location(mv.instance)[1]
        )
    return after.snapshot()
