"""Placing a batch of instances under htools' strict rows, as Pyomo components (docs/hail.md).

The feasibility part every joint placement model shares: each instance (kind) placed at most
`count` times on nodes that admit it alone, drbd secondaries in the primary's group on another
node, every capacity row of every node respected by the batch as a whole, a secondary's
failover memory and the N+1 reserve it raises, exclusion tags between new instances, and the
order of identical drbd instances. What htools adds with force (`NewInstance.forced`, a move
off an offline node) is held to the hard rows alone, and may make a node fail N+1 (docs/
placement.md, "Moves off offline nodes"). formulations/dedicated.py adds the dedicated allocation
counts and objectives; formulations/placement.py the cluster score.

Sets
    N, J               candidate nodes, new instances (kinds)
    JP, JS             (kind, primary) and (kind, secondary) candidates
    NT                 (node, test instance) counts that may change (dedicated groups)
Variables
    x[j,n] ∈ ℤ≥0       instances of kind j with primary n
    y[j,s] ∈ {0,1}     drbd instance j has secondary s
    a[n,t] ∈ ℤ≥0       copies of test instance t still fitting on n (dedicated groups)
    u[n] ∈ {0,1}       n receives something
    r[n] ∈ ℤ           n's N+1 reserve after the batch (MiB)
    f[n] ∈ {0,1}       n ends failing N+1 (nodes a forced placement may make fail)
    z[j,p,s] ∈ {0,1}   j sits on the pair (p, s) (pairs whose reserve is summed exactly)
"""

from __future__ import annotations

import pyomo.core as pyo

from formulations.deadline import build_families
from formulations.objective import Objective
from model.batch import BatchProblem, NewInstance
from model.capacity import DISK, MEMORY, MEMORY_FORTH, N1, SPINDLES, CapacityRow

#: Rows htools checks even when it adds with force (`Node.addPriEx True`, model.capacity
#: `hard_rows`); the disk row's reserve (loDsk) is soft, its last MiB hard (`hard_disk`).
HARD_KINDS = frozenset({MEMORY, SPINDLES})


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
    # continuous: r is bounded below by whole MiB terms, so its least is whole, and with r
    # integer HiGHS 1.12 fixed columns by reduced cost over r's wide ranges and proved a bound
    # above a feasible plan (docs/placement.md, "A third wrong bound")
    m.r = pyo.Var(
        p.reserve_nodes,
        domain=pyo.Reals,
        bounds=lambda _m, n: (p.node[n].reserve_mib, _reserve_most(p, n)),
        doc="r[n]: the N+1 reserve of n after the batch (MiB)",
    )
    m.NF = pyo.Set(initialize=p.may_fail_n1, ordered=True, doc="nodes that may fail N+1")
    m.f = pyo.Var(m.NF, domain=pyo.Binary, doc="f[n] = 1: n ends failing N+1")


def _reserve_most(p: BatchProblem, n: str) -> int:
    """The most n's reserve can be after the batch: the unallocated memory (strict adds keep
    it below), or, where a forced placement may make n fail N+1, the new secondaries' sum."""
    node = p.node[n]
    most = max(node.reserve_mib, node.unallocated_mib)
    if n in p.may_fail_n1:
        most = max(
            most, node.reserve_mib + sum(p.instance[j].failover_mib for j in p.kinds_on[1][n])
        )
    return most


def _placements_on(p: BatchProblem, n: str, kind: str, forced: bool):  # noqa: ANN202
    """(instance, role, usage) of the adds on n drawing on the row, forced or not: an
    instance placed back where it is (`NewInstance.stay`) is no add, nor is a primary that
    stays in any case (`kept_primary`: on the node all along, in every row)."""
    prim, sec = p.kinds_on
    for role, names in (("p", prim[n]), ("s", sec[n])):
        for j in names:
            inst = p.instance[j]
            usage = (inst.primary_usage if role == "p" else inst.secondary_usage).get(kind, 0)
            kept = role == "p" and inst.kept_primary
            here = kept or (inst.stay is not None and inst.stay[0 if role == "p" else 1] == n)
            if usage and (role in inst.forced) == forced and not here:
                yield j, role, usage


def _order_rows(p: BatchProblem) -> list[tuple[str, str, str, str]]:
    """(node, soft row, instance, role) of every unforced add with a forced one before it
    on the node (request order) drawing on the same row."""
    rows = []
    for n in p.touched:
        for r in p.node[n].rows:
            if r.kind in HARD_KINDS or r.kind == N1:
                continue
            forced = [p.instance[j].order for j, _, _ in _placements_on(p, n, r.kind, True)]
            if not forced:
                continue
            first = min(forced)
            rows += [
                (n, r.kind, j, role)
                for j, role, _ in _placements_on(p, n, r.kind, False)
                if p.instance[j].order > first
            ]
    return rows


