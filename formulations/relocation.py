"""Relocating instances across node groups: the master model and the drbd pairing model
(docs/groups.md, "The exact method").

The data come from `model.relocation`: movers grouped into shapes, counted per origin (their
(primary, secondary) now) and per target node; nodes with their strict capacity rows on the
cluster without any mover. The master holds every strict row of every node that may receive
something, and *necessary* N+1 rows for the nodes that must stay evacuable: a node's own
memory need cannot exceed what the rest of its group offers. The exact N+1 check runs outside
(solvers/strategies/relocation.py) and adds cuts through the indicator pool.

Sets
    O ⊆ S×origins      (shape, origin) pairs: where movers are now
    XP ⊆ S×N, XS ⊆ S×N  (shape, node) pairs: a node that may become a primary (secondary)
    R                  nodes that may receive (every strict row is kept for them)
    Q                  nodes that must stay evacuable (necessary N+1 rows)
    K                  indicator pool for the cuts
Parameters
    c[s,o]             movers of shape s at origin o
    use_p[s,k], use_s[s,k]  what one primary (secondary) of shape s takes from row k
    cap[t,k]           row k's cap on node t without movers
    res[s], mem[s]     failover reserve and used memory of one instance of shape s
    room[t], need[t]   unallocated memory − 1 of t without movers; memory of t's fixed primaries
Variables
    out[s,o] ∈ ℤ≥0     movers of shape s that leave origin o (= c[s,o] when they must)
    x[s,t] ∈ ℤ≥0       instances of shape s arriving with primary t
    y[s,t] ∈ ℤ≥0       drbd instances of shape s arriving with secondary t
    r[t] ≥ 0           N+1 reserve of t after the plan, from the peers that stay
    av[g] ≥ 0          memory the online nodes of group g offer after the plan
    flag[k] ∈ {0,1}    indicators of disjunctive cuts
Objectives (strategies pick): moves = Σ out, cross = Σ x[s,t] over t outside s's group.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import pyomo.core as pyo

from formulations.objective import Objective
from model.capacity import N1
from model.relocation import Origin, PairingProblem, RelocationProblem, Scenario, redundant_rows

#: Spare indicator binaries for disjunctive cuts (the sessions add rows, not columns).
CUT_POOL = 200


@dataclass(frozen=True)
class Index:
    """Derived lookups of a problem (plain data, kept beside the model, not on it)."""

    stay_p: Mapping[str, list[tuple[int, Origin, int]]]  # node -> (shape, origin, count) primary
    stay_s: Mapping[str, list[tuple[int, Origin, int]]]  # node -> ... secondary
    arrive_p: Mapping[str, list[int]]  # node -> shapes that may arrive as primary
    arrive_s: Mapping[str, list[int]]  # node -> drbd shapes that may arrive as secondary
    dropped: Mapping[str, frozenset[str]]  # node -> redundant row kinds


def index_of(p: RelocationProblem) -> Index:
    stay_p: dict[str, list] = defaultdict(list)
    stay_s: dict[str, list] = defaultdict(list)
    arrive_p: dict[str, list[int]] = defaultdict(list)
    arrive_s: dict[str, list[int]] = defaultdict(list)
    for s in p.shapes:
        for o, names in s.members.items():
            stay_p[o[0]].append((s.index, o, len(names)))
            if o[1] is not None and s.drbd:
                stay_s[o[1]].append((s.index, o, len(names)))
        for t in s.primaries:
            arrive_p[t].append(s.index)
        for t in s.secondaries:
            arrive_s[t].append(s.index)
    return Index(stay_p, stay_s, arrive_p, arrive_s, redundant_rows(p))


def define_sets(m: pyo.ConcreteModel, p: RelocationProblem, cut_pool: int) -> None:
    """O, XP, XS; R the receiving nodes; Q the nodes that must stay evacuable; K the pool."""
    m.O = pyo.Set(
        dimen=3, initialize=[(s.index, o[0], o[1] or "") for s in p.shapes for o in s.members]
    )
    m.XP = pyo.Set(dimen=2, initialize=[(s.index, t) for s in p.shapes for t in s.primaries])
    m.XS = pyo.Set(dimen=2, initialize=[(s.index, t) for s in p.shapes for t in s.secondaries])
    m.R = pyo.Set(initialize=[n for n, d in p.nodes.items() if d.receives], ordered=True)
    m.Q = pyo.Set(initialize=list(p.required), ordered=True)
    m.K = pyo.RangeSet(0, cut_pool - 1)


def _origin(o: tuple) -> Origin:
    return (o[0], o[1] or None)


def define_variables(m: pyo.ConcreteModel, p: RelocationProblem) -> None:
    """out (fixed for movers that must leave), x, y, flag."""
    shapes = {s.index: s for s in p.shapes}

    def out_bounds(_m, s, a, b):  # noqa: ANN001, ANN202
        c = shapes[s].origin_count(_origin((a, b)))
        return (c, c) if shapes[s].must_move else (0, c)

    m.out = pyo.Var(m.O, domain=pyo.NonNegativeIntegers, bounds=out_bounds)
    m.x = pyo.Var(
        m.XP, domain=pyo.NonNegativeIntegers, bounds=lambda _m, s, t: (0, shapes[s].count)
    )
    m.y = pyo.Var(
        m.XS, domain=pyo.NonNegativeIntegers, bounds=lambda _m, s, t: (0, shapes[s].count)
    )
    m.flag = pyo.Var(m.K, domain=pyo.Binary)


def define_flow(m: pyo.ConcreteModel, p: RelocationProblem) -> None:
    """What leaves arrives: Σ_o out[s,o] = Σ_t x[s,t]; a drbd shape has as many secondaries as
    primaries in each group, x[s,t] + y[s,t] ≤ Σ_{t' in t's group} x[s,t'] (a pair has two
    distinct nodes: as a transportation problem, no node may hold more than the group's
    primaries of the shape as primary and secondary together)."""
    by_shape_o: dict[int, list] = defaultdict(list)
    for s, a, b in m.O:
        by_shape_o[s].append((s, a, b))
    by_shape_x: dict[int, list[str]] = defaultdict(list)
    for s, t in m.XP:
        by_shape_x[s].append(t)
    # flow: Σ_o out[s,o] = Σ_t x[s,t]
    m.flow = pyo.Constraint(
        [s.index for s in p.shapes],
        rule=lambda _m, s: (
            sum(m.out[k] for k in by_shape_o[s]) == sum(m.x[s, t] for t in by_shape_x[s])
        ),
    )
    group_of = {n: d.group for n, d in p.nodes.items()}
    pairs: dict[tuple[int, str], tuple[list[str], list[str]]] = {}
    for s in p.shapes:
        if not s.drbd:
            continue
        for t in s.primaries:
            pairs.setdefault((s.index, group_of[t]), ([], []))[0].append(t)
        for t in s.secondaries:
            pairs.setdefault((s.index, group_of[t]), ([], []))[1].append(t)
    # pair_group: Σ_{t in g} x[s,t] = Σ_{t in g} y[s,t]
    m.pair_group = pyo.Constraint(
        list(pairs),
        rule=lambda _m, s, g: (
            sum(m.x[s, t] for t in pairs[s, g][0]) == sum(m.y[s, t] for t in pairs[s, g][1])
        ),
    )
    diag = [(s, g, t) for (s, g), (ps, ss) in pairs.items() for t in set(ps) & set(ss)]
    # distinct: x[s,t] + y[s,t] ≤ Σ_{t' in g} x[s,t']
    m.distinct = pyo.Constraint(
        diag,
        rule=lambda _m, s, g, t: m.x[s, t] + m.y[s, t] <= sum(m.x[s, u] for u in pairs[s, g][0]),
    )


def _stay(m: pyo.ConcreteModel, entries: Iterable[tuple[int, Origin, int]], coef) -> object:  # noqa: ANN001
    """Σ coef(s) · (c[s,o] − out[s,o]) over the movers that may stay."""
    expr = 0
    for s, o, c in entries:
        w = coef(s)
        if w:
            expr = expr + w * (c - m.out[s, o[0], o[1] or ""])
    return expr


def define_capacities(m: pyo.ConcreteModel, p: RelocationProblem, ix: Index) -> None:
    """Every strict row of a receiving node, on the final layout: what stays plus what arrives
    within the row's cap without movers; the N+1 row with the reserve r[t] of the peers that
    stay (htools' addPri/addSec checks, model.capacity)."""
    shapes = {s.index: s for s in p.shapes}
    reserve_nodes = [t for t in m.R if p.nodes[t].n1_row]

    def peer_terms(t: str) -> dict[str, object]:
        """Per primary node: the failover reserve t keeps for it after the plan."""
        node = p.nodes[t]
        out: dict[str, object] = dict(node.peers_mib)
        for s, o, c in ix.stay_s.get(t, ()):
            res = shapes[s].reserve_mib
            if res:
                out[o[0]] = out.get(o[0], 0) + res * (c - m.out[s, o[0], o[1] or ""])
        return out

    m.r = pyo.Var(reserve_nodes, domain=pyo.NonNegativeReals)
    rows = []
    for t in reserve_nodes:
        for prim, expr in peer_terms(t).items():
            rows.append((t, prim, expr))
    # reserve: r[t] ≥ peers_t[prim] after the plan (for each primary it serves)
    m.reserve = pyo.ConstraintList()
    for t, _prim, expr in rows:
        if isinstance(expr, int | float) and expr <= 0:
            continue
        m.reserve.add(m.r[t] >= expr)

    rows: dict[tuple[str, str], object] = {}
    for t in m.R:
        node = p.nodes[t]
        for row in node.rows:
            k = row.kind
            if k in ix.dropped.get(t, ()) or (k == N1 and not node.n1_row):
                continue
            expr = _stay(m, ix.stay_p.get(t, ()), lambda s, k=k: shapes[s].usage_primary.get(k, 0))
            expr = expr + _stay(
                m, ix.stay_s.get(t, ()), lambda s, k=k: shapes[s].usage_secondary.get(k, 0)
            )
            arrivals = [
                shapes[s].usage_primary.get(k, 0) * m.x[s, t]
                for s in ix.arrive_p.get(t, ())
                if shapes[s].usage_primary.get(k, 0)
            ] + [
                shapes[s].usage_secondary.get(k, 0) * m.y[s, t]
                for s in ix.arrive_s.get(t, ())
                if shapes[s].usage_secondary.get(k, 0)
            ]
            if not arrivals:
                continue  # nothing can arrive that this row counts: it cannot get worse
            expr = expr + sum(arrivals)
            if k == N1:
                expr = expr + m.r[t]
            rows[t, k] = expr <= row.cap
    m.CAP = pyo.Set(dimen=2, initialize=list(rows), doc="(node, row kind) strict rows kept")
    # cap: Σ use·(stay + arrive) [+ r[t]] ≤ cap[t,k]
    m.cap = pyo.Constraint(m.CAP, rule=lambda _m, t, k: rows[t, k])


#: Up to this many (secondary, primary) pairs in a group, the reserve flows per shape (the
#: pairing model's LP relaxation); above, summed over shapes (weaker, smaller).
PER_SHAPE_PAIRS = 1600


def define_pair_flow(m: pyo.ConcreteModel, p: RelocationProblem, ix: Index) -> None:
    """drbd arrivals' failover reserve as a flow from their primaries to their secondaries
    (a relaxation of the pairing model): z[k,q,a] MiB reserved on secondary q for primary a,
    k a drbd shape (or all shapes at once in large groups), within q's strict N+1 row:
        Σ_a z[k,q,a] = Σ_{s in k} res[s]·y[s,q],   Σ_q z[k,q,a] = Σ_{s in k} res[s]·x[s,a],
        Σ_k z[k,q,a] + peers_q[a] + mem(q) ≤ room[q]   (where q keeps htools' N+1 row)."""
    shapes = {s.index: s for s in p.shapes}
    drbd = [s for s in p.shapes if s.drbd and s.reserve_mib]
    groups: dict[str, list] = defaultdict(list)
    for s in drbd:
        for g in {p.nodes[t].group for t in s.primaries}:
            groups[g].append(s)
    keys: list[tuple[object, str, str]] = []
    members: dict[object, list[int]] = {}
    for g, ss in groups.items():
        prims = sorted({t for s in ss for t in s.primaries if p.nodes[t].group == g})
        secs = sorted({t for s in ss for t in s.secondaries if p.nodes[t].group == g})
        pairs = [(q, a) for q in secs for a in prims if a != q]
        if len(pairs) * len(ss) <= PER_SHAPE_PAIRS:
            for s in ss:
                mine_p = set(s.primaries)
                mine_s = set(s.secondaries)
                members[s.index] = [s.index]
                keys += [(s.index, q, a) for q, a in pairs if q in mine_s and a in mine_p]
        else:
            members[g] = [s.index for s in ss]
            keys += [(g, q, a) for q, a in pairs]
    m.PF = pyo.Set(dimen=3, initialize=keys)
    m.z = pyo.Var(m.PF, domain=pyo.NonNegativeReals)
    out_q: dict[tuple, list] = defaultdict(list)
    in_a: dict[tuple, list] = defaultdict(list)
    per_pair: dict[tuple[str, str], list] = defaultdict(list)
    for k, q, a in keys:
        out_q[k, q].append(m.z[k, q, a])
        in_a[k, a].append(m.z[k, q, a])
        per_pair[q, a].append(m.z[k, q, a])
    m.pair_flow = pyo.ConstraintList()
    for (k, q), zs in out_q.items():
        need = [shapes[s].reserve_mib * m.y[s, q] for s in members[k] if (s, q) in m.XS]
        # Σ_a z[k,q,a] = Σ_{s in k} res[s]·y[s,q]
        m.pair_flow.add(sum(zs) == sum(need))
    for (k, a), zs in in_a.items():
        give = [shapes[s].reserve_mib * m.x[s, a] for s in members[k] if (s, a) in m.XP]
        # Σ_q z[k,q,a] = Σ_{s in k} res[s]·x[s,a]
        m.pair_flow.add(sum(zs) == sum(give))
    # a shape's secondaries (primaries) with no pair at all stay at zero
    for s in drbd:
        for q in s.secondaries:
            if not any((kk, q) in out_q for kk in members if s.index in members[kk]):
                m.y[s.index, q].setub(0)
    mem = lambda s: shapes[s].memory_mib  # noqa: E731
    for (q, a), zs in per_pair.items():
        node = p.nodes[q]
        if not node.n1_row:
            continue
        stay_mem = _stay(m, ix.stay_p.get(q, ()), mem)
        arrive_mem = sum(mem(s) * m.x[s, q] for s in ix.arrive_p.get(q, ()) if mem(s))
        peer = node.peers_mib.get(a, 0)
        for s, o, c in ix.stay_s.get(q, ()):
            if o[0] == a and shapes[s].reserve_mib:
                peer = peer + shapes[s].reserve_mib * (c - m.out[s, o[0], o[1] or ""])
        # Σ_k z[k,q,a] + peers_q[a] + mem(q) ≤ room[q]
        m.pair_flow.add(sum(zs) + peer + stay_mem + arrive_mem <= node.room_mib)


def define_exclusion(m: pyo.ConcreteModel, p: RelocationProblem, ix: Index) -> None:
    """htools' exclusion tags: an arriving primary may not meet a primary with one of its tags:
    Σ_{s∋e} x[s,t] ≤ 1, none where a fixed primary carries e, and
    big·Σ_{s∋e} x[s,t] + stay_e[t] ≤ big where movers with e may stay."""
    shapes = {s.index: s for s in p.shapes}
    m.excl = pyo.ConstraintList()
    for t in m.R:
        tags: dict[str, list[int]] = defaultdict(list)
        for s in ix.arrive_p.get(t, ()):
            for e in shapes[s].exclusion_tags:
                tags[e].append(s)
        for e, ss in tags.items():
            arriving = sum(m.x[s, t] for s in ss)
            if e in p.nodes[t].exclusion_tags:
                for s in ss:
                    m.x[s, t].setub(0)
                continue
            stay = [(s, o, c) for s, o, c in ix.stay_p.get(t, ()) if e in shapes[s].exclusion_tags]
            if not stay:
                if len(ss) > 1 or shapes[ss[0]].count > 1:
                    m.excl.add(arriving <= 1)
                continue
            big = sum(c for _, _, c in stay)
            m.excl.add(big * arriving + _stay(m, stay, lambda s: 1) <= big)


def define_n1(m: pyo.ConcreteModel, p: RelocationProblem, ix: Index) -> None:
    """Necessary N+1 rows (hard memory): a node that must stay evacuable needs for its
    primaries no more memory than the other online nodes of its group offer after the plan,
    need[n] + offer[n] ≤ av[g] with av[g] = Σ_{t online in g} offer[t]."""
    shapes = {s.index: s for s in p.shapes}
    groups = sorted({p.nodes[n].group for n in m.Q})
    mem = lambda s: shapes[s].memory_mib  # noqa: E731

    def offer(t: str) -> object:
        """room[t] − what stays − what arrives; a receiving node's memory row keeps it ≥ 0. A
        node that only loses instances and is over-committed now offers at most its room
        without movers (a relaxation: an offer below zero would take from the others)."""
        node = p.nodes[t]
        if not node.online:
            return 0
        stay = _stay(m, ix.stay_p.get(t, ()), mem)
        arrivals = [mem(s) * m.x[s, t] for s in ix.arrive_p.get(t, ()) if mem(s)]
        if not arrivals:
            worst = node.room_mib - sum(mem(s) * c for s, _, c in ix.stay_p.get(t, ()))
            if worst < 0 or isinstance(stay, int | float):
                return max(node.room_mib, 0) if worst < 0 else worst
        return node.room_mib - stay - sum(arrivals)

    def need(n: str) -> object:
        node = p.nodes[n]
        stay = _stay(m, ix.stay_p.get(n, ()), mem)
        arrivals = [mem(s) * m.x[s, n] for s in ix.arrive_p.get(n, ()) if mem(s)]
        return node.fixed_memory_mib + stay + sum(arrivals)

    m.av = pyo.Var(groups, domain=pyo.Reals)
    offers = {t: offer(t) for g in groups for t in p.group_nodes[g]}
    # offered: av[g] = Σ_{t in g} offer[t]
    m.offered = pyo.Constraint(
        groups, rule=lambda _m, g: m.av[g] == sum(offers[t] for t in p.group_nodes[g])
    )
    # n1_memory: need[n] + offer[n] ≤ av[g(n)]
    m.n1_memory = pyo.Constraint(
        m.Q, rule=lambda _m, n: need(n) + offers[n] <= m.av[p.nodes[n].group]
    )
    define_n1_counts(m, p, ix, groups, offers)


#: Size classes of the counting rows per group (the largest distinct memory sizes).
SIZE_CLASSES = 8


def _failover(m: pyo.ConcreteModel, p: RelocationProblem, ix: Index, n: str) -> dict[str, object]:
    """Memory node n's drbd primaries that stay fail over to each secondary (those that arrive
    are paired later and left out: a relaxation)."""
    shapes = {s.index: s for s in p.shapes}
    out: dict[str, object] = dict(p.nodes[n].fixed_failover_mib)
    for s, o, c in ix.stay_p.get(n, ()):
        if shapes[s].drbd and o[1] is not None and shapes[s].memory_mib:
            out[o[1]] = out.get(o[1], 0) + shapes[s].memory_mib * (c - m.out[s, o[0], o[1] or ""])
    return out


def define_n1_counts(
    m: pyo.ConcreteModel,
    p: RelocationProblem,
    ix: Index,
    groups: Sequence[str],
    offers: Mapping[str, object],
) -> None:
    """Necessary N+1 rows of a failing node's drbd failovers and of how its other primaries
    split over the others' memory (hard memory checks):

    failover: fo[n,t] ≤ offer[t], what n's drbd primaries fail over to t must fit there;
    counts: a node's re-placed primaries of at least M MiB each need a node with room for M,
    and node t holds at most ⌊offer[t] / M⌋ of them, or ⌊(offer[t] − fo[n,t]) / M⌋ once n's
    failovers are on it:
        items[n, ≥M] + cnt[n,M] + Σ_{t ∈ F(n)} (cnt[t,M] − cnt2[n,t,M]) ≤ Σ_{t in g} cnt[t,M],
        M·cnt[t,M] ≤ offer[t],  M·cnt2[n,t,M] ≤ offer[t] − fo[n,t]   (cnt, cnt2 integer)."""
    shapes = {s.index: s for s in p.shapes}
    movable = {s.index for s in p.shapes if not s.drbd and s.memory_mib}
    fo = {n: _failover(m, p, ix, n) for n in m.Q}
    m.n1_failover = pyo.ConstraintList()
    for per_t in fo.values():
        for t, expr in per_t.items():
            if t not in offers or not p.nodes[t].online:
                continue  # an offline secondary offers nothing to others but takes failovers
            if isinstance(expr, int | float) and isinstance(offers[t], int | float):
                if expr > offers[t]:  # fails whatever the plan does
                    m.n1_failover.add(m.moves - m.moves + 1 <= 0)
                continue
            # failover: fo[n,t] ≤ offer[t]
            m.n1_failover.add(expr <= offers[t])

    def own_sizes(n: str) -> set[int]:
        found = set(p.nodes[n].fixed_items_mib)
        found |= {shapes[s].memory_mib for s in ix.arrive_p.get(n, ()) if s in movable}
        found |= {shapes[s].memory_mib for s, _, _ in ix.stay_p.get(n, ()) if s in movable}
        return found

    sizes: dict[str, list[int]] = {}
    node_sizes = {n: own_sizes(n) for n in m.Q}
    for g in groups:
        found = {x for n in m.Q if p.nodes[n].group == g for x in node_sizes[n]}
        sizes[g] = sorted(found, reverse=True)[:SIZE_CLASSES]
    keys = [(g, size) for g in groups for size in sizes[g]]
    m.NC = pyo.Set(dimen=2, initialize=keys)
    var_keys = [
        (t, size)
        for g, size in keys
        for t in p.group_nodes[g]
        if not isinstance(offers[t], int | float)
    ]
    m.cnt = pyo.Var(var_keys, domain=pyo.NonNegativeIntegers)

    def cnt(t: str, size: int) -> object:
        off = offers[t]
        return off // size if isinstance(off, int | float) else m.cnt[t, size]

    # holes: M·cnt[t,M] ≤ offer[t]
    m.holes = pyo.Constraint(var_keys, rule=lambda _m, t, size: size * m.cnt[t, size] <= offers[t])
    m.CNT = pyo.Var(m.NC, domain=pyo.NonNegativeReals)
    # held: CNT[g,M] = Σ_{t in g} cnt[t,M]
    m.held = pyo.Constraint(
        m.NC,
        rule=lambda _m, g, size: m.CNT[g, size] == sum(cnt(t, size) for t in p.group_nodes[g]),
    )

    def items(n: str, size: int) -> object:
        fixed = sum(1 for x in p.nodes[n].fixed_items_mib if x >= size)
        stay = _stay(
            m,
            ix.stay_p.get(n, ()),
            lambda s: 1 if s in movable and shapes[s].memory_mib >= size else 0,
        )
        arrive = [
            m.x[s, n]
            for s in ix.arrive_p.get(n, ())
            if s in movable and shapes[s].memory_mib >= size
        ]
        return fixed + stay + sum(arrive)

    rows = [
        (n, size)
        for n in m.Q
        for size in sizes[p.nodes[n].group]
        if any(x >= size for x in node_sizes[n])
    ]
    cnt2_keys = [
        (n, t, size)
        for n, size in rows
        for t in fo[n]
        if t in offers and p.nodes[t].online and t != n and p.nodes[t].group == p.nodes[n].group
    ]
    m.cnt2 = pyo.Var(cnt2_keys, domain=pyo.NonNegativeIntegers)
    # holes_after: M·cnt2[n,t,M] ≤ offer[t] − fo[n,t]
    m.holes_after = pyo.Constraint(
        cnt2_keys, rule=lambda _m, n, t, size: size * m.cnt2[n, t, size] <= offers[t] - fo[n][t]
    )
    by_row: dict[tuple[str, int], list[str]] = defaultdict(list)
    for n, t, size in cnt2_keys:
        by_row[n, size].append(t)
    # n1_count: items[n,≥M] + cnt[n,M] + Σ_{t∈F(n)} (cnt[t,M] − cnt2[n,t,M]) ≤ CNT[g(n),M]
    m.n1_count = pyo.ConstraintList()
    for n, size in rows:
        lhs = items(n, size)
        if isinstance(lhs, int | float) and lhs == 0:
            continue
        lost = sum(cnt(t, size) - m.cnt2[n, t, size] for t in by_row[n, size])
        m.n1_count.add(lhs + cnt(n, size) + lost <= m.CNT[p.nodes[n].group, size])


def _known(lhs: object, rhs: object) -> bool | None:
    """For two constants: whether lhs ≤ rhs holds; None when either is an expression."""
    if isinstance(lhs, int | float) and isinstance(rhs, int | float):
        return lhs <= rhs
    return None


def _add_row(m: pyo.ConcreteModel, rows: pyo.ConstraintList, lhs: object, rhs: object) -> None:
    """rows.add(lhs ≤ rhs), or nothing when it holds for sure, or a row no plan meets."""
    known = _known(lhs, rhs)
    if known is None:
        rows.add(lhs <= rhs)
    elif not known:
        rows.add(m.moves - m.moves + 1 <= 0)


def _bin_room(m: pyo.ConcreteModel, p: RelocationProblem, ix: Index, t: str, kind: str) -> object:
    """What bin t can still take after the plan under a hard check: memory (unallocated − 1)
    or local disk (free disk − 1). Where the movers that may stay could drive it below zero
    (an over-committed node), the room without them is used: a relaxation (a bin takes
    nothing rather than a negative amount)."""
    shapes = {s.index: s for s in p.shapes}
    node = p.nodes[t]
    if kind == "memory":
        room = node.room_mib

        def use_p(s: int) -> int:
            return shapes[s].memory_mib

        def use_s(s: int) -> int:
            return 0
    else:
        room = node.disk_room_mib

        def use_p(s: int) -> int:
            return shapes[s].usage_primary.get("disk", 0)

        def use_s(s: int) -> int:
            return shapes[s].usage_secondary.get("disk", 0)

    stay_entries_p = ix.stay_p.get(t, ())
    stay_entries_s = ix.stay_s.get(t, ())
    arrivals = [use_p(s) * m.x[s, t] for s in ix.arrive_p.get(t, ()) if use_p(s)]
    arrivals += [use_s(s) * m.y[s, t] for s in ix.arrive_s.get(t, ()) if use_s(s)]
    worst = room - sum(use_p(s) * c for s, _, c in stay_entries_p)
    worst -= sum(use_s(s) * c for s, _, c in stay_entries_s)
    if worst < 0:
        return max(room, 0) - sum(arrivals)
    return room - _stay(m, stay_entries_p, use_p) - _stay(m, stay_entries_s, use_s) - sum(arrivals)


def add_scenario(m: pyo.ConcreteModel, p: RelocationProblem, ix: Index, sc: Scenario) -> None:
    """Node sc.node fails, as linear rows over the master's variables (column-and-constraint
    generation: added for a node once the exact check found it failing):
        Σ_t w[c,t] = count[c]                       (every re-placed primary finds a bin),
        Σ_c mem[c]·w[c,t] + fo[n,t] ≤ room[t]       (memory, failovers included),
        Σ_c disk[c]·w[c,t] ≤ disk_room[t]           (re-created plain instances),
    with w[c,t] ∈ ℤ≥0 on the bins t admitting class c."""
    k = len([c for c in m.component_objects(pyo.Block) if c.local_name.startswith("scenario_")])
    b = pyo.Block(concrete=True)
    m.add_component(f"scenario_{k}", b)
    keys = [(c, t) for c, item in enumerate(sc.items) for t in item.bins]
    b.w = pyo.Var(keys, domain=pyo.NonNegativeIntegers)
    b.rows = pyo.ConstraintList()
    n = sc.node
    for c, item in enumerate(sc.items):
        count = item.fixed + sum(
            (len(p.shapes[s].members[o]) - m.out[s, o[0], o[1] or ""] for s, o in item.stay), 0
        )
        count = count + sum(m.x[s, n] for s in item.arrive)
        placed = sum(b.w[c, t] for t in item.bins)
        # every one: Σ_t w[c,t] = count[c]
        _add_row(m, b.rows, count, placed)
        _add_row(m, b.rows, placed, count)
    fo = _failover(m, p, ix, n)
    for t in sc.bins:
        mem = [
            item.memory_mib * b.w[c, t]
            for c, item in enumerate(sc.items)
            if t in item.bins and item.memory_mib
        ]
        # memory: Σ mem·w + fo[n,t] ≤ room[t]
        _add_row(m, b.rows, sum(mem) + fo.get(t, 0), _bin_room(m, p, ix, t, "memory"))
        disk = [
            item.disk_mib * b.w[c, t]
            for c, item in enumerate(sc.items)
            if t in item.bins and item.disk_mib
        ]
        if disk:
            # disk: Σ disk·w ≤ disk_room[t]
            _add_row(m, b.rows, sum(disk), _bin_room(m, p, ix, t, "disk"))


def define_objective_terms(m: pyo.ConcreteModel, p: RelocationProblem) -> None:
    """moves (instances relocated) and cross (of them, into another group)."""
    shapes = {s.index: s for s in p.shapes}
    m.moves = pyo.Expression(expr=sum(m.out[k] for k in m.O))
    m.cross = pyo.Expression(
        expr=sum(m.x[s, t] for s, t in m.XP if p.nodes[t].group != shapes[s].group)
    )


def build(p: RelocationProblem, cut_pool: int = CUT_POOL) -> tuple[pyo.ConcreteModel, Index]:
    ix = index_of(p)
    m = pyo.ConcreteModel(name="relocation")
    define_sets(m, p, cut_pool)
    define_variables(m, p)
    define_flow(m, p)
    define_capacities(m, p, ix)
    define_pair_flow(m, p, ix)
    define_exclusion(m, p, ix)
    define_objective_terms(m, p)
    define_n1(m, p, ix)
    return m, ix


def objectives(m: pyo.ConcreteModel, names: Sequence[tuple[str, str]]) -> list[Objective]:
    """The stages a strategy asks for, by name: moves, evacuated (-moves, max), cross."""
    exprs = {"moves": m.moves, "cross": m.cross, "none": 0 * m.moves}
    return [Objective(name, exprs[name], sense) for name, sense in names]


@dataclass(frozen=True)
class Solution:
    leave: Mapping[tuple[int, Origin], int]
    primary: Mapping[tuple[int, str], int]
    secondary: Mapping[tuple[int, str], int]


def _count(v: pyo.Var) -> int:
    return int(round(v.value or 0))


def solution(m: pyo.ConcreteModel) -> Solution:
    return Solution(
        leave={
            (s, (a, b or None)): _count(m.out[s, a, b]) for s, a, b in m.O if _count(m.out[s, a, b])
        },
        primary={(s, t): _count(m.x[s, t]) for s, t in m.XP if _count(m.x[s, t])},
        secondary={(s, t): _count(m.y[s, t]) for s, t in m.XS if _count(m.y[s, t])},
    )


# --- cuts ----------------------------------------------------------------------------------

#: A cut condition: ("out", shape, origin, d) holds when out ≤ d; ("x"|"y", shape, node, a)
#: holds when x (or y) ≥ a. A cut forbids every plan meeting all conditions of one set.
Condition = tuple


def _var(m: pyo.ConcreteModel, cond: Condition) -> pyo.Var:
    kind, s, where, _ = cond
    if kind == "out":
        return m.out[s, where[0], where[1] or ""]
    return (m.x if kind == "x" else m.y)[s, where]


def _linear(m: pyo.ConcreteModel, cond: Condition) -> bool:
    """A condition whose failure is linear on its own: out ≥ 1 (d = 0), or x ≤ a − 1 where a is
    x's upper bound (x < ub)."""
    kind, _, _, value = cond
    if kind == "out":
        return value == 0
    return _var(m, cond).ub == value


def flags_needed(m: pyo.ConcreteModel, conditions: Sequence[Condition]) -> int:
    """Indicators `cut_rows` needs for these conditions (none when one linear row says it)."""
    if len(conditions) == 1 or all(_linear(m, c) for c in conditions):
        return 0
    return len(conditions)


def cut_rows(
    m: pyo.ConcreteModel, conditions: Sequence[Condition], flags: Sequence[int]
) -> list[tuple[object, float | None, float | None]]:
    """Rows (expr, lb, ub) forbidding a plan that meets every condition.

    One condition is one row. Conditions that each fail by one unit past a bound (out ≥ 1 with
    d = 0, x ≤ ub − 1 with a = ub) fail together as Σ out + Σ (ub − x) ≥ 1. Otherwise each
    needs an indicator (`flags`, from the pool): flag = 1 says "this condition fails", and at
    least one must."""

    def broken(cond: Condition) -> tuple[object, float | None, float | None]:
        kind, _, _, value = cond
        v = _var(m, cond)
        return (v, value + 1, None) if kind == "out" else (v, None, value - 1)

    if len(conditions) == 1:
        return [broken(conditions[0])]
    if not flags:
        terms = [_var(m, c) if c[0] == "out" else (c[3] - _var(m, c)) for c in conditions]
        # Σ out + Σ (ub − x) ≥ 1
        return [(sum(terms), 1, None)]
    rows: list[tuple[object, float | None, float | None]] = []
    for cond, k in zip(conditions, flags, strict=True):
        kind, _, _, value = cond
        v = _var(m, cond)
        f = m.flag[k]
        if kind == "out":
            # flag = 1 ⇒ out ≥ d + 1:   out − (d + 1)·flag ≥ 0
            rows.append((v - (value + 1) * f, 0, None))
        else:
            ub = v.ub if v.ub is not None else value
            # flag = 1 ⇒ x ≤ a − 1:     x + (ub − a + 1)·flag ≤ ub
            rows.append((v + (ub - value + 1) * f, None, ub))
    rows.append((sum(m.flag[k] for k in flags), 1, None))
    return rows


# --- pairing ---------------------------------------------------------------------------------


def build_pairing(p: PairingProblem) -> pyo.ConcreteModel:
    """f[s,a,b] ∈ ℤ≥0 drbd instances of shape s on the pair (primary a, secondary b):
    rows: Σ_b f = primaries[s][a]; Σ_a f = secondaries[s][b];
    peer: Σ_s res[s]·f[s,a,b] ≤ peer_cap[b,a] (htools' N+1 reserve row on b);
    failover: Σ_s mem[s]·f[s,a,b] ≤ failover_cap[b,a] (b takes a's failovers).
    Cuts: no-goods on pair counts, one indicator per condition."""
    m = pyo.ConcreteModel(name=f"pairing_{p.group}")
    pairs = p.pairs()
    m.P = pyo.Set(dimen=3, initialize=pairs)
    m.f = pyo.Var(m.P, domain=pyo.NonNegativeIntegers)
    by_p: dict[tuple[int, str], list] = defaultdict(list)
    by_s: dict[tuple[int, str], list] = defaultdict(list)
    by_pair: dict[tuple[str, str], list] = defaultdict(list)
    for s, a, b in pairs:
        by_p[s, a].append((s, a, b))
        by_s[s, b].append((s, a, b))
        by_pair[a, b].append((s, a, b))
    m.rows = pyo.ConstraintList()
    for s, ps in p.primaries.items():
        for a, c in ps.items():
            if c:
                m.rows.add(sum(m.f[k] for k in by_p[s, a]) == c)
    for s, qs in p.secondaries.items():
        for b, c in qs.items():
            if c:
                m.rows.add(sum(m.f[k] for k in by_s[s, b]) == c)
    for (a, b), ks in by_pair.items():
        cap = p.peer_cap_mib.get((b, a))
        res = [p.reserve_mib[s] * m.f[s, a2, b2] for s, a2, b2 in ks if p.reserve_mib[s]]
        if cap is not None and res:
            m.rows.add(sum(res) <= cap)
        fo = [p.memory_mib[s] * m.f[s, a2, b2] for s, a2, b2 in ks if p.memory_mib[s]]
        if fo:
            m.rows.add(sum(fo) <= p.failover_cap_mib.get((b, a), 0))
    m.C = pyo.Set(
        dimen=2,
        initialize=[(i, j) for i, cut in enumerate(p.cuts) for j in range(len(cut))],
    )
    m.g = pyo.Var(m.C, domain=pyo.Binary)
    for i, cut in enumerate(p.cuts):
        live = [(j, key, value) for j, (key, value) in enumerate(cut) if key in m.P]
        if len(live) < len(cut):
            continue  # a pair that no longer exists cannot be met: the cut holds
        for j, key, value in live:
            big = max(p.primaries[key[0]][key[1]] - value + 1, 1)
            # g = 1 ⇒ f[key] ≤ value − 1:   f + big·g ≤ value − 1 + big
            m.rows.add(m.f[key] + big * m.g[i, j] <= value - 1 + big)
        m.rows.add(sum(m.g[i, j] for j, _, _ in live) >= 1)
    # feasibility: Σ f is fixed by the rows, any objective of it will do
    m.obj = pyo.Objective(expr=sum(m.f[k] for k in m.P))
    return m


def pairing_solution(m: pyo.ConcreteModel) -> dict[tuple[int, str, str], int]:
    return {k: _count(m.f[k]) for k in m.P if _count(m.f[k])}
