"""Exact hsqueeze as a Pyomo MIP: which nodes to power down (or standby nodes to power up).

The data come from `model.squeeze.build_problem` (docs/squeeze.md): every node's *room*
(memory and VCPUs the movable instances may use while the probe instance, the N+1 reserve and
the fixed load still fit) and the movable instances grouped into *shapes* (same memory and
VCPUs, no exclusion tags). Instances of one shape are interchangeable, so the model counts them
per node (`y[s, n]`) instead of placing each one: thousands of instances come in a few dozen
shapes. An instance with exclusion tags is a shape of its own (count 1), which keeps its
identity where it matters. DRBD instances (`--move drbd`) keep their identity too: one binary
per pair they may end on, since their N+1 reserve depends on the (primary, secondary) pair.

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
    host[n] ∈ {0,1}            (expand fallback) node n can still host the probe
    util ∈ ℤ≥0                 the largest memory utilisation of a powered-on node (%)

Two models, each with the contract of formulations/__init__.py: the per-node model (`build`,
`objectives`, `solution`) and the node-type aggregate that bounds it and starts the
decomposition of very large clusters (`build_type_aggregate`, `type_aggregate_objectives`,
`type_aggregate_solution`). `evenness_cut` is a row the solve strategy adds once the node
count is fixed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable
from typing import Any

import pyomo.core as pyo
from pyomo.common.collections import ComponentMap

from formulations.deadline import build_families
from formulations.objective import Objective
from model.squeeze import (
    SHRINK,
    Shape,
    SqueezeAssignment,
    SqueezeNode,
    SqueezeProblem,
    TypeShares,
)

#: The utilisation objective counts in 1/UTIL_SCALE steps (per cent): an integer stage is
#: fixed exactly and proven optimal far sooner than a continuous min-max.
UTIL_SCALE = 100

#: The three rows every node has: (row name, size attribute of shapes and DRBD instances,
#: room attribute of the node, the same room without the probe).
_ROWS = (
    ("memory", "memory_mib", "room_memory_mib", "bare_room_memory_mib"),
    ("memory_forth", "memory_forth_mib", "room_memory_forth_mib", "bare_room_memory_forth_mib"),
    ("vcpus", "vcpus", "room_vcpus", "bare_room_vcpus"),
)


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


def _load(m: pyo.ConcreteModel, problem: SqueezeProblem, n: int, size: str) -> Any:
    """Σ_s size[s]·y[s,n] + Σ_{(i,k): n primary of choice k} size[i]·x[i,k]: what the movable
    instances take from one of node n's rows (`size` names the attribute of both kinds)."""
    mirrored = problem.mirrored
    drbd = sum(
        getattr(mirrored[i], size) * m.x[i, k] for i, k in problem.choices_as_primary.get(n, ())
    )
    return sum(getattr(problem.shapes[s], size) * m.y[s, n] for s in m.S) + drbd


# -- the per-node model ------------------------------------------------------------------------


def define_sets(m: pyo.ConcreteModel, problem: SqueezeProblem) -> None:
    """N, NC, S and the (shape, node) pairs with instances now; total[s] and c[s,n]."""
    count = problem.counts
    m.N = pyo.Set(initialize=range(len(problem.nodes)), ordered=True)
    m.NC = pyo.Set(initialize=sorted(problem.decided()), ordered=True)
    m.S = pyo.Set(initialize=range(len(problem.shapes)), ordered=True)
    m.SN_now = pyo.Set(initialize=sorted(count), dimen=2)  # (s, n) with c[s, n] > 0
    m.total = pyo.Param(m.S, initialize={s: problem.shapes[s].total for s in m.S})
    m.c = pyo.Param(m.SN_now, initialize=count)


