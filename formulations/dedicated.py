"""Dedicated (exclusive-storage) allocation as a lexicographic MIP (docs/hail.md).

Two models share the data classes below; neither calls a solver.

* `build_batch` (multi-allocate, also valid for one instance): binaries place each new
  instance's primary (and drbd secondary); integer count variables `a[n,t]` hold how many
  minimally compliant test instances t still fit on node n after the batch, bounded by each of
  the node's capacity rows (`model.capacity.capacity_rows`) minus what the batch takes. At a
  lexicographic optimum every count is at its bound, so the lost-allocation vector is exact for
  any combination of placements on a node.
* `build_single` (allocate): the same question for one instance, where each candidate node's
  lost vector and remaining disk are known constants, so the model is tiny (O(nodes)) and
  carries hail's tie-break (the later node or pair in iteration order) as a last stage.

Each keeps the contract of formulations/__init__.py: `build_batch(BatchProblem)`,
`batch_objectives`, `batch_solution`; `build_single(SingleProblem)`, `single_objectives`,
`single_solution`. Objectives: [placed (batch only, max)], lost_0 … lost_{T-1} (min),
remaining disk on the nodes that received instances (min), [tie-break (single, max)].
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

import pyomo.environ as pyo

from model.capacity import N1, CapacityRow
from solvers import Objective


@dataclass(frozen=True)
class NodeData:
    """A candidate node: its capacities now and what test instances take from them."""

    name: str
    rank: int  # position in hail's iteration order (node index); larger wins ties
    group: str
    rows: tuple[CapacityRow, ...]
    reserve_mib: int  # the N+1 reserve rMem now
    peers_mib: Mapping[str, int]  # failover memory reserved per primary node now
    free_disk_mib: int  # f_dsk now
    before: tuple[int, ...]  # allocation vector now
    test_usage: tuple[Mapping[str, int], ...]  # per test instance: usage per row kind
    fails_n1: bool  # already failing N+1: htools skips the N+1 checks
    unallocated_mib: int
    free_memory_forth_mib: int


@dataclass(frozen=True)
class NewInstance:
    """A new instance (or `count` identical plain ones) and where it may go; each candidate
    passed hail's checks for it alone."""

    name: str
    drbd: bool
    primary_usage: Mapping[str, int]  # per row kind
    secondary_usage: Mapping[str, int]
    failover_mib: int  # memory its secondary must hold for a failover (usesSecMem)
    primaries: tuple[str, ...]
    secondaries: tuple[str, ...] = ()
    forbidden_pairs: frozenset[tuple[str, str]] = frozenset()  # fail only as this pair
    count: int = 1  # identical plain instances share one integer variable per node
    exclusion_tags: tuple[str, ...] = ()  # at most one primary per node carries each tag
    forthcoming: bool = False  # only the *_forth counters change; no failover reservation
    same_as: str | None = None  # an earlier drbd instance identical to this one
    order: int = 0  # request position of its first instance (tagged kinds have one instance)

    def __post_init__(self) -> None:
        if self.count < 1 or (self.drbd and self.count != 1):
            raise ValueError(f"{self.name}: count {self.count} (drbd instances count 1 each)")


@dataclass(frozen=True)
class SingleCandidate:
    """One node's constants for `build_single`: metric contribution in each role."""

    name: str
    rank: int
    group: str
    primary_lost: tuple[int, ...] | None = None  # None: cannot be primary
    primary_disk_mib: int = 0  # f_dsk after taking the primary
    secondary_lost: tuple[int, ...] | None = None  # generic (no existing peer reservation)
    secondary_disk_mib: int = 0
    # primary node -> (lost vector as secondary of that primary, or None if it fails)
    secondary_lost_with: Mapping[str, tuple[int, ...] | None] = field(default_factory=dict)