def _forced_before(m: pyo.ConcreteModel, p: BatchProblem, n: str, kind: str, order: int) -> list:
    """(usage, variable) of the forced placements on n before `order` drawing on the row."""
    return [
        (usage * p.instance[j].count, m.x[j, n] if role == "p" else m.y[j, n])
        for j, role, usage in _placements_on(p, n, kind, True)
        if p.instance[j].order < order
    ]


def _use(m: pyo.ConcreteModel, p: BatchProblem, n: str, kind: str, forced: bool = True):  # noqa: ANN202
    """Σ_j usage_j,kind · x[j,n] + Σ_j secondary usage · y[j,n] (zero terms left out, so
    a row no candidate role draws on is a constant and is skipped: such a row may be
    violated already, e.g. vCPUs on a node that can only be a secondary). forced=False
    leaves out the roles added with force (`NewInstance.forced`): a soft row holds for
    the others, each checked on a node holding at least all of them."""
    prim, sec = p.kinds_on
    inst = p.instance
    return sum(
        inst[j].primary_usage[kind] * m.x[j, n]
        for j in prim[n]
        if inst[j].primary_usage.get(kind, 0) and (forced or "p" not in inst[j].forced)
    ) + sum(
        inst[j].secondary_usage[kind] * m.y[j, n]
        for j in sec[n]
        if inst[j].secondary_usage.get(kind, 0) and (forced or "s" not in inst[j].forced)
    )


def _checked_use(m: pyo.ConcreteModel, p: BatchProblem, n: str, kind: str):  # noqa: ANN202
    """What a row holds: every placement on a hard row, the unforced ones on a soft row."""
    return _use(m, p, n, kind, forced=kind in HARD_KINDS)


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


def define_usage(m: pyo.ConcreteModel, p: BatchProblem, everywhere: bool = True) -> None:
    """u[n] is 1 on every node that takes something, and only such nodes take anything.
    Not `everywhere`: u only where a row needs it (`BatchProblem.short_without_stays`);
    the score's models use no remaining disk, and the rows were a quarter of a 200-node
    evacuation's."""
    used = set(p.touched) if everywhere else p.short_without_stays
    # used: count_j · u[n] >= x[j,n], u[n] >= y[j,n]
    m.used_p = pyo.Constraint(
        [(j, n) for j, n in m.JP if n in used],
        rule=lambda _m, j, n: p.instance[j].count * m.u[n] >= m.x[j, n],
    )
    m.used_s = pyo.Constraint(
        [(j, n) for j, n in m.JS if n in used], rule=lambda _m, j, n: m.u[n] >= m.y[j, n]
    )
    if not everywhere:
        return

    # used_cap: use(n, k) <= cap · u[n]  (a bin-packing cut: only used nodes take anything;
    # implied for integer u, it tightens the LP of the remaining-disk stage)
    def used_cap(_m, n, k):  # noqa: ANN001, ANN202
        row = _row(p, n, k)
        expr = _checked_use(m, p, n, k)
        if isinstance(expr, (int, float)) or row.cap <= 0 or k == N1:
            return pyo.Constraint.Skip
        return expr <= row.cap * m.u[n]

    m.used_cap = pyo.Constraint(
        [(n, r.kind) for n in p.touched for r in p.node[n].rows], rule=used_cap
    )