def define_placement(m: pyo.ConcreteModel, problem: SqueezeProblem) -> None:
    """Σ_n y[s,n] = total[s] and 0 ≤ y[s,n] ≤ cap[s,n]·on[n]: every movable instance ends on a
    node that stays on (or is powered on), at most as many as fit there alone; on[n] = 1
    outside NC."""
    decided = set(problem.decided())

    def on_bounds(_m: pyo.ConcreteModel, n: int) -> tuple[int, int]:
        return (0, 1) if n in decided else (1, 1)

    m.on = pyo.Var(m.N, domain=pyo.Binary, bounds=on_bounds)
    soft = problem.soft_probe
    cap = {(s, n): capacity(problem.nodes[n], problem.shapes[s], soft) for s in m.S for n in m.N}
    # 0 ≤ y[s,n] ≤ cap[s,n] = min(total[s], room[n] / size[s] over memory, memory_forth, VCPUs)
    m.cap = pyo.Param(m.S, m.N, initialize=cap)
    m.y = pyo.Var(m.S, m.N, domain=pyo.NonNegativeIntegers, bounds=lambda m, s, n: (0, cap[s, n]))

    def place_rule(m: pyo.ConcreteModel, s: int) -> object:
        if not len(m.N):
            total = problem.shapes[s].total
            return pyo.Constraint.Feasible if total == 0 else pyo.Constraint.Infeasible
        return sum(m.y[s, n] for n in m.N) == m.total[s]

    # place: Σ_n y[s,n] = total[s]
    m.place = pyo.Constraint(m.S, rule=place_rule)
    # link: y[s,n] ≤ cap[s,n] · on[n]
    m.link = pyo.Constraint(m.S, m.NC, rule=lambda m, s, n: m.y[s, n] <= m.cap[s, n] * m.on[n])


def define_pairs(m: pyo.ConcreteModel, problem: SqueezeProblem) -> None:
    """Σ_k x[i,k] = 1 and x[i,k] ≤ on[n] for both nodes n of choice k: every DRBD instance
    ends on exactly one of its pairs, both of whose nodes stay on."""
    mirrored = problem.mirrored
    decided = set(problem.decided())
    m.IC = pyo.Set(initialize=list(problem.choices), dimen=2)
    m.x = pyo.Var(m.IC, domain=pyo.Binary)
    m.I = pyo.Set(initialize=range(len(mirrored)), ordered=True)
    # choose: Σ_k x[i,k] = 1
    m.choose = pyo.Constraint(
        m.I, rule=lambda m, i: sum(m.x[i, k] for k in range(len(mirrored[i].choices))) == 1
    )
    m.ICN = pyo.Set(
        initialize=[
            (i, k, n)
            for i, k in m.IC
            for n in (mirrored[i].choices[k].primary, mirrored[i].choices[k].secondary)
            if n in decided
        ],
        dimen=3,
    )
    # pair_on: x[i,k] ≤ on[n]
    m.pair_on = pyo.Constraint(m.ICN, rule=lambda m, i, k, n: m.x[i, k] <= m.on[n])


def define_capacity(m: pyo.ConcreteModel, problem: SqueezeProblem) -> None:
    """load[n] ≤ room[n]·on[n] for memory, memory_forth and VCPUs: the probe, the N+1 reserve
    and the fixed load still fit on every node that stays on.

    Expand fallback (soft probe): load[n] ≤ room[n] + (bare[n] − room[n])·(1 − host[n]) and
    load[n] ≤ bare[n]·on[n], host[n] ≤ on[n]: the probe fits where host[n] = 1, the instances
    themselves everywhere.
    """
    nodes = problem.nodes
    if problem.soft_probe:
        m.host = pyo.Var(m.N, domain=pyo.Binary)
        # host_on: host[n] ≤ on[n]
        m.host_on = pyo.Constraint(m.N, rule=lambda m, n: m.host[n] <= m.on[n])
    for row, size, room, bare in _ROWS:
        if problem.soft_probe:

            def soft(m, n, size=size, room=room, bare=bare):  # noqa: ANN001, ANN202
                r, b = getattr(nodes[n], room), getattr(nodes[n], bare)
                return _load(m, problem, n, size) <= r + (b - r) * (1 - m.host[n])

            def hard(m, n, size=size, bare=bare):  # noqa: ANN001, ANN202
                return _load(m, problem, n, size) <= getattr(nodes[n], bare) * m.on[n]

            # row: load[n] ≤ room[n] + (bare[n] − room[n])·(1 − host[n])
            m.add_component(row, pyo.Constraint(m.N, rule=soft))
            # row_bare: load[n] ≤ bare[n] · on[n]
            m.add_component(row + "_bare", pyo.Constraint(m.N, rule=hard))
        else:

            def fit(m, n, size=size, room=room):  # noqa: ANN001, ANN202
                return _load(m, problem, n, size) <= getattr(nodes[n], room) * m.on[n]

            # row: load[n] ≤ room[n] · on[n]
            m.add_component(row, pyo.Constraint(m.N, rule=fit))