# --------------------------------------------------------------------------------------
# multi-allocate: count variables
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchProblem:
    """A multi-allocate batch on dedicated nodes.

    `shared_pairs`: the (primary, secondary) pairs whose failover reservation is summed over
    several new drbd instances; elsewhere one new instance per pair is assumed, which keeps
    the model O(instances × nodes). None sums on every pair (exact, O(instances × nodes²)).
    `shared_pairs_used` tells which pairs a solution shares, so a strategy can add them and
    solve again until the answer uses no pair it was not exact on (then it is optimal too:
    a relaxation's optimum that is feasible for the exact model is its optimum).

    `last_resort` names the nodes of last-resort groups: hail uses them only when no
    preferred group can take an instance, so the batch puts as few instances there as it can
    (a stage right after `placed`).
    """

    nodes: tuple[NodeData, ...]
    instances: tuple[NewInstance, ...]
    last_resort: frozenset[str] = frozenset()
    shared_pairs: frozenset[tuple[str, str]] | None = frozenset()

    @cached_property
    def node(self) -> dict[str, NodeData]:
        return {n.name: n for n in self.nodes}

    @cached_property
    def instance(self) -> dict[str, NewInstance]:
        return {i.name: i for i in self.instances}

    @cached_property
    def n_tests(self) -> int:
        return max((len(n.before) for n in self.nodes), default=0)

    @cached_property
    def primaries(self) -> dict[str, list[str]]:
        """Kind -> the candidate nodes of its primary."""
        return {i.name: [p for p in i.primaries if p in self.node] for i in self.instances}

    @cached_property
    def secondaries(self) -> dict[str, list[str]]:
        return {
            i.name: [s for s in i.secondaries if s in self.node] if i.drbd else []
            for i in self.instances
        }

    @cached_property
    def touched(self) -> list[str]:
        """Nodes that may receive something (only they get count variables), in node order."""
        names = {n for v in self.primaries.values() for n in v}
        names |= {n for v in self.secondaries.values() for n in v}
        return sorted(names, key=lambda n: self.node[n].rank)

    @cached_property
    def kinds_on(self) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
        """Node -> kinds that may take it as primary, and as secondary."""
        prim: dict[str, list[str]] = {n: [] for n in self.touched}
        sec: dict[str, list[str]] = {n: [] for n in self.touched}
        for j, nodes in self.primaries.items():
            for n in nodes:
                prim[n].append(j)
        for j, nodes in self.secondaries.items():
            for n in nodes:
                sec[n].append(j)
        return prim, sec

    @cached_property
    def reserve_nodes(self) -> list[str]:
        """Nodes whose N+1 reserve may grow: secondaries not already failing N+1."""
        secondary = {n for v in self.secondaries.values() for n in v}
        return [n for n in self.touched if not self.node[n].fails_n1 and n in secondary]

    @property
    def has_last_resort(self) -> bool:
        return any(n in self.last_resort for v in self.primaries.values() for n in v)


def define_sets(m: pyo.ConcreteModel, p: BatchProblem) -> None:
    """N, J, T; JP (kind, primary) and JS (kind, secondary) candidates; NT the (node, test)
    counts that may change (a zero count stays zero)."""
    m.N = pyo.Set(initialize=[n.name for n in p.nodes], ordered=True, doc="candidate nodes")
    m.J = pyo.Set(initialize=[i.name for i in p.instances], ordered=True, doc="new instances")
    m.T = pyo.RangeSet(0, p.n_tests - 1) if p.n_tests else pyo.Set(initialize=[])
    m.JP = pyo.Set(dimen=2, initialize=[(j, n) for j, ns in p.primaries.items() for n in ns])
    m.JS = pyo.Set(dimen=2, initialize=[(j, n) for j, ns in p.secondaries.items() for n in ns])
    m.NT = pyo.Set(
        dimen=2,
        initialize=[
            (n, t)
            for n in p.touched
            for t in range(len(p.node[n].before))
            if p.node[n].before[t] > 0
        ],
        doc="(node, test) pairs whose count may change (a zero count stays zero)",
    )
    m.before = pyo.Param(
        m.NT, initialize={(n, t): p.node[n].before[t] for n, t in m.NT}, doc="count now"
    )


def define_variables(m: pyo.ConcreteModel, p: BatchProblem) -> None:
    """x (primaries per kind and node), y (drbd secondaries), a (test counts left), u (node
    used), r (N+1 reserve after the batch)."""
    m.x = pyo.Var(
        m.JP,
        domain=pyo.NonNegativeIntegers,
        bounds=lambda _m, j, n: (0, p.instance[j].count),
        doc="x[j,n]: how many instances of kind j get primary n",
    )
    m.y = pyo.Var(m.JS, domain=pyo.Binary, doc="y[j,s] = 1: instance j has secondary s")
    m.a = pyo.Var(
        m.NT,
        domain=pyo.NonNegativeIntegers,
        bounds=lambda _m, n, t: (0, p.node[n].before[t]),
        doc="a[n,t]: copies of test instance t that still fit on n after the batch",
    )
    m.u = pyo.Var(p.touched, domain=pyo.Binary, doc="u[n] = 1 when n received anything")
    m.r = pyo.Var(
        p.reserve_nodes,
        domain=pyo.Integers,
        bounds=lambda _m, n: (
            p.node[n].reserve_mib,
            max(p.node[n].reserve_mib, p.node[n].unallocated_mib),
        ),
        doc="r[n]: the N+1 reserve of n after the batch (MiB)",
    )