def define_capacities(m: pyo.ConcreteModel, p: BatchProblem) -> None:
    """The node's capacity rows (`model.capacity`) after the batch, with and without the test
    instances still counted on it."""

    may_fail = set(p.may_fail_n1)

    # leaving: l[n] >= 1 − x[j,n] / count_j (y for secondaries) for every (j, role) that may
    # be placed back on n: l[n] = 0 only where everything stays (htools keeps the flag it
    # loaded); on nodes what is placed back may make fail N+1 though they do not as loaded
    untouched = [
        n for n in may_fail if p.node[n].n1_with_stays and not p.node[n].fails_n1_untouched
    ]
    m.leaving = pyo.Var(untouched, domain=pyo.Binary, doc="l[n] = 1: something leaves n")
    m.leaving_by = pyo.Constraint(
        [(n, j, role) for n in untouched for j, role in p.stays_on.get(n, ())],
        rule=lambda _m, n, j, role: (
            m.leaving[n] >= 1 - (m.x[j, n] if role == "p" else m.y[j, n]) / p.instance[j].count
        ),
    )
    short = p.short_without_stays

    # cap: use(n, k) [+ r[n] for n1] <= cap   (the batch itself fits; soft rows without the
    # forced placements)
    # n1 where forced placements may make n fail: use(n) + r[n] <= cap + M_n · f[n]  (a node
    # that ends not failing N+1 holds it with everything; htools checks no N+1 on a node
    # failing already), + M_n · (1 − l[n]) where a node left as it is keeps its loaded flag
    def inst_row(_m, n, k):  # noqa: ANN001, ANN202
        if k == N1 and n in may_fail:
            expr = _use(m, p, n, k) + _reserve(m, p, n)
            cap = _row(p, n, k).cap
            inst = p.instance
            memory = sum(inst[j].primary_usage.get(N1, 0) * inst[j].count for j in p.kinds_on[0][n])
            big_m = max(0, memory + _reserve_most(p, n) - cap)
            if n in m.leaving:
                return expr <= cap + big_m * m.f[n] + big_m * (1 - m.leaving[n])
            if n in short:  # + M_n · (1 − u[n]): its loaded flag while nothing lands there
                return expr <= cap + big_m * m.f[n] + big_m * (1 - m.u[n])
            return expr <= cap + big_m * m.f[n]
        expr = _checked_use(m, p, n, k)
        if k == N1:
            expr = expr + _reserve(m, p, n)
        if isinstance(expr, (int, float)):
            return pyo.Constraint.Skip
        return expr <= _row(p, n, k).cap

    m.cap = pyo.Constraint([(n, r.kind) for n in p.touched for r in p.node[n].rows], rule=inst_row)
    # hard_disk: use(n, disk) <= max(free disk - 1, disk cap)  (forced placements: the disk
    # without its reserve; the disk row's cap where it was raised to hold what stays there)
    hard_disk = [
        n
        for n in p.touched
        if any(r.kind == DISK for r in p.node[n].rows) and any(_placements_on(p, n, DISK, True))
    ]
    m.hard_disk = pyo.Constraint(
        hard_disk,
        rule=lambda _m, n: (
            _use(m, p, n, DISK) <= max(p.node[n].free_disk_mib - 1, _row(p, n, DISK).cap)
        ),
    )
    # order: use_unforced(n, k) + Σ_{i forced, before j} u_i,k · x[i,n] <= cap + M · (1 − x[j,n])
    # (y for secondaries): a soft row checked when j is added on n without force sees the
    # forced placements made there before it, in request order (htools' order); M = their sum
    order_rows = _order_rows(p)

    def order_row(_m, n, k, j, role):  # noqa: ANN001, ANN202
        earlier = _forced_before(m, p, n, k, p.instance[j].order)
        most = sum(coef for coef, _ in earlier)
        own = m.x[j, n] if role == "p" else m.y[j, n]
        return _use(m, p, n, k, forced=False) + sum(coef * var for coef, var in earlier) <= _row(
            p, n, k
        ).cap + most * (1 - own)

    m.order = pyo.Constraint(order_rows, rule=order_row)
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
    # unallocated - 1 already imply the memory one, so it is left out). Soft checks: not for
    # a forced secondary nor one that stays where it is (no add, nothing checked), without
    # forced primaries, and none where forced placements may make the node fail N+1
    # (primaries added after the secondary are checked against the reserve only while the
    # node does not fail; where it ends not failing the n1 row implies it). The caps are the
    # memory rows' (unallocated - 1, free_forth - 1), raised where primaries that stay use
    # more (joint.py `_group_problem`): a secondary then finds no room, the row stays feasible
    fo_forth = [
        (j, n)
        for j, n in m.JS
        if inst[j].failover_mib > 0
        and "s" not in inst[j].forced
        and not (inst[j].stay is not None and inst[j].stay[1] == n)
    ]
    may_fail = set(p.may_fail_n1)
    fo = [
        (j, n)
        for j, n in fo_forth
        if not inst[j].forthcoming and n not in m.r and n not in may_fail
    ]
    m.failover = pyo.Constraint(
        fo,
        rule=lambda _m, j, n: (
            inst[j].failover_mib * m.y[j, n] + _use(m, p, n, MEMORY, forced=False)
            <= _row(p, n, MEMORY).cap
        ),
    )
    # the forth rows share one sum per node: F[n] ≥ f_j · y[j,n] for every j, and
    # F[n] + Σ_k mem_k · x[k,n] <= free_forth - 1 (the same rows projected; one node sum
    # instead of one per instance, 135,000 nonzeros fewer on a 200-node evacuation of 40)
    forth_nodes = sorted({n for _, n in fo_forth})
    m.failover_most = pyo.Var(forth_nodes, domain=pyo.NonNegativeReals)
    m.failover_forth_each = pyo.Constraint(
        fo_forth,
        rule=lambda _m, j, n: m.failover_most[n] >= inst[j].failover_mib * m.y[j, n],
    )
    m.failover_forth = pyo.Constraint(
        forth_nodes,
        rule=lambda _m, n: (
            m.failover_most[n] + _use(m, p, n, MEMORY_FORTH, forced=False)
            <= _row(p, n, MEMORY_FORTH).cap
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
    # z_only: z[j,p,s] <= x[j,p], z[j,p,s] <= y[j,s]  (z exact: the joint model's reserve is
    # also bounded from above by it, formulations/placement.py define_reserve_exact)
    m.z_primary = pyo.Constraint(pairs, rule=lambda _m, j, a, s: m.z[j, a, s] <= m.x[j, a])
    m.z_secondary = pyo.Constraint(pairs, rule=lambda _m, j, a, s: m.z[j, a, s] <= m.y[j, s])
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
    instance is checked against them, in request order; an instance placed back where it is
    (`NewInstance.stay`), or whose primary stays (`kept_primary`), is not: htools checks
    nothing of a primary that does not move."""
    candidates = {j: set(ns) for j, ns in p.primaries.items()}
    for i in p.instances:
        if i.kept_primary or "p" in i.forced:  # forced: not checked (a soft check)
            candidates[i.name].clear()
        elif i.stay is not None:
            candidates[i.name].discard(i.stay[0])
    checked = [i for i in p.instances if i.exclusion_tags and not i.forthcoming]
    unchecked = [i for i in p.instances if i.exclusion_tags and i.forthcoming]
    # tag_once: Σ_{non-forthcoming j with tag} x[j,n] <= 1
    once = sorted(
        {(tag, n) for i in checked for tag in i.exclusion_tags for n in candidates[i.name]}
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


def _stay(m: pyo.ConcreteModel, p: BatchProblem, i: NewInstance):  # noqa: ANN202
    """1 when instance i is placed back where it is: on its primary now, or, when that is its
    only primary (a drbd secondary-only evacuation), on its secondary now; the candidates pair
    the two (`NewInstance.stay`)."""
    assert i.stay is not None
    primary, secondary = i.stay
    if i.drbd and secondary is not None and p.primaries[i.name] == [primary]:
        return m.y[i.name, secondary]
    return m.x[i.name, primary]


def define_objective_terms(m: pyo.ConcreteModel, p: BatchProblem) -> None:
    """placed, on_last_resort, stayed, lost[t] = Σ_n (before − after), remaining disk on
    used nodes."""
    m.placed = pyo.Expression(expr=sum(m.x[j, n] for j, n in m.JP))
    m.on_last_resort = pyo.Expression(expr=sum(m.x[j, n] for j, n in m.JP if n in p.last_resort))
    # stayed = Σ_j stay_j  (instances placed back where they are)
    m.stayed = pyo.Expression(expr=sum(_stay(m, p, i) for i in p.instances if i.stay is not None))
    m.lost = pyo.Expression(
        range(p.n_tests),
        rule=lambda _m, t: sum(m.before[n, tt] - m.a[n, tt] for n, tt in m.NT if tt == t),
    )
    m.remaining_disk = pyo.Expression(
        expr=sum(p.node[n].free_disk_mib * m.u[n] for n in p.touched)
        - sum(_use(m, p, n, "disk") for n in p.touched)
    )


def build_batch(
    p: BatchProblem, usage: bool = True, deadline: float | None = None
) -> pyo.ConcreteModel:
    """The joint placement model of a dedicated multi-allocate (see `BatchProblem`); without
    `usage`, u[n] only where a capacity row needs it (models without the remaining disk).
    Past `deadline` (time.perf_counter()), the build stops between two families with
    formulations.deadline.OutOfTime."""
    m = pyo.ConcreteModel(name="dedicated_batch")
    build_families(
        (
            ("its sets", lambda: define_sets(m, p)),
            ("its variables", lambda: define_variables(m, p)),
            ("its placement rows", lambda: define_placement(m, p)),
            ("its usage rows", lambda: define_usage(m, p, everywhere=usage)),
            ("its capacity rows", lambda: define_capacities(m, p)),
            ("its failover rows", lambda: define_failover(m, p)),
            ("its exclusion rows", lambda: define_exclusion(m, p)),
            ("its symmetry rows", lambda: define_symmetry(m, p)),
            ("its objective terms", lambda: define_objective_terms(m, p)),
        ),
        deadline,
    )
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