def define_n1(m: pyo.ConcreteModel, problem: SqueezeProblem, shared_load: bool = True) -> None:
    """load[n] + fixed_peer[n,P] + Σ_{(i,k): pair (P,n)} reserve[i]·x[i,k] ≤ n1_room[n]·on[n]
    for every primary P that may lean on n: the probe still fits beside every failover onto n
    (DRBD moves).

    With `shared_load`, load[n] is load_mem[n] = Σ_s mem[s]·y[s,n] + Σ_{(i,k): n primary of k}
    mem[i]·x[i,k], one integer variable per node with its defining row, shared by the node's
    rows: written out in each of them, node n's load (every shape and every DRBD choice with n
    as primary) is most of the model, about a million terms on 64 nodes with 62 pairs whose
    build and copy into CP-SAT take 21 s (docs/reliability.md, issue 40); shared, about
    35,000, built in under a second. Integer because sizes are whole MiB (CP-SAT takes no
    continuous variable); 0 ≤ load_mem[n] ≤ max(room[n], bare_room[n], 0), which the capacity
    rows already impose on the load. The same rows either way, but CP-SAT proves less from
    the shared form in a long solve (on those 64 nodes, 39 nodes freed with bound 41 at 120 s
    where the written-out rows reach bound 39; docs/squeeze.md), so the strategy writes the
    load out where its time allows."""
    nodes, mirrored = problem.nodes, problem.mirrored
    peer_terms = problem.choices_by_pair
    fixed_peer = {(n, pn): r for n in m.N for pn, r in nodes[n].fixed_peers}
    m.NP = pyo.Set(initialize=sorted(peer_terms), dimen=2)
    if shared_load:
        m.NL = pyo.Set(initialize=sorted({n for n, _ in peer_terms}), ordered=True)

        def load_bounds(_m: pyo.ConcreteModel, n: int) -> tuple[int, int]:
            node = nodes[n]
            return (0, max(node.room_memory_mib, node.bare_room_memory_mib, 0))

        m.load_mem = pyo.Var(m.NL, domain=pyo.NonNegativeIntegers, bounds=load_bounds)
        # load_mem_def: load_mem[n] = Σ_s mem[s]·y[s,n] + Σ mem[i]·x[i,k] (n primary of k)
        m.load_mem_def = pyo.Constraint(
            m.NL, rule=lambda m, n: m.load_mem[n] == _load(m, problem, n, "memory_mib")
        )

    def load(n: int) -> Any:
        return m.load_mem[n] if shared_load else _load(m, problem, n, "memory_mib")

    # n1: load[n] + fixed_peer[n,P] + Σ reserve[i]·x[i,k] ≤ n1_room[n] · on[n]
    m.n1 = pyo.Constraint(
        m.NP,
        rule=lambda m, n, pn: (
            load(n)
            + fixed_peer.get((n, pn), 0)
            + sum(mirrored[i].reserve_mib * m.x[i, k] for i, k in peer_terms[n, pn])
            <= nodes[n].n1_room_memory_mib * m.on[n]
        ),
    )


def n1_terms(problem: SqueezeProblem, shared_load: bool = True) -> int:
    """The terms of `define_n1`'s rows, counted before any is built: with DRBD pairs, most of
    the model (on 64 nodes with 62 pairs 35,536 shared, 1,014,752 written out), whose build
    and copy into the solver cost about the same per term; the strategy weighs it against
    its time limit."""
    shapes = len(problem.shapes)
    pairs = problem.choices_by_pair

    def load_terms(n: int) -> int:
        return shapes + len(problem.choices_as_primary.get(n, ()))

    if not shared_load:
        return sum(load_terms(n) + len(terms) for (n, _), terms in pairs.items())
    defining = sum(1 + load_terms(n) for n in {n for n, _ in pairs})
    return defining + sum(1 + len(terms) for terms in pairs.values())