def _use(m: pyo.ConcreteModel, p: BatchProblem, n: str, kind: str):  # noqa: ANN202
    """Σ_j usage_j,kind · x[j,n] + Σ_j secondary usage · y[j,n] (zero terms left out, so
    a row no candidate role draws on is a constant and is skipped: such a row may be
    violated already, e.g. vCPUs on a node that can only be a secondary)."""
    prim, sec = p.kinds_on
    inst = p.instance
    return sum(
        inst[j].primary_usage[kind] * m.x[j, n]
        for j in prim[n]
        if inst[j].primary_usage.get(kind, 0)
    ) + sum(
        inst[j].secondary_usage[kind] * m.y[j, n]
        for j in sec[n]
        if inst[j].secondary_usage.get(kind, 0)
    )


def _reserve(m: pyo.ConcreteModel, p: BatchProblem, n: str):  # noqa: ANN202
    return m.r[n] if n in m.r else p.node[n].reserve_mib


def _row(p: BatchProblem, n: str, kind: str) -> CapacityRow:
    return next(r for r in p.node[n].rows if r.kind == kind)


def define_placement(m: pyo.ConcreteModel, p: BatchProblem) -> None:
    """Each kind placed at most `count` times; a drbd instance's secondary in its primary's
    group and on another node; pairs that fail only together forbidden."""

    # place: Σ_n x[j,n] <= count_j  (multi-allocate: the rest fails)
    def place_rule(_m, j):  # noqa: ANN001, ANN202
        placed = sum(m.x[j, n] for n in p.primaries[j])
        if isinstance(placed, int):
            return pyo.Constraint.Skip
        return placed <= p.instance[j].count

    m.place = pyo.Constraint(m.J, rule=place_rule)
    groups = sorted({n.group for n in p.nodes})
    drbd_j = [i.name for i in p.instances if i.drbd]

    # pair_group: Σ_{s in g} y[j,s] = Σ_{p in g} x[j,p]  (drbd: one secondary, same group)
    def pair_group_rule(_m, j, g):  # noqa: ANN001, ANN202
        secs = sum(m.y[j, n] for n in p.secondaries[j] if p.node[n].group == g)
        prims = sum(m.x[j, n] for n in p.primaries[j] if p.node[n].group == g)
        if isinstance(secs, int) and isinstance(prims, int):
            return pyo.Constraint.Skip
        return secs == prims

    m.pair_group = pyo.Constraint([(j, g) for j in drbd_j for g in groups], rule=pair_group_rule)
    # distinct: x[j,n] + y[j,n] <= 1  (primary and secondary differ)
    m.distinct = pyo.Constraint(
        [(j, n) for j, n in m.JS if (j, n) in m.JP],
        rule=lambda _m, j, n: m.x[j, n] + m.y[j, n] <= 1,
    )
    # forbidden: x[j,p] + y[j,s] <= 1  (pairs failing only together, via the peer reserve)
    m.forbidden = pyo.Constraint(
        [
            (i.name, a, b)
            for i in p.instances
            for a, b in sorted(i.forbidden_pairs)
            if (i.name, a) in m.JP and (i.name, b) in m.JS
        ],
        rule=lambda _m, j, a, b: m.x[j, a] + m.y[j, b] <= 1,
    )


def define_usage(m: pyo.ConcreteModel, p: BatchProblem) -> None:
    """u[n] is 1 on every node that takes something, and only such nodes take anything."""
    # used: count_j · u[n] >= x[j,n], u[n] >= y[j,n]
    m.used_p = pyo.Constraint(m.JP, rule=lambda _m, j, n: p.instance[j].count * m.u[n] >= m.x[j, n])
    m.used_s = pyo.Constraint(m.JS, rule=lambda _m, j, n: m.u[n] >= m.y[j, n])

    # used_cap: use(n, k) <= cap · u[n]  (a bin-packing cut: only used nodes take anything;
    # implied for integer u, it tightens the LP of the remaining-disk stage)
    def used_cap(_m, n, k):  # noqa: ANN001, ANN202
        row = _row(p, n, k)
        expr = _use(m, p, n, k)
        if isinstance(expr, (int, float)) or row.cap <= 0 or k == N1:
            return pyo.Constraint.Skip
        return expr <= row.cap * m.u[n]

    m.used_cap = pyo.Constraint(
        [(n, r.kind) for n in p.touched for r in p.node[n].rows], rule=used_cap
    )


