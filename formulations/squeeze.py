"""Exact hsqueeze as a Pyomo MIP: which nodes to power down (or standby nodes to power up).

The program turns a cluster into a `SqueezeProblem`: every node's *room* (memory and VCPUs the
movable instances may use while the probe instance, the N+1 reserve and the fixed load still
fit) and the movable instances grouped into *shapes* (same memory and VCPUs, no exclusion tags).
Instances of one shape are interchangeable, so the model counts them per node (`y[s, n]`)
instead of placing each one: thousands of instances come in a few dozen shapes. An instance
with exclusion tags is a shape of its own (count 1), which keeps its identity where it matters.
DRBD instances (`--move drbd`) keep their identity too: one binary per pair they may end on,
since their N+1 reserve depends on the (primary, secondary) pair.

Sets
    N          nodes that may host instances after the plan (on, candidates, standby)
    NC ⊆ N     nodes whose power state is decided (shrink: candidates; expand: standby)
    S          shapes of movable instances
    IC         (DRBD instance, pair choice)
    E          exclusion tags carried by movable instances
Parameters
    room_*[n]                  what movable instances may use on n (probe already subtracted):
                               counted memory, memory of the *_forth counters, VCPUs
    mem[s], cpu[s], total[s]   a shape's memory, VCPUs and number of instances
    c[s, n]                    instances of shape s on node n now
Variables
    on[n] ∈ {0,1}              node n is powered on after the plan (fixed 1 outside NC)
    y[s, n] ∈ ℤ≥0              instances of shape s on node n after the plan
    out[s, n] ≥ 0              instances of shape s that leave node n (one move each)
    x[i, k] ∈ {0,1}            DRBD instance i ends on its k-th (primary, secondary) choice
    util ∈ ℤ≥0                 the largest memory utilisation of a powered-on node (%)
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyomo.environ as pyo

from solvers import Objective

#: The utilisation objective counts in 1/UTIL_SCALE steps (per cent): an integer stage is
#: fixed exactly and proven optimal far sooner than a continuous min-max.
UTIL_SCALE = 100
SHRINK = "shrink"
EXPAND = "expand"

#: Node states: "on" stays on, "candidate" may be powered down (shrink), "standby" may be
#: powered up (expand). Nodes that stay off are not part of the problem.
NODE_STATES = ("on", "candidate", "standby")


@dataclass(frozen=True, slots=True)
class SqueezeNode:
    """One node as the model sees it; `room_*` already subtracts fixed load and the probe."""

    name: str
    state: str
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


@dataclass(frozen=True)
class SqueezeProblem:
    """Everything the model needs; node indices refer to `nodes`."""

    mode: str  # SHRINK or EXPAND
    nodes: tuple[SqueezeNode, ...]
    shapes: tuple[Shape, ...]
    # (node index, exclusion tag) -> instances with that tag that cannot move off the node
    fixed_tag_counts: Mapping[tuple[int, str], int] = field(default_factory=dict)
    # nodes whose placement-relevant data and current content are equal: interchangeable
    soft_probe: bool = False  # expand fallback: maximise the nodes that host the probe
    mirrored: tuple[MirroredInstance, ...] = ()  # DRBD instances that may move (--move drbd)

    def decided(self) -> list[int]:
        wanted = "candidate" if self.mode == SHRINK else "standby"
        return [i for i, n in enumerate(self.nodes) if n.state == wanted]


def interchangeable_runs(problem: SqueezeProblem) -> list[list[int]]:
    """Runs of decided nodes that no objective or constraint can tell apart.

    Two nodes are interchangeable when their rooms, memory figures and current movable content
    are equal and neither holds tagged instances; swapping them maps plans to plans with equal
    objectives, so `on` may be ordered within a run (symmetry breaking).
    """
    content: dict[int, list[tuple[int, int]]] = defaultdict(list)
    tagged: set[int] = set()
    for s, shape in enumerate(problem.shapes):
        for n, c in shape.counts:
            content[n].append((s, c))
            if shape.exclusion_tags:
                tagged.add(n)
    tagged.update(n for n, _ in problem.fixed_tag_counts)
    for mi in problem.mirrored:
        tagged.update(mi.current)
    runs: dict[Hashable, list[int]] = defaultdict(list)
    for n in problem.decided():
        if n in tagged:
            continue
        node = problem.nodes[n]
        key = (
            node.room_memory_mib,
            node.room_memory_forth_mib,
            node.room_vcpus,
            node.min_memory_mib,
            node.total_memory_mib,
            node.fixed_used_memory_mib,
            node.bare_room_memory_mib,
            node.bare_room_memory_forth_mib,
            node.bare_room_vcpus,
            tuple(sorted(content[n])),
        )
        runs[key].append(n)
    return [r for r in runs.values() if len(r) > 1]


def capacity(node: SqueezeNode, shape: Shape, soft: bool) -> int:
    """Most instances of `shape` the node can take alone (the big-M of the link rows)."""
    rooms = (
        (node.bare_room_memory_mib, node.bare_room_memory_forth_mib, node.bare_room_vcpus)
        if soft
        else (node.room_memory_mib, node.room_memory_forth_mib, node.room_vcpus)
    )
    if node.group and shape.group and node.group != shape.group:
        return 0
    best = shape.total
    for room, size in zip(
        rooms, (shape.memory_mib, shape.memory_forth_mib, shape.vcpus), strict=True
    ):
        if size > 0:
            best = min(best, max(room, 0) // size)
    return max(best, 0)


def build_model(problem: SqueezeProblem) -> pyo.ConcreteModel:
    """The per-node model with aggregated instance counts (see the module docstring)."""
    m = pyo.ConcreteModel(name=f"squeeze_{problem.mode}")
    nodes, shapes = problem.nodes, problem.shapes
    decided = set(problem.decided())
    count = {(s, n): c for s, sh in enumerate(shapes) for n, c in sh.counts}

    m.N = pyo.Set(initialize=range(len(nodes)), ordered=True)
    m.NC = pyo.Set(initialize=sorted(decided), ordered=True)
    m.S = pyo.Set(initialize=range(len(shapes)), ordered=True)
    m.SN_now = pyo.Set(initialize=sorted(count), dimen=2)  # (s, n) with c[s, n] > 0

    m.total = pyo.Param(m.S, initialize={s: shapes[s].total for s in m.S})
    m.c = pyo.Param(m.SN_now, initialize=count)

    def on_bounds(_m: pyo.ConcreteModel, n: int) -> tuple[int, int]:
        return (0, 1) if n in decided else (1, 1)

    m.on = pyo.Var(m.N, domain=pyo.Binary, bounds=on_bounds)
    cap = {(s, n): capacity(nodes[n], shapes[s], problem.soft_probe) for s in m.S for n in m.N}
    # 0 ≤ y[s,n] ≤ cap[s,n] = min(total[s], room[n] / size[s] over memory, memory_forth, VCPUs)
    m.cap = pyo.Param(m.S, m.N, initialize=cap)
    m.y = pyo.Var(m.S, m.N, domain=pyo.NonNegativeIntegers, bounds=lambda m, s, n: (0, cap[s, n]))
    m.out = pyo.Var(
        m.SN_now, domain=pyo.NonNegativeIntegers, bounds=lambda m, s, n: (0, count[s, n])
    )
    m.util = pyo.Var(domain=pyo.NonNegativeIntegers, bounds=(0, UTIL_SCALE))

    # place: Σ_n y[s,n] = total[s]   (every movable instance ends on some node)
    def place_rule(m: pyo.ConcreteModel, s: int) -> object:
        if not len(m.N):
            return pyo.Constraint.Feasible if shapes[s].total == 0 else pyo.Constraint.Infeasible
        return sum(m.y[s, n] for n in m.N) == m.total[s]

    m.place = pyo.Constraint(m.S, rule=place_rule)

    # link: y[s,n] ≤ cap[s,n] · on[n]   (nothing on a powered-down node)
    m.link = pyo.Constraint(m.S, m.NC, rule=lambda m, s, n: m.y[s, n] <= m.cap[s, n] * m.on[n])

    # DRBD pairs (--move drbd): x[i,k] = 1 when instance i ends on its k-th pair choice
    mirrored = problem.mirrored
    m.IC = pyo.Set(
        initialize=[(i, k) for i, mi in enumerate(mirrored) for k in range(len(mi.choices))],
        dimen=2,
    )
    m.x = pyo.Var(m.IC, domain=pyo.Binary)
    as_primary: dict[int, list[tuple[int, int]]] = defaultdict(list)
    touching: dict[int, list[tuple[int, int]]] = defaultdict(list)
    peer_terms: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for i, k in m.IC:
        ch = mirrored[i].choices[k]
        as_primary[ch.primary].append((i, k))
        touching[ch.primary].append((i, k))
        touching[ch.secondary].append((i, k))
        peer_terms[ch.secondary, ch.primary].append((i, k))
    # choose: Σ_k x[i,k] = 1
    m.I = pyo.Set(initialize=range(len(mirrored)), ordered=True)
    m.choose = pyo.Constraint(
        m.I, rule=lambda m, i: sum(m.x[i, k] for k in range(len(mirrored[i].choices))) == 1
    )
    # pair_on: x[i,k] ≤ on[n] for both nodes n of the pair
    m.ICN = pyo.Set(
        initialize=[
            (i, k, n)
            for i, k in m.IC
            for n in (mirrored[i].choices[k].primary, mirrored[i].choices[k].secondary)
            if n in decided
        ],
        dimen=3,
    )
    m.pair_on = pyo.Constraint(m.ICN, rule=lambda m, i, k, n: m.x[i, k] <= m.on[n])

    def load(m: pyo.ConcreteModel, n: int, per_shape: Mapping[int, int], attr: str) -> object:
        drbd = sum(getattr(mirrored[i], attr) * m.x[i, k] for i, k in as_primary.get(n, ()))
        return sum(per_shape[s] * m.y[s, n] for s in m.S) + drbd

    mem_of = {s: shapes[s].memory_mib for s in m.S}
    forth_of = {s: shapes[s].memory_forth_mib for s in m.S}
    cpu_of = {s: shapes[s].vcpus for s in m.S}
    rows = (
        ("memory", mem_of, "memory_mib", "room_memory_mib", "bare_room_memory_mib"),
        (
            "memory_forth",
            forth_of,
            "memory_forth_mib",
            "room_memory_forth_mib",
            "bare_room_memory_forth_mib",
        ),
        ("vcpus", cpu_of, "vcpus", "room_vcpus", "bare_room_vcpus"),
    )
    if problem.soft_probe:
        # host[n] = 1: node n can still host the probe; host[n] ≤ on[n]
        m.host = pyo.Var(m.N, domain=pyo.Binary)
        m.host_on = pyo.Constraint(m.N, rule=lambda m, n: m.host[n] <= m.on[n])
    for row, per_shape, attr, room, bare in rows:
        if problem.soft_probe:
            # row: load[n] ≤ room[n] + (bare[n] − room[n])·(1 − host[n])   (probe if host)
            # row_bare: load[n] ≤ bare[n] · on[n]   (the instances themselves always fit)
            def soft(m, n, per_shape=per_shape, attr=attr, room=room, bare=bare):  # noqa: ANN001, ANN202
                r, b = getattr(nodes[n], room), getattr(nodes[n], bare)
                return load(m, n, per_shape, attr) <= r + (b - r) * (1 - m.host[n])

            def hard(m, n, per_shape=per_shape, attr=attr, bare=bare):  # noqa: ANN001, ANN202
                return load(m, n, per_shape, attr) <= getattr(nodes[n], bare) * m.on[n]

            m.add_component(row, pyo.Constraint(m.N, rule=soft))
            m.add_component(row + "_bare", pyo.Constraint(m.N, rule=hard))
        else:
            # row: load[n] ≤ room[n] · on[n]   (probe, N+1 reserve and fixed load still fit)
            def fit(m, n, per_shape=per_shape, attr=attr, room=room):  # noqa: ANN001, ANN202
                return load(m, n, per_shape, attr) <= getattr(nodes[n], room) * m.on[n]

            m.add_component(row, pyo.Constraint(m.N, rule=fit))

    # n1: load[n] + fixed_peer[n,P] + Σ_{i,k: pair (P,n)} reserve[i]·x[i,k] ≤ n1_room[n]·on[n]
    #   for every primary P that may lean on n (the probe fits beside every failover)
    fixed_peer = {(n, pn): r for n in m.N for pn, r in nodes[n].fixed_peers}
    m.NP = pyo.Set(initialize=sorted(peer_terms), dimen=2)
    m.n1 = pyo.Constraint(
        m.NP,
        rule=lambda m, n, pn: (
            load(m, n, mem_of, "memory_mib")
            + fixed_peer.get((n, pn), 0)
            + sum(mirrored[i].reserve_mib * m.x[i, k] for i, k in peer_terms[n, pn])
            <= nodes[n].n1_room_memory_mib * m.on[n]
        ),
    )
    # disk: Σ_{i,k touching n} disk[i]·x[i,k] ≤ room_disk[n]·on[n]; spindles likewise
    m.ND = pyo.Set(initialize=sorted(touching), ordered=True)
    m.disk = pyo.Constraint(
        m.ND,
        rule=lambda m, n: (
            sum(mirrored[i].disk_mib * m.x[i, k] for i, k in touching[n])
            <= max(nodes[n].room_disk_mib, 0) * m.on[n]
        ),
    )
    m.spindles = pyo.Constraint(
        m.ND,
        rule=lambda m, n: (
            sum(mirrored[i].spindle_use * m.x[i, k] for i, k in touching[n])
            <= max(nodes[n].room_spindles, 0.0) * m.on[n]
        ),
    )

    # still_failing: Σ_s mem[s]·y[s,n] ≥ min_mem[n]   (an N+1-failing node keeps its exemption
    #   only while it keeps failing)
    m.NF = pyo.Set(initialize=[n for n in m.N if nodes[n].min_memory_mib > 0], ordered=True)
    m.still_failing = pyo.Constraint(
        m.NF,
        rule=lambda m, n: load(m, n, mem_of, "memory_mib") >= nodes[n].min_memory_mib * m.on[n],
    )

    # moved: out[s,n] ≥ c[s,n] − y[s,n]   (each instance leaving its node is one migration)
    m.moved = pyo.Constraint(m.SN_now, rule=lambda m, s, n: m.out[s, n] >= m.c[s, n] - m.y[s, n])
    # emptied: out[s,n] ≥ c[s,n] · (1 − on[n])   (implied, but tightens the relaxation)
    m.SN_dec = pyo.Set(initialize=[(s, n) for (s, n) in sorted(count) if n in decided], dimen=2)
    m.emptied = pyo.Constraint(
        m.SN_dec, rule=lambda m, s, n: m.out[s, n] >= m.c[s, n] * (1 - m.on[n])
    )

    # excl: K·Σ(arriving tagged e at n) + Σ(staying tagged e at n) + fixed[n,e] ≤ max(K, 1)
    #   with K = instances tagged e on n now: no tagged instance moves next to a namesake
    tags = sorted(
        {e for sh in shapes for e in sh.exclusion_tags}
        | {e for mi in mirrored for e in mi.exclusion_tags}
    )
    rows = []
    for e in tags:
        ss = [s for s, sh in enumerate(shapes) if e in sh.exclusion_tags]
        ii = [i for i, mi in enumerate(mirrored) if e in mi.exclusion_tags]
        for n in m.N:
            arriving = [m.y[s, n] for s in ss if (s, n) not in count]
            staying = [m.y[s, n] for s in ss if (s, n) in count]
            k = problem.fixed_tag_counts.get((n, e), 0) + sum(count.get((s, n), 0) for s in ss)
            for i in ii:
                mi = mirrored[i]
                k += mi.current[0] == n
                for i2, kk in as_primary.get(n, ()):
                    if i2 == i:
                        # only the unchanged pair stays: a new secondary re-places the
                        # instance, and the checker re-tests its primary
                        ch = mi.choices[kk]
                        same = (ch.primary, ch.secondary) == mi.current
                        (staying if same else arriving).append(m.x[i, kk])
            if arriving:
                rows.append((e, n, k, arriving, staying, problem.fixed_tag_counts.get((n, e), 0)))
    m.EN = pyo.Set(initialize=[(r[0], r[1]) for r in rows], dimen=2)
    by_en = {(r[0], r[1]): r for r in rows}

    def excl_rule(m: pyo.ConcreteModel, e: str, n: int) -> object:
        _, _, k, arriving, staying, fixed = by_en[e, n]
        kk = max(k, 1)
        return kk * sum(arriving) + sum(staying) + fixed <= kk

    m.excl = pyo.Constraint(m.EN, rule=excl_rule)

    # util ≥ K·(fixed_used[n]·on[n] + Σ_s mem[s]·y[s,n]) / t_mem[n],  K = UTIL_SCALE
    #   (evenness: the largest memory utilisation of a powered-on node; no big-M needed, as a
    #   powered-down node has y = 0 and on = 0)
    def util_rule(m: pyo.ConcreteModel, n: int) -> object:
        node = nodes[n]
        if node.total_memory_mib <= 0:
            return pyo.Constraint.Skip
        used = node.fixed_used_memory_mib * m.on[n] + load(m, n, mem_of, "memory_mib")
        return m.util >= UTIL_SCALE / node.total_memory_mib * used

    m.util_def = pyo.Constraint(m.N, rule=util_rule)

    # symmetry: on[a] ≥ on[b] for interchangeable nodes a before b
    pairs = [(r[k], r[k + 1]) for r in interchangeable_runs(problem) for k in range(len(r) - 1)]
    m.SYM = pyo.Set(initialize=pairs, dimen=2)
    m.symmetry = pyo.Constraint(m.SYM, rule=lambda m, a, b: m.on[a] >= m.on[b])
    return m


def objectives(model: pyo.ConcreteModel, problem: SqueezeProblem) -> list[Objective]:
    """Stage order: node count, then moves, then evenness (soft mode: probe hosts first).

    Stages whose expression is a constant (no candidates, nothing placed) are left out.
    """
    nodes_expr = sum(model.on[n] for n in model.NC)
    drbd_cost = sum(
        mi.choices[k].cost * model.x[i, k]
        for i, mi in enumerate(problem.mirrored)
        for k in range(len(mi.choices))
        if mi.choices[k].cost
    )
    moves = Objective("moves", sum(model.out[k] for k in model.SN_now) + drbd_cost, "min")
    util = Objective("max_memory_percent", model.util, "min")
    if problem.mode == SHRINK:
        first = Objective("nodes_freed", len(model.NC) - nodes_expr, "max")
        stages = [first, moves, util]
    elif problem.soft_probe:
        host = Objective("nodes_hosting_probe", sum(model.host[n] for n in model.N), "max")
        stages = [host, util, moves]
    else:
        stages = [Objective("nodes_powered_on", nodes_expr, "min"), moves, util]
    return [o for o in stages if not _constant(o.expr)]


def _constant(expr: object) -> bool:
    return isinstance(expr, (int, float)) or bool(getattr(expr, "is_fixed", lambda: False)())


# -- the type aggregate: the volume bound and the decomposition's first step -----------------


def node_types(problem: SqueezeProblem) -> list[list[int]]:
    """Nodes with equal state and rooms, in first-appearance order (tags are ignored)."""
    types: dict[Hashable, list[int]] = {}
    for n, node in enumerate(problem.nodes):
        key = (
            node.state == "on",
            node.room_memory_mib,
            node.room_memory_forth_mib,
            node.room_vcpus,
            node.min_memory_mib,
        )
        types.setdefault(key, []).append(n)
    return list(types.values())


def build_type_aggregate(problem: SqueezeProblem) -> pyo.ConcreteModel:
    """A relaxation over node types: capacities pooled per type.

    Sets T (node types), S; w[t] ∈ ℤ = type-t nodes powered on, Y[s,t] ∈ ℤ≥0 = shape-s
    instances on type t. Its first stage bounds the per-node optimum (nodes freed from above,
    nodes powered on from below) and solves in well under a second at thousands of nodes;
    its second stage (instances that must change type) bounds the moves from below.
    `m.stages` holds the two objectives for `solve_lexicographic`.
    """
    types = node_types(problem)
    shapes, nodes = problem.shapes, problem.nodes
    m = pyo.ConcreteModel(name=f"squeeze_types_{problem.mode}")
    m.T = pyo.Set(initialize=range(len(types)), ordered=True)
    m.S = pyo.Set(initialize=range(len(shapes)), ordered=True)
    first = {t: nodes[types[t][0]] for t in m.T}
    fixed_on = {t: sum(1 for n in types[t] if nodes[n].state == "on") for t in m.T}
    type_of = {n: t for t in m.T for n in types[t]}

    # fixed_on[t] ≤ w[t] ≤ |t|
    m.w = pyo.Var(
        m.T, domain=pyo.NonNegativeIntegers, bounds=lambda m, t: (fixed_on[t], len(types[t]))
    )
    m.Y = pyo.Var(
        m.S, m.T, domain=pyo.NonNegativeIntegers, bounds=lambda m, s, t: (0, shapes[s].total)
    )
    # place: Σ_t Y[s,t] = total[s]
    m.place = pyo.Constraint(m.S, rule=lambda m, s: sum(m.Y[s, t] for t in m.T) == shapes[s].total)
    # mem: Σ_s mem[s]·Y[s,t] ≤ room_mem[t] · w[t]
    m.memory = pyo.Constraint(
        m.T,
        rule=lambda m, t: (
            sum(shapes[s].memory_mib * m.Y[s, t] for s in m.S) <= first[t].room_memory_mib * m.w[t]
        ),
    )
    # mem_forth: Σ_s mem_forth[s]·Y[s,t] ≤ room_mem_forth[t] · w[t]
    m.memory_forth = pyo.Constraint(
        m.T,
        rule=lambda m, t: (
            sum(shapes[s].memory_forth_mib * m.Y[s, t] for s in m.S)
            <= first[t].room_memory_forth_mib * m.w[t]
        ),
    )
    # cpu: Σ_s cpu[s]·Y[s,t] ≤ room_cpu[t] · w[t]
    m.vcpus = pyo.Constraint(
        m.T,
        rule=lambda m, t: (
            sum(shapes[s].vcpus * m.Y[s, t] for s in m.S) <= first[t].room_vcpus * m.w[t]
        ),
    )
    # leave[s,t] ≥ c[s,t] − Y[s,t]: instances that must leave type t (a bound on moves)
    now = defaultdict(int)
    for s, sh in enumerate(shapes):
        for n, c in sh.counts:
            now[s, type_of[n]] += c
    m.leave = pyo.Var(
        m.S, m.T, domain=pyo.NonNegativeIntegers, bounds=lambda m, s, t: (0, now[s, t])
    )
    m.leaving = pyo.Constraint(
        m.S, m.T, rule=lambda m, s, t: m.leave[s, t] >= now[s, t] - m.Y[s, t]
    )
    decided = sum(len(types[t]) - fixed_on[t] for t in m.T)
    powered = sum(m.w[t] - fixed_on[t] for t in m.T)
    if problem.mode == SHRINK:
        first = Objective("nodes_freed", decided - powered, "max")
    else:
        first = Objective("nodes_powered_on", powered, "min")
    homeless = sum(sh.homeless for sh in shapes)
    m.stages = [first, Objective("moves", homeless + sum(m.leave[k] for k in m.leave), "min")]
    m.types = types
    return m


def evenness_cut(
    model: pyo.ConcreteModel, problem: SqueezeProblem, nodes_on: int
) -> tuple[Any, float, None] | None:
    """A valid row (expr, lb, ub) for the utilisation stage once at most `nodes_on` nodes are on.

    From util·t_mem[n] ≥ K·(fixed_used[n]·on[n] + load[n]) on every node, summed:
    util · T ≥ K · (Σ_n fixed_used[n]·on[n] + Σ all movable memory), with T the largest
    total memory `nodes_on` nodes can have (the always-on ones plus the biggest others).
    It lifts the relaxation's bound to the average utilisation, which the per-node rows
    alone do not see.
    """
    nodes = problem.nodes
    fixed = [n.total_memory_mib for n in nodes if n.state == "on"]
    others = sorted((n.total_memory_mib for n in nodes if n.state != "on"), reverse=True)
    cap = sum(fixed) + sum(others[: max(nodes_on - len(fixed), 0)])
    if cap <= 0:
        return None
    movable = sum(sh.memory_mib * sh.total for sh in problem.shapes) + sum(
        mi.memory_mib for mi in problem.mirrored
    )
    used = sum(nd.fixed_used_memory_mib * model.on[n] for n, nd in enumerate(nodes))
    # evenness_cut: util − K · (Σ_n fixed_used[n]·on[n] + Σ movable memory) / T ≥ 0
    return (model.util - UTIL_SCALE / cap * (used + movable), 0.0, None)