def define_storage(m: pyo.ConcreteModel, problem: SqueezeProblem) -> None:
    """Σ_{(i,k) touching n} disk[i]·x[i,k] ≤ room_disk[n]·on[n], and the same for spindle use:
    the disks of DRBD instances that move fit on both nodes of their pair."""
    nodes, mirrored = problem.nodes, problem.mirrored
    touching = problem.choices_touching
    m.ND = pyo.Set(initialize=sorted(touching), ordered=True)
    # disk: Σ disk[i]·x[i,k] ≤ max(room_disk[n], 0) · on[n]
    m.disk = pyo.Constraint(
        m.ND,
        rule=lambda m, n: (
            sum(mirrored[i].disk_mib * m.x[i, k] for i, k in touching[n])
            <= max(nodes[n].room_disk_mib, 0) * m.on[n]
        ),
    )
    # spindles: Σ spindle_use[i]·x[i,k] ≤ max(room_spindles[n], 0) · on[n]
    m.spindles = pyo.Constraint(
        m.ND,
        rule=lambda m, n: (
            sum(mirrored[i].spindle_use * m.x[i, k] for i, k in touching[n])
            <= max(nodes[n].room_spindles, 0.0) * m.on[n]
        ),
    )


def define_still_failing(m: pyo.ConcreteModel, problem: SqueezeProblem) -> None:
    """Σ_s mem[s]·y[s,n] ≥ min_mem[n]·on[n]: a node that fails N+1 keeps htools' exemption only
    while it keeps failing."""
    nodes = problem.nodes
    m.NF = pyo.Set(initialize=[n for n in m.N if nodes[n].min_memory_mib > 0], ordered=True)
    # still_failing: load[n] ≥ min_mem[n] · on[n]
    m.still_failing = pyo.Constraint(
        m.NF,
        rule=lambda m, n: _load(m, problem, n, "memory_mib") >= nodes[n].min_memory_mib * m.on[n],
    )


def define_moves(m: pyo.ConcreteModel, problem: SqueezeProblem) -> None:
    """out[s,n] ≥ c[s,n] − y[s,n] and out[s,n] ≥ c[s,n]·(1 − on[n]), 0 ≤ out[s,n] ≤ c[s,n]:
    each instance that leaves its node is one migration (the second row is implied but
    tightens the relaxation)."""
    count = problem.counts
    decided = set(problem.decided())
    m.out = pyo.Var(
        m.SN_now, domain=pyo.NonNegativeIntegers, bounds=lambda m, s, n: (0, count[s, n])
    )
    # moved: out[s,n] ≥ c[s,n] − y[s,n]
    m.moved = pyo.Constraint(m.SN_now, rule=lambda m, s, n: m.out[s, n] >= m.c[s, n] - m.y[s, n])
    m.SN_dec = pyo.Set(initialize=[(s, n) for (s, n) in sorted(count) if n in decided], dimen=2)
    # emptied: out[s,n] ≥ c[s,n] · (1 − on[n])
    m.emptied = pyo.Constraint(
        m.SN_dec, rule=lambda m, s, n: m.out[s, n] >= m.c[s, n] * (1 - m.on[n])
    )


def _exclusion_rows(m: pyo.ConcreteModel, problem: SqueezeProblem) -> list[tuple]:
    """(tag, node, K, arriving terms, staying terms, fixed count) for every node where an
    instance carrying the tag may arrive; K = instances with the tag on the node now."""
    shapes, mirrored = problem.shapes, problem.mirrored
    count = problem.counts
    as_primary = problem.choices_as_primary
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
    return rows


def define_exclusion(m: pyo.ConcreteModel, problem: SqueezeProblem) -> None:
    """K·Σ(arriving tagged e at n) + Σ(staying tagged e at n) + fixed[n,e] ≤ max(K, 1), with
    K = instances tagged e on n now: no instance with exclusion tag e moves next to a primary
    that carries e."""
    rows = _exclusion_rows(m, problem)
    m.EN = pyo.Set(initialize=[(r[0], r[1]) for r in rows], dimen=2)
    by_en = {(r[0], r[1]): r for r in rows}

    def excl_rule(m: pyo.ConcreteModel, e: str, n: int) -> object:
        _, _, k, arriving, staying, fixed = by_en[e, n]
        kk = max(k, 1)
        return kk * sum(arriving) + sum(staying) + fixed <= kk

    # excl: max(K,1)·Σ arriving + Σ staying + fixed[n,e] ≤ max(K,1)
    m.excl = pyo.Constraint(m.EN, rule=excl_rule)