def define_capacities(m: pyo.ConcreteModel, p: BatchProblem) -> None:
    """The node's capacity rows (`model.capacity`) after the batch, with and without the test
    instances still counted on it."""

    # cap: use(n, k) [+ r[n] for n1] <= cap   (the batch itself fits)
    def inst_row(_m, n, k):  # noqa: ANN001, ANN202
        expr = _use(m, p, n, k)
        if k == N1:
            expr = expr + _reserve(m, p, n)
        if isinstance(expr, (int, float)):
            return pyo.Constraint.Skip
        return expr <= _row(p, n, k).cap

    m.cap = pyo.Constraint([(n, r.kind) for n in p.touched for r in p.node[n].rows], rule=inst_row)
    # count: usage_t,k · a[n,t] + use(n, k) [+ r[n]] <= cap   (every row with usage_t,k > 0)
    count_rows = [
        (n, t, r.kind)
        for n, t in m.NT
        for r in p.node[n].rows
        if p.node[n].test_usage[t].get(r.kind, 0) > 0
    ]

    def count_row(_m, n, t, k):  # noqa: ANN001, ANN202
        expr = p.node[n].test_usage[t][k] * m.a[n, t] + _use(m, p, n, k)
        if k == N1:
            expr = expr + _reserve(m, p, n)
        return expr <= _row(p, n, k).cap

    m.count = pyo.Constraint(count_rows, rule=count_row)


def define_failover(m: pyo.ConcreteModel, p: BatchProblem) -> None:
    """A drbd secondary's failover memory (addSec), and the N+1 reserve it raises."""
    inst = p.instance
    # failover memory (addSec: f_j < free memory; on nodes not failing N+1 the n1 row implies
    # it): f_j · y[j,n] + Σ_k mem_k · x[k,n] <= unallocated - 1 (not for forthcoming
    # instances), the same on the forth counters for every drbd instance (where reserve_one
    # below holds for (j, n), r[n] >= f_j · y[j,n] and the n1 row Σ mem · x + r[n] <=
    # unallocated - 1 already imply the memory one, so it is left out)
    fo_forth = [(j, n) for j, n in m.JS if inst[j].failover_mib > 0]
    fo = [(j, n) for j, n in fo_forth if not inst[j].forthcoming and n not in m.r]
    m.failover = pyo.Constraint(
        fo,
        rule=lambda _m, j, n: (
            inst[j].failover_mib * m.y[j, n] + _use(m, p, n, "memory")
            <= p.node[n].unallocated_mib - 1
        ),
    )
    m.failover_forth = pyo.Constraint(
        fo_forth,
        rule=lambda _m, j, n: (
            inst[j].failover_mib * m.y[j, n] + _use(m, p, n, "memory_forth")
            <= p.node[n].free_memory_forth_mib - 1
        ),
    )
    # reserve, one instance per (j, s): with p* the primary of j,
    # r[s] >= peers_s[p*] + f_j when y[j,s] = 1, written as
    # r[s] >= Σ_{p in peers(s)} peers_s[p] · x[j,p] + f_j - M_js · (1 - y[j,s]),
    # M_js = f_j + max peers_s. Exact unless two new instances share the pair (p, s):
    reserving = [
        (j, s) for j, s in m.JS if s in m.r and not inst[j].forthcoming and inst[j].failover_mib > 0
    ]
    candidates = {j: set(ns) for j, ns in p.primaries.items()}

    def single_reserve(_m, j, s):  # noqa: ANN001, ANN202
        peers = p.node[s].peers_mib
        big_m = inst[j].failover_mib + max(peers.values(), default=0)
        held = sum(v * m.x[j, a] for a, v in peers.items() if a in candidates[j])
        return m.r[s] >= held + inst[j].failover_mib - big_m * (1 - m.y[j, s])

    m.reserve_one = pyo.Constraint(reserving, rule=single_reserve)
    # ... so for the pairs in `shared_pairs` (or all pairs when None) the sum is exact:
    # r[s] >= peers_s[p] + Σ_j f_j · z[j,p,s],  z[j,p,s] >= x[j,p] + y[j,s] - 1
    pairs = [
        (j, a, s)
        for j, s in reserving
        for a in p.primaries[j]
        if a != s
        and p.node[a].group == p.node[s].group
        and (p.shared_pairs is None or (a, s) in p.shared_pairs)
    ]
    m.z = pyo.Var(pairs, domain=pyo.Binary, doc="z[j,p,s] = 1 when j is on the pair (p, s)")
    m.z_and = pyo.Constraint(
        pairs, rule=lambda _m, j, a, s: m.z[j, a, s] >= m.x[j, a] + m.y[j, s] - 1
    )
    js_of: dict[tuple[str, str], list[str]] = {}
    for j, a, s in pairs:
        js_of.setdefault((a, s), []).append(j)
    # reserve: r[s] >= peers_s[p] + Σ_j f_j · z[j,p,s]
    m.reserve = pyo.Constraint(
        sorted(js_of),
        rule=lambda _m, a, s: (
            m.r[s]
            >= p.node[s].peers_mib.get(a, 0)
            + sum(inst[j].failover_mib * m.z[j, a, s] for j in js_of[(a, s)])
        ),
    )