def define_evenness(m: pyo.ConcreteModel, problem: SqueezeProblem) -> None:
    """t_mem[n]·util ≥ K·(fixed_used[n]·on[n] + Σ_s mem[s]·y[s,n]) with K = UTIL_SCALE and
    0 ≤ util ≤ K: util is the largest memory utilisation of a powered-on node (no big-M
    needed, as a powered-down node has y = 0 and on = 0)."""
    nodes = problem.nodes
    m.util = pyo.Var(domain=pyo.NonNegativeIntegers, bounds=(0, UTIL_SCALE))

    def util_rule(m: pyo.ConcreteModel, n: int) -> object:
        node = nodes[n]
        if node.total_memory_mib <= 0:
            return pyo.Constraint.Skip
        used = node.fixed_used_memory_mib * m.on[n] + _load(m, problem, n, "memory_mib")
        # multiplied through by t_mem[n]: 1/t_mem[n] is no fraction CP-SAT takes once a node
        # has more than 10^6 MiB (benchmarks/large_numbers.py; issue 40, item 2)
        return node.total_memory_mib * m.util >= UTIL_SCALE * used

    # util_def: t_mem[n] · util ≥ K · (fixed_used[n]·on[n] + load[n])
    m.util_def = pyo.Constraint(m.N, rule=util_rule)


def define_symmetry(m: pyo.ConcreteModel, problem: SqueezeProblem) -> None:
    """on[a] ≥ on[b] for interchangeable nodes a before b (`interchangeable_runs`)."""
    pairs = [(r[k], r[k + 1]) for r in interchangeable_runs(problem) for k in range(len(r) - 1)]
    m.SYM = pyo.Set(initialize=pairs, dimen=2)
    # symmetry: on[a] ≥ on[b]
    m.symmetry = pyo.Constraint(m.SYM, rule=lambda m, a, b: m.on[a] >= m.on[b])


def build(
    problem: SqueezeProblem, deadline: float | None = None, *, shared_load: bool = True
) -> pyo.ConcreteModel:
    """The per-node model with aggregated instance counts (see the module docstring);
    `shared_load`: as `define_n1`.

    The families are added in this order because the solvers number rows and columns as they
    meet them: another order is the same model, but may break ties differently. Past
    `deadline` (perf_counter) the build stops between two families with
    formulations.deadline.OutOfTime (the N+1 rows of 64 nodes with 62 drbd pairs took 5-10 s
    of a 10 s limit, loaded).
    """
    m = pyo.ConcreteModel(name=f"squeeze_{problem.mode}")
    families = (
        define_sets,
        define_placement,
        define_pairs,
        define_capacity,
        define_n1,
        define_storage,
        define_still_failing,
        define_moves,
        define_exclusion,
        define_evenness,
        define_symmetry,
    )

    def family(f: Any) -> Any:
        if f is define_n1:
            return lambda: define_n1(m, problem, shared_load)
        return lambda: f(m, problem)

    build_families([(f.__name__.removeprefix("define_"), family(f)) for f in families], deadline)
    return m


def current_start(m: pyo.ConcreteModel, problem: SqueezeProblem) -> ComponentMap:
    """The cluster as it is, as values of the per-node model's variables: every node on, each
    shape's instances where they are, each DRBD instance on its current pair, no move. A hint
    for CP-SAT's first solve (a start it repairs where the probe's rows break it): on 64 nodes
    with 62 drbd pairs it found no plan at all in 7 s without one (docs/squeeze.md)."""
    start = ComponentMap((m.on[n], 1) for n in m.N)  # Pyomo's variables are not hashable
    for s in m.S:
        for n in m.N:
            start[m.y[s, n]] = problem.counts.get((s, n), 0)
    for k in m.SN_now:
        start[m.out[k]] = 0
    for i, k in m.IC:
        ch = problem.mirrored[i].choices[k]
        start[m.x[i, k]] = int((ch.primary, ch.secondary) == problem.mirrored[i].current)
    for n in getattr(m, "NL", ()):
        load = sum(problem.shapes[s].memory_mib * problem.counts.get((s, n), 0) for s in m.S)
        load += sum(
            problem.mirrored[i].memory_mib * start[m.x[i, k]]
            for i, k in problem.choices_as_primary.get(n, ())
        )
        start[m.load_mem[n]] = load
    return start