def define_exclusion(m: pyo.ConcreteModel, p: BatchProblem) -> None:
    """Exclusion tags between new instances (htools' FailTags; nodes already hosting a tag
    were screened out). Every primary adds its tags to the node, but only a non-forthcoming
    instance is checked against them, in request order."""
    candidates = {j: set(ns) for j, ns in p.primaries.items()}
    checked = [i for i in p.instances if i.exclusion_tags and not i.forthcoming]
    unchecked = [i for i in p.instances if i.exclusion_tags and i.forthcoming]
    # tag_once: Σ_{non-forthcoming j with tag} x[j,n] <= 1
    once = sorted(
        {(tag, n) for i in checked for tag in i.exclusion_tags for n in p.primaries[i.name]}
    )
    m.tag_once = pyo.Constraint(
        once,
        rule=lambda _m, tag, n: (
            sum(
                m.x[i.name, n]
                for i in checked
                if tag in i.exclusion_tags and n in candidates[i.name]
            )
            <= 1
        ),
    )
    # tag_order: x[j,n] + x[k,n] <= 1 for forthcoming k before non-forthcoming j, sharing a tag
    order = sorted(
        (j.name, k.name, n)
        for j in checked
        for k in unchecked
        if k.order < j.order and set(j.exclusion_tags) & set(k.exclusion_tags)
        for n in candidates[j.name] & candidates[k.name]
    )
    m.tag_order = pyo.Constraint(order, rule=lambda _m, j, k, n: m.x[j, n] + m.x[k, n] <= 1)


def define_symmetry(m: pyo.ConcreteModel, p: BatchProblem) -> None:
    """Identical drbd instances (which cannot share a count variable): the later one has the
    later primary, Σ_n rank_n · x[j',n] <= Σ_n rank_n · x[j,n] for j' = same_as(j) (an
    unplaced instance counts 0, so unplaced ones come first); permuting them keeps
    optimality."""

    def rank_sum(j: str):  # noqa: ANN202
        return sum((p.node[n].rank + 1) * m.x[j, n] for n in p.primaries[j])

    twins = [i.name for i in p.instances if i.same_as is not None and i.same_as in p.instance]
    # twins: rank_sum(same_as(j)) <= rank_sum(j)
    m.twins = pyo.Constraint(
        twins, rule=lambda _m, j: rank_sum(p.instance[j].same_as) <= rank_sum(j)
    )


def define_objective_terms(m: pyo.ConcreteModel, p: BatchProblem) -> None:
    """placed, on_last_resort, lost[t] = Σ_n (before − after), remaining disk on used nodes."""
    m.placed = pyo.Expression(expr=sum(m.x[j, n] for j, n in m.JP))
    m.on_last_resort = pyo.Expression(expr=sum(m.x[j, n] for j, n in m.JP if n in p.last_resort))
    m.lost = pyo.Expression(
        range(p.n_tests),
        rule=lambda _m, t: sum(m.before[n, tt] - m.a[n, tt] for n, tt in m.NT if tt == t),
    )
    m.remaining_disk = pyo.Expression(
        expr=sum(p.node[n].free_disk_mib * m.u[n] for n in p.touched)
        - sum(_use(m, p, n, "disk") for n in p.touched)
    )


def build_batch(p: BatchProblem) -> pyo.ConcreteModel:
    """The joint placement model of a dedicated multi-allocate (see `BatchProblem`)."""
    m = pyo.ConcreteModel(name="dedicated_batch")
    define_sets(m, p)
    define_variables(m, p)
    define_placement(m, p)
    define_usage(m, p)
    define_capacities(m, p)
    define_failover(m, p)
    define_exclusion(m, p)
    define_symmetry(m, p)
    define_objective_terms(m, p)
    return m