def objectives(m: pyo.ConcreteModel, problem: SqueezeProblem) -> list[Objective]:
    """Stage order: node count, then moves, then evenness (soft mode: probe hosts first).

    Stages whose expression is a constant (no candidates, nothing placed) are left out.
    """
    nodes_expr = sum(m.on[n] for n in m.NC)
    drbd_cost = sum(
        mi.choices[k].cost * m.x[i, k]
        for i, mi in enumerate(problem.mirrored)
        for k in range(len(mi.choices))
        if mi.choices[k].cost
    )
    moves = Objective("moves", sum(m.out[k] for k in m.SN_now) + drbd_cost, "min")
    util = Objective("max_memory_percent", m.util, "min")
    if problem.mode == SHRINK:
        first = Objective("nodes_freed", len(m.NC) - nodes_expr, "max")
        stages = [first, moves, util]
    elif problem.soft_probe:
        host = Objective("nodes_hosting_probe", sum(m.host[n] for n in m.N), "max")
        stages = [host, util, moves]
    else:
        stages = [Objective("nodes_powered_on", nodes_expr, "min"), moves, util]
    return [o for o in stages if not _constant(o.expr)]


def _constant(expr: object) -> bool:
    return isinstance(expr, (int, float)) or bool(getattr(expr, "is_fixed", lambda: False)())


def stage_value(objective: Objective) -> float:
    """An objective's value at the solution loaded in the model."""
    return float(pyo.value(objective.expr))


def solution(m: pyo.ConcreteModel, problem: SqueezeProblem) -> SqueezeAssignment:
    """Power states, the counts y[s,n] > 0 and each DRBD instance's chosen pair."""
    on = {n: bool(round(pyo.value(m.on[n]))) for n in m.N}
    pairs = {i: k for i, k in m.IC if (m.x[i, k].value or 0) > 0.5}
    counts = {}
    for s in m.S:
        for n in m.N:
            v = m.y[s, n].value
            k = int(round(v)) if v is not None else 0
            if k:
                counts[s, n] = k
    return SqueezeAssignment(on, counts, pairs)