def shared_pairs_used(m: pyo.ConcreteModel) -> frozenset[tuple[str, str]]:
    """(primary, secondary) pairs that carry two or more reserving new drbd instances."""
    on_pair: dict[tuple[str, str], int] = {}
    placed = {j: n for j, n in m.JP if pyo.value(m.x[j, n]) > 0.5}
    for j, s in m.reserve_one:
        if j in placed and pyo.value(m.y[j, s]) > 0.5:
            key = (placed[j], s)
            on_pair[key] = on_pair.get(key, 0) + 1
    return frozenset(k for k, n in on_pair.items() if n > 1)


def batch_objectives(m: pyo.ConcreteModel, p: BatchProblem) -> list[Objective]:
    """placed (max), [instances on last-resort groups (min)], lost_0 … lost_{T-1} (min),
    remaining disk on the nodes used (min)."""
    objs = [Objective("placed", m.placed, "max")]
    if p.has_last_resort:
        objs.append(Objective("on_last_resort", m.on_last_resort, "min"))
    objs += [Objective(f"lost_{t}", m.lost[t], "min") for t in range(p.n_tests)]
    objs.append(Objective("remaining_disk_mib", m.remaining_disk, "min"))
    return objs


def pin_objectives(m: pyo.ConcreteModel, objs: list[Objective], values: tuple[float, ...]) -> None:
    """pinned[k]: objective k == values[k] (rounded; every batch objective is integral).

    With the values of a looser model's lexicographic optimum, a solution of the pinned model
    is a lexicographic optimum of this one (nothing here can beat the looser optimum)."""
    m.pinned = pyo.Constraint(
        range(len(objs)), rule=lambda _m, k: objs[k].expr == float(round(values[k]))
    )


def unpin_objectives(m: pyo.ConcreteModel) -> None:
    m.del_component(m.pinned)


def batch_solution(
    m: pyo.ConcreteModel, p: BatchProblem
) -> dict[str, list[tuple[str, str | None]]]:
    """kind j -> its placements (primary, secondary) in the loaded solution, one entry per
    placed instance, primaries in node order; unplaced instances have no entry."""
    out: dict[str, list[tuple[str, str | None]]] = {}
    for j, n in m.JP:
        out.setdefault(j, []).extend([(n, None)] * int(round(pyo.value(m.x[j, n]))))
    for j, s in m.JS:
        if pyo.value(m.y[j, s]) > 0.5 and out.get(j):
            out[j] = [(out[j][0][0], s)]
    return {j: v for j, v in out.items() if v}


# --------------------------------------------------------------------------------------
# allocate: one instance, constant metrics per candidate
# --------------------------------------------------------------------------------------


def single_representatives(
    cands: tuple[SingleCandidate, ...], drbd: bool
) -> tuple[list[str], list[str]]:
    """The possible primaries and secondaries, interchangeable candidates left out (exact).

    Candidates of one group with the same lost vector and remaining disk in a role differ
    only in the tie-break, which prefers the later one: of each such class the latest
    candidate is enough, and for drbd the latest two (the latest may be the other end of
    the pair). Nodes in a pair with an existing failover reservation stay individually.
    On a dedicated group of identical nodes this leaves a handful of binaries.
    """
    pinned = {c.name for c in cands if drbd and c.secondary_lost_with}
    pinned.update(p for c in cands if drbd for p in c.secondary_lost_with)
    keep = 2 if drbd else 1

    def role(key: Callable[[SingleCandidate], tuple | None]) -> list[str]:
        classes: dict[tuple, list[SingleCandidate]] = {}
        chosen = []
        for c in cands:
            k = key(c)
            if k is None:
                continue
            if c.name in pinned:
                chosen.append(c)
            else:
                classes.setdefault(k, []).append(c)
        for members in classes.values():
            chosen.extend(sorted(members, key=lambda c: c.rank)[-keep:])
        return [c.name for c in sorted(chosen, key=lambda c: c.rank)]

    prim = role(
        lambda c: None if c.primary_lost is None else (c.group, c.primary_lost, c.primary_disk_mib)
    )
    sec = role(
        lambda c: (
            None
            if not drbd or c.secondary_lost is None
            else (c.group, c.secondary_lost, c.secondary_disk_mib)
        )
    )
    return prim, sec


@dataclass(frozen=True)
class SingleProblem:
    """hail's dedicated allocate of one instance: the candidates' constant metrics."""

    candidates: tuple[SingleCandidate, ...]
    n_tests: int
    drbd: bool

    @cached_property
    def candidate(self) -> dict[str, SingleCandidate]:
        return {c.name: c for c in self.candidates}

    @cached_property
    def representatives(self) -> tuple[list[str], list[str]]:
        return single_representatives(self.candidates, self.drbd)

    @cached_property
    def pairs(self) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        """(p, s) pairs where s reserves failover memory for p already: those that fail,
        and those whose secondary loses a different vector."""
        prim, sec = self.representatives
        in_p = set(prim)
        by = self.candidate
        special = [(p, s) for s in sec for p in by[s].secondary_lost_with if p in in_p and p != s]
        bad = [(p, s) for p, s in special if by[s].secondary_lost_with[p] is None]
        good = [(p, s) for p, s in special if by[s].secondary_lost_with[p] is not None]
        return bad, good

    @property
    def needs_tie_break(self) -> bool:
        """The tie-break stage matters only if two choices can share lost vector and disk."""
        prim, _ = self.representatives
        by = self.candidate
        metrics = {(by[p].primary_lost, by[p].primary_disk_mib) for p in prim}
        return self.drbd or len(metrics) < len(prim)

    @cached_property
    def lost_radix(self) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        """Each lost_t lies in [lo_t, hi_t]: the primary's value plus any secondary's."""
        prim, sec = self.representatives
        by = self.candidate
        secondary_values = [
            v
            for s in sec
            for v in (by[s].secondary_lost, *by[s].secondary_lost_with.values())
            if v is not None
        ]
        return lost_radix(
            [by[p].primary_lost for p in prim],
            secondary_values if self.drbd else [],
            self.n_tests,
        )


def define_single_choice(m: pyo.ConcreteModel, p: SingleProblem) -> None:
    """One primary; for drbd one secondary in its group, on another node, and w[p,s] = x·y
    for the pairs whose secondary already reserves memory for the primary."""
    prim, sec = p.representatives
    by = p.candidate
    m.P = pyo.Set(initialize=prim, ordered=True, doc="possible primaries")
    m.S = pyo.Set(initialize=sec, ordered=True, doc="possible secondaries (generic)")
    m.T = pyo.RangeSet(0, p.n_tests - 1) if p.n_tests else pyo.Set(initialize=[])
    m.x = pyo.Var(m.P, domain=pyo.Binary, doc="x[p] = 1: primary is p")
    m.y = pyo.Var(m.S, domain=pyo.Binary, doc="y[s] = 1: secondary is s")
    # one_primary: Σ_p x[p] = 1
    m.one_primary = pyo.Constraint(expr=sum(m.x[n] for n in m.P) == 1)
    if not p.drbd:
        return
    groups = sorted({by[n].group for n in prim + sec})
    # same_group: Σ_{s in g} y[s] = Σ_{p in g} x[p]  (one secondary, in the primary's group)
    m.same_group = pyo.Constraint(
        groups,
        rule=lambda _m, g: (
            sum(m.y[s] for s in m.S if by[s].group == g)
            == sum(m.x[n] for n in m.P if by[n].group == g)
        ),
    )
    # distinct: x[n] + y[n] <= 1
    both = [n for n in prim if n in set(sec)]
    m.distinct = pyo.Constraint(both, rule=lambda _m, n: m.x[n] + m.y[n] <= 1)
    bad, good = p.pairs
    # forbidden: x[p] + y[s] <= 1  (s cannot reserve failover memory for p)
    m.forbidden = pyo.Constraint(bad, rule=lambda _m, a, s: m.x[a] + m.y[s] <= 1)
    m.w = pyo.Var(good, domain=pyo.Binary, doc="w[p,s] = 1 when the pair is (p, s)")
    # pair_and: w[p,s] >= x[p] + y[s] - 1
    m.pair_and = pyo.Constraint(good, rule=lambda _m, a, s: m.w[a, s] >= m.x[a] + m.y[s] - 1)
    # pair_p, pair_s: w[p,s] <= x[p], w[p,s] <= y[s]  (so w = x·y whatever the signs)
    m.pair_p = pyo.Constraint(good, rule=lambda _m, a, s: m.w[a, s] <= m.x[a])
    m.pair_s = pyo.Constraint(good, rule=lambda _m, a, s: m.w[a, s] <= m.y[s])