def evenness_cut(
    m: pyo.ConcreteModel, problem: SqueezeProblem, nodes_on: int
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
    used = sum(nd.fixed_used_memory_mib * m.on[n] for n, nd in enumerate(nodes))
    # evenness_cut: T · util − K · (Σ_n fixed_used[n]·on[n] + Σ movable memory) ≥ 0
    return (cap * m.util - UTIL_SCALE * (used + movable), 0.0, None)


# -- the type aggregate: the volume bound and the decomposition's first step -----------------
#
# Sets T (node types: nodes of equal state and rooms), S. Variables w[t] ∈ ℤ = type-t nodes
# powered on, Y[s,t] ∈ ℤ≥0 = shape-s instances on type t, leave[s,t] ∈ ℤ≥0 = instances that
# must leave type t. Capacities are pooled per type, so the model is a relaxation of the
# per-node one: its first stage bounds the per-node optimum (nodes freed from above, nodes
# powered on from below) and solves in well under a second at thousands of nodes; its second
# stage (instances that must change type) bounds the moves from below.


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


def _fixed_on(problem: SqueezeProblem, types: list[list[int]]) -> list[int]:
    """Per type: its nodes that stay on whatever the plan."""
    return [sum(1 for n in members if problem.nodes[n].state == "on") for members in types]


def _now_by_type(problem: SqueezeProblem, types: list[list[int]]) -> dict[tuple[int, int], int]:
    """(shape, type) -> instances of the shape on nodes of the type now."""
    type_of = {n: t for t, members in enumerate(types) for n in members}
    now: dict[tuple[int, int], int] = defaultdict(int)
    for s, sh in enumerate(problem.shapes):
        for n, c in sh.counts:
            now[s, type_of[n]] += c
    return now


def define_type_placement(
    m: pyo.ConcreteModel, problem: SqueezeProblem, types: list[list[int]]
) -> None:
    """fixed_on[t] ≤ w[t] ≤ |t|, 0 ≤ Y[s,t] ≤ total[s] and Σ_t Y[s,t] = total[s]: every
    instance goes to some type, and each type keeps its always-on nodes on."""
    shapes = problem.shapes
    m.T = pyo.Set(initialize=range(len(types)), ordered=True)
    m.S = pyo.Set(initialize=range(len(shapes)), ordered=True)
    fixed_on = _fixed_on(problem, types)
    m.w = pyo.Var(
        m.T, domain=pyo.NonNegativeIntegers, bounds=lambda m, t: (fixed_on[t], len(types[t]))
    )
    m.Y = pyo.Var(
        m.S, m.T, domain=pyo.NonNegativeIntegers, bounds=lambda m, s, t: (0, shapes[s].total)
    )
    # place: Σ_t Y[s,t] = total[s]
    m.place = pyo.Constraint(m.S, rule=lambda m, s: sum(m.Y[s, t] for t in m.T) == shapes[s].total)


def define_type_capacity(
    m: pyo.ConcreteModel, problem: SqueezeProblem, types: list[list[int]]
) -> None:
    """Σ_s size[s]·Y[s,t] ≤ room[t]·w[t] for memory, memory_forth and VCPUs: a type's
    powered-on nodes pool their rooms."""
    shapes = problem.shapes
    first = {t: problem.nodes[types[t][0]] for t in m.T}
    # memory: Σ_s mem[s]·Y[s,t] ≤ room_mem[t] · w[t]
    m.memory = pyo.Constraint(
        m.T,
        rule=lambda m, t: (
            sum(shapes[s].memory_mib * m.Y[s, t] for s in m.S) <= first[t].room_memory_mib * m.w[t]
        ),
    )
    # memory_forth: Σ_s mem_forth[s]·Y[s,t] ≤ room_mem_forth[t] · w[t]
    m.memory_forth = pyo.Constraint(
        m.T,
        rule=lambda m, t: (
            sum(shapes[s].memory_forth_mib * m.Y[s, t] for s in m.S)
            <= first[t].room_memory_forth_mib * m.w[t]
        ),
    )
    # vcpus: Σ_s cpu[s]·Y[s,t] ≤ room_cpu[t] · w[t]
    m.vcpus = pyo.Constraint(
        m.T,
        rule=lambda m, t: (
            sum(shapes[s].vcpus * m.Y[s, t] for s in m.S) <= first[t].room_vcpus * m.w[t]
        ),
    )


def define_type_moves(
    m: pyo.ConcreteModel, problem: SqueezeProblem, types: list[list[int]]
) -> None:
    """leave[s,t] ≥ c[s,t] − Y[s,t], 0 ≤ leave[s,t] ≤ c[s,t]: instances that must leave type t
    (c[s,t]: instances of shape s on type t now), a lower bound on the moves."""
    now = _now_by_type(problem, types)
    m.leave = pyo.Var(
        m.S, m.T, domain=pyo.NonNegativeIntegers, bounds=lambda m, s, t: (0, now[s, t])
    )
    # leaving: leave[s,t] ≥ c[s,t] − Y[s,t]
    m.leaving = pyo.Constraint(
        m.S, m.T, rule=lambda m, s, t: m.leave[s, t] >= now[s, t] - m.Y[s, t]
    )


def build_type_aggregate(problem: SqueezeProblem) -> pyo.ConcreteModel:
    """A relaxation over node types: capacities pooled per type (see above)."""
    types = node_types(problem)
    m = pyo.ConcreteModel(name=f"squeeze_types_{problem.mode}")
    define_type_placement(m, problem, types)
    define_type_capacity(m, problem, types)
    define_type_moves(m, problem, types)
    return m


def type_aggregate_objectives(m: pyo.ConcreteModel, problem: SqueezeProblem) -> list[Objective]:
    """Node count (nodes freed, or nodes powered on), then instances that must change type
    (plus those on nodes outside the problem, which move anyway)."""
    types = node_types(problem)
    fixed_on = _fixed_on(problem, types)
    decided = sum(len(types[t]) - fixed_on[t] for t in m.T)
    powered = sum(m.w[t] - fixed_on[t] for t in m.T)
    if problem.mode == SHRINK:
        first = Objective("nodes_freed", decided - powered, "max")
    else:
        first = Objective("nodes_powered_on", powered, "min")
    homeless = sum(sh.homeless for sh in problem.shapes)
    return [first, Objective("moves", homeless + sum(m.leave[k] for k in m.leave), "min")]


def type_aggregate_solution(m: pyo.ConcreteModel, problem: SqueezeProblem) -> TypeShares:
    """The types, how many nodes of each stay on, and each type's share of every shape."""
    types = node_types(problem)
    share = {(s, t): int(round(m.Y[s, t].value or 0)) for s in m.S for t in m.T}
    powered_on = tuple(int(round(m.w[t].value or 0)) for t in m.T)
    return TypeShares(tuple(tuple(ts) for ts in types), powered_on, share)