def define_single_metric(m: pyo.ConcreteModel, p: SingleProblem) -> None:
    """lost[t] = primary's loss + secondary's (corrected by w on reserving pairs), the
    remaining disk of both nodes, and hail's tie-break (the later candidate wins)."""
    by = p.candidate
    lost_expr: list = [sum(by[n].primary_lost[t] * m.x[n] for n in m.P) for t in range(p.n_tests)]
    disk_expr = sum(by[n].primary_disk_mib * m.x[n] for n in m.P)
    tie = sum(by[n].rank * m.x[n] for n in m.P)
    if p.drbd:
        _, good = p.pairs
        for t in range(p.n_tests):
            lost_expr[t] = (
                lost_expr[t]
                + sum(by[s].secondary_lost[t] * m.y[s] for s in m.S)
                + sum(
                    (by[s].secondary_lost_with[a][t] - by[s].secondary_lost[t]) * m.w[a, s]
                    for a, s in good
                )
            )
        disk_expr = disk_expr + sum(by[s].secondary_disk_mib * m.y[s] for s in m.S)
        width = max((c.rank for c in p.candidates), default=0) + 1
        tie = width * tie + sum(by[s].rank * m.y[s] for s in m.S)
    m.lost = pyo.Expression(range(p.n_tests), rule=lambda _m, t: lost_expr[t])
    m.remaining_disk = pyo.Expression(expr=disk_expr)
    m.tie = pyo.Expression(expr=tie, doc="hail's iteration order: the later candidate wins")


def build_single(p: SingleProblem) -> pyo.ConcreteModel:
    """hail's dedicated allocate: pick the candidate (pair) with the least metric, last wins.

    For drbd the metric of (p, s) is primary_lost[p] + secondary_lost(s | p) and the disk is
    primary_disk[p] + secondary_disk[s]; the secondary's loss depends on p only when s
    already reserves failover memory for p, which `w[p,s]` switches on.
    """
    m = pyo.ConcreteModel(name="dedicated_single")
    define_single_choice(m, p)
    define_single_metric(m, p)
    return m


#: Largest value of the lost vector read as one integer that is still exact for the solver.
MAX_LOST_RANK = 2**40


def lost_radix(
    primary: list[tuple[int, ...]], secondary: list[tuple[int, ...]], n_tests: int
) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(lowest values, weights) to read a lost vector as one integer, or None if too large.

    With every lost_t in [lo_t, hi_t], Σ_t w_t·(lost_t − lo_t), where w_{T−1} = 1 and
    w_t = w_{t+1}·(hi_{t+1} − lo_{t+1} + 1), orders lost vectors exactly as the
    lexicographic order does: one stage instead of T.
    """
    if not primary:
        return None
    lo, hi = [], []
    for t in range(n_tests):
        p_vals = [v[t] for v in primary]
        s_vals = [v[t] for v in secondary] or [0]
        lo.append(min(p_vals) + min(s_vals))
        hi.append(max(p_vals) + max(s_vals))
    weights = [1] * n_tests
    for t in range(n_tests - 2, -1, -1):
        weights[t] = weights[t + 1] * (hi[t + 1] - lo[t + 1] + 1)
    if n_tests and weights[0] * (hi[0] - lo[0] + 1) > MAX_LOST_RANK:
        return None
    return tuple(lo), tuple(weights)


def single_objectives(m: pyo.ConcreteModel, p: SingleProblem) -> list[Objective]:
    """The lost vector (min; one stage when `lost_radix` allows, else lost_0 … lost_{T-1}),
    remaining disk (min), tie-break (max; left out when the stages before it already have a
    single optimum)."""
    if p.lost_radix is not None and p.n_tests > 1:
        _, weights = p.lost_radix
        rank = sum(w * m.lost[t] for t, w in enumerate(weights))
        objs = [Objective("lost_vector", rank, "min")]
    else:
        objs = [Objective(f"lost_{t}", m.lost[t], "min") for t in range(p.n_tests)]
    objs.append(Objective("remaining_disk_mib", m.remaining_disk, "min"))
    if p.needs_tie_break:
        objs.append(Objective("tie_break", m.tie, "max"))
    return objs


def single_lost_claim(p: SingleProblem, objective: tuple[float, ...]) -> tuple[int, ...]:
    """The lost vector the solver's stage values claim (decoding the one-stage form)."""
    if p.lost_radix is None or p.n_tests <= 1:
        return tuple(int(round(v)) for v in objective[: p.n_tests])
    lo, weights = p.lost_radix
    rest = int(round(objective[0])) - sum(w * low for w, low in zip(weights, lo, strict=True))
    claim = []
    for low, w in zip(lo, weights, strict=True):
        digit, rest = divmod(rest, w)
        claim.append(low + digit)
    return tuple(claim)


def single_solution(m: pyo.ConcreteModel, p: SingleProblem) -> tuple[str, str | None]:
    """The chosen (primary, secondary)."""
    primary = next(n for n in m.P if pyo.value(m.x[n]) > 0.5)
    secondary = next((s for s in m.S if pyo.value(m.y[s]) > 0.5), None) if p.drbd else None
    return primary, secondary
