"""The least group score within K of hbal's steps (docs/balance.md, model/balance.py).

Each movable drbd instance i on (p, s) takes one class of final (model.balance.CLASSES):
stay c[i,stay], swap c[i,swap], (p,n) b[i,px,n], (s,n) b[i,sx,n], (n,p) b[i,xp,n],
(n,s) b[i,xs,n], or (x,y) c[i,xy] with x2[i,x], y2[i,y]; an externally mirrored one stays or
moves its primary to n, b[i,fa,n]. Its final primary and secondary indicators are sums of
these (`_primary_at`, `_secondary_at`), and its steps the class's fewest steps under hbal's
flags. Every per-node number htools scores or checks except the N+1 reserve is additive over
the instances on the node, so it is affine in the indicators:

    value_k[n] = now_k[n] + Σ_i dP_k[i,n] · (X[i,n] − [p_i = n]) + dS_k[i,n] · (Y[i,n] − [s_i = n])

The reserve r[n] = max_q peers_n[q] is exact (`define_reserve`): the pair of every class
but (x,y) is one variable; an (x,y) instance's pair is summed exactly where its product
z2[i,x,y] is in the model (`BalanceModelSpec.exact_pairs`), and counted on every primary
(an over-estimate, so a relaxation) elsewhere; the strategy adds the products a solution
uses and builds again.

The final state is a relaxation of hbal's sequence: a node that takes a new role passed the
strict check when it took it, with at least the load it ends with (every check is monotone
in the load), so it passes the row at the end (`define_capacity`). The N+1 flag (`define_n1`)
is recomputed on every node a step touches and kept as loaded elsewhere; a node that does not
fail N+1 now never fails it after checked steps. The order of the steps is found (or the
final cut off) by the strategy (solvers/strategies/balance.py).

The spreads are convex: σ_k ≥ sd_k is cut from below by tangent planes (`tangent_rows`),
added at each solution by the strategy, so the model's optimum is a lower bound of the least
score.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import pyomo.core as pyo

from formulations.deadline import build_families
from formulations.objective import Objective
from model.balance import (
    FA,
    PX,
    STAY,
    SWAP,
    SX,
    XP,
    XS,
    XY,
    BalanceData,
    MovableData,
    tag_keys,
)
from model.balance_bound import XY_PRIMARY, XY_SECONDARY
from model.capacity import (
    DISK,
    DISK_FORTH,
    MEMORY,
    SPINDLE_RATIO,
    SPINDLE_RATIO_FORTH,
    SPINDLES,
    SPINDLES_FORTH,
)
from model.placement import RESERVED, RESERVED_TOTAL, SD_METRICS, tangent
from model.score import WEIGHTS

#: rows a new secondary is checked against (addSecExEx: disk and spindles; its failover
#: memory and the N+1 reserve are the N+1 row's); a new primary meets every row it applies to
SECONDARY_ROWS = (DISK, DISK_FORTH, SPINDLES, SPINDLES_FORTH, SPINDLE_RATIO, SPINDLE_RATIO_FORTH)
#: the rows that hold with force (an offline node left, --ignore-soft-errors): hard checks
FORCED_ROWS = (MEMORY,)
ONE_STEP = (PX, SX, XP, XS)


@dataclass(frozen=True)
class BalanceModelSpec:
    """How the model is built beyond the data: the (x,y) pairs summed exactly, plans cut off
    (no order of their steps exists), and the objective (least score within K, or fewest
    steps to a target score)."""

    exact_pairs: frozenset[tuple[str, str, str]] = frozenset()  # (instance, x, y)
    fewest_steps_to: float | None = None  # the target score of --fewest-moves
    cuts: tuple[tuple[tuple[str, str, str | None], ...], ...] = field(default_factory=tuple)


def _vars_of(i: MovableData) -> list[tuple[str, str, str]]:
    """(class, node, role) of each one-step variable: node is the other node x."""
    out = []
    if not i.drbd:
        return [(FA, n, "p") for n in i.primaries if i.keeps(FA, n)]
    p, s = i.primary, i.secondary
    if PX in i.steps:
        out += [(PX, n, "s") for n in i.secondaries if n != p and i.keeps(PX, n)]
    if SX in i.steps and s in i.primaries:
        out += [(SX, n, "s") for n in i.secondaries if n != p and i.keeps(SX, n)]
    if XP in i.steps and p in i.secondaries:
        out += [(XP, n, "p") for n in i.primaries if n != s and i.keeps(XP, n)]
    if XS in i.steps:
        out += [(XS, n, "p") for n in i.primaries if n != s and i.keeps(XS, n)]
    return out


def define_choice(m: pyo.ConcreteModel, data: BalanceData, spec: BalanceModelSpec) -> None:
    """One class per instance, the (x,y) class's two nodes distinct:
    one:  c[i,stay] + c[i,swap] + c[i,xy] + Σ_{k,n} b[i,k,n] = 1
    xy:   Σ_x x2[i,x] = c[i,xy],  Σ_y y2[i,y] = c[i,xy],  x2[i,n] + y2[i,n] ≤ c[i,xy]
    z2:   z2[i,x,y] ≥ x2[i,x] + y2[i,y] − 1,  z2 ≤ x2[i,x],  z2 ≤ y2[i,y]"""
    inst = {i.name: i for i in data.instances}
    cls = []
    for i in data.instances:
        cls.append((i.name, STAY))
        if (
            i.drbd
            and SWAP in i.steps
            and i.keeps(SWAP)
            and i.secondary in i.primaries
            and i.primary in i.secondaries
        ):
            cls.append((i.name, SWAP))
        if i.drbd and XY in i.steps and _xy_nodes(i)[0] and _xy_nodes(i)[1]:
            cls.append((i.name, XY))
    m.C = pyo.Set(initialize=cls, dimen=2, ordered=True)
    m.c = pyo.Var(m.C, domain=pyo.Binary)
    m.B = pyo.Set(
        initialize=[(i.name, k, n) for i in data.instances for k, n, _ in _vars_of(i)],
        dimen=3,
        ordered=True,
    )
    m.b = pyo.Var(m.B, domain=pyo.Binary)
    xs_ = [(j, n) for j, k in cls if k == XY for n in _xy_nodes(inst[j])[0]]
    ys_ = [(j, n) for j, k in cls if k == XY for n in _xy_nodes(inst[j])[1]]
    m.X2 = pyo.Set(initialize=xs_, dimen=2, ordered=True)
    m.Y2 = pyo.Set(initialize=ys_, dimen=2, ordered=True)
    m.x2 = pyo.Var(m.X2, domain=pyo.Binary)
    m.y2 = pyo.Var(m.Y2, domain=pyo.Binary)
    b_of: dict[str, list] = defaultdict(list)
    for key in m.B:
        b_of[key[0]].append(key)
    x_of: dict[str, list] = defaultdict(list)
    y_of: dict[str, list] = defaultdict(list)
    for j, n in xs_:
        x_of[j].append(n)
    for j, n in ys_:
        y_of[j].append(n)
    names = [i.name for i in data.instances]
    # one: c[i,stay] + c[i,swap] + c[i,xy] + Σ b[i,k,n] = 1
    m.one = pyo.Constraint(
        names,
        rule=lambda _m, j: (
            sum(m.c[j, k] for k in (STAY, SWAP, XY) if (j, k) in m.C)
            + sum(m.b[key] for key in b_of[j])
            == 1
        ),
    )
    xy = [j for j, k in cls if k == XY]
    # xy_p: Σ_x x2[i,x] = c[i,xy]; xy_s: Σ_y y2[i,y] = c[i,xy]
    m.xy_p = pyo.Constraint(xy, rule=lambda _m, j: sum(m.x2[j, n] for n in x_of[j]) == m.c[j, XY])
    m.xy_s = pyo.Constraint(xy, rule=lambda _m, j: sum(m.y2[j, n] for n in y_of[j]) == m.c[j, XY])
    both = [(j, n) for j, n in xs_ if (j, n) in m.Y2]
    # xy_apart: x2[i,n] + y2[i,n] ≤ c[i,xy]
    m.xy_apart = pyo.Constraint(both, rule=lambda _m, j, n: m.x2[j, n] + m.y2[j, n] <= m.c[j, XY])
    pairs = sorted(
        (j, a, z) for j, a, z in spec.exact_pairs if (j, a) in m.X2 and (j, z) in m.Y2 and a != z
    )
    m.Z2 = pyo.Set(initialize=pairs, dimen=3, ordered=True)
    m.z2 = pyo.Var(m.Z2, domain=pyo.NonNegativeReals, bounds=(0, 1))
    # z2_and: z2 ≥ x2 + y2 − 1; z2_x: z2 ≤ x2; z2_y: z2 ≤ y2
    m.z2_and = pyo.Constraint(
        m.Z2, rule=lambda _m, j, a, z: m.z2[j, a, z] >= m.x2[j, a] + m.y2[j, z] - 1
    )
    m.z2_x = pyo.Constraint(m.Z2, rule=lambda _m, j, a, z: m.z2[j, a, z] <= m.x2[j, a])
    m.z2_y = pyo.Constraint(m.Z2, rule=lambda _m, j, a, z: m.z2[j, a, z] <= m.y2[j, z])


def _xy_nodes(i: MovableData) -> tuple[list[str], list[str]]:
    return (
        [n for n in i.primaries if n != i.secondary and i.keeps(XY_PRIMARY, n)],
        [n for n in i.secondaries if n != i.primary and i.keeps(XY_SECONDARY, n)],
    )


def _c(m: pyo.ConcreteModel, j: str, k: str) -> object:
    return m.c[j, k] if (j, k) in m.C else 0


def _primary_at(m: pyo.ConcreteModel, i: MovableData) -> dict[str, object]:
    """X[i,n]: the instance's final primary is n, as a sum of its class variables."""
    j = i.name
    out: dict[str, list] = defaultdict(list)
    out[i.primary].append(_c(m, j, STAY))
    if i.drbd:
        out[i.secondary].append(_c(m, j, SWAP))  # type: ignore[index]
    for k, n, _ in _vars_of(i):
        if k == PX:
            out[i.primary].append(m.b[j, k, n])
        elif k == SX:
            out[i.secondary].append(m.b[j, k, n])  # type: ignore[index]
        elif k in (XP, XS, FA):
            out[n].append(m.b[j, k, n])
    for n in _xy_nodes(i)[0] if (j, XY) in m.C else ():
        out[n].append(m.x2[j, n])
    return {n: sum(v) for n, v in out.items()}


def _secondary_at(m: pyo.ConcreteModel, i: MovableData) -> dict[str, object]:
    """Y[i,n]: the instance's final secondary is n."""
    if not i.drbd:
        return {}
    j = i.name
    out: dict[str, list] = defaultdict(list)
    out[i.secondary].append(_c(m, j, STAY))  # type: ignore[index]
    out[i.primary].append(_c(m, j, SWAP))
    for k, n, _ in _vars_of(i):
        if k == XS:
            out[i.secondary].append(m.b[j, k, n])  # type: ignore[index]
        elif k == XP:
            out[i.primary].append(m.b[j, k, n])
        elif k in (PX, SX):
            out[n].append(m.b[j, k, n])
    for n in _xy_nodes(i)[1] if (j, XY) in m.C else ():
        out[n].append(m.y2[j, n])
    return {n: sum(v) for n, v in out.items()}


def _pairs(m: pyo.ConcreteModel, i: MovableData, spec: BalanceModelSpec) -> list:
    """(primary, secondary, indicator) of every final pair the model names exactly."""
    if not i.drbd:
        return []
    j, p, s = i.name, i.primary, i.secondary
    out = [(p, s, _c(m, j, STAY)), (s, p, _c(m, j, SWAP))]
    for k, n, _ in _vars_of(i):
        pair = {PX: (p, n), SX: (s, n), XP: (n, p), XS: (n, s)}[k]
        out.append((*pair, m.b[j, k, n]))
    out += [(a, z, m.z2[j2, a, z]) for j2, a, z in m.Z2 if j2 == j]
    return out


def define_changes(m: pyo.ConcreteModel, data: BalanceData) -> None:
    """X, Y per (instance, node) as expressions; the changes of each node's role counts."""
    xe, ye = {}, {}
    for i in data.instances:
        for n, e in _primary_at(m, i).items():
            xe[i.name, n] = e
        for n, e in _secondary_at(m, i).items():
            ye[i.name, n] = e
    # X[i,n], Y[i,n] are variables defined by equality: every row of node n names them once
    # instead of repeating the class variables behind them
    m.XI = pyo.Set(initialize=list(xe), dimen=2, ordered=True)
    m.YI = pyo.Set(initialize=list(ye), dimen=2, ordered=True)
    m.Xv = pyo.Var(m.XI, bounds=(0, 1))
    m.Yv = pyo.Var(m.YI, bounds=(0, 1))
    # x_def: X[i,n] = Σ class variables putting i's primary on n; y_def likewise
    m.x_def = pyo.Constraint(m.XI, rule=lambda _m, j, n: m.Xv[j, n] == xe[j, n])
    m.y_def = pyo.Constraint(m.YI, rule=lambda _m, j, n: m.Yv[j, n] == ye[j, n])


class _Index:
    """The model's X[i,n], Y[i,n] by key, the changes X − [p_i = n] and Y − [s_i = n], and the
    instances that may be on each node: read off the model's own components (nothing but
    Pyomo components is attached to the model)."""

    def __init__(self, m: pyo.ConcreteModel, data: BalanceData) -> None:
        self.X = {key: m.Xv[key] for key in m.XI}
        self.Y = {key: m.Yv[key] for key in m.YI}
        self._inst = {i.name: i for i in data.instances}
        self.on_node: dict[str, list[str]] = defaultdict(list)
        for j, n in list(self.X) + list(self.Y):
            if j not in self.on_node[n]:
                self.on_node[n].append(j)

    def dX(self, j: str, n: str) -> object:  # noqa: N802
        return self.X.get((j, n), 0) - (1 if self._inst[j].primary == n else 0)

    def dY(self, j: str, n: str) -> object:  # noqa: N802
        return self.Y.get((j, n), 0) - (1 if self._inst[j].secondary == n else 0)


def define_steps(m: pyo.ConcreteModel, data: BalanceData) -> None:
    """steps = Σ_i Σ_class steps_class · (class variables) ≤ K (the budget row is left to the
    objective: a bound for the least score, a sum to minimise for the fewest steps)."""
    terms = []
    for i in data.instances:
        j = i.name
        for k in (SWAP, XY):
            if (j, k) in m.C:
                terms.append(i.steps[k] * m.c[j, k])
        for k, n, _ in _vars_of(i):
            terms.append((1 if k == FA else i.steps[k]) * m.b[j, k, n])
    m.steps = pyo.Expression(expr=sum(terms))


def define_values(m: pyo.ConcreteModel, data: BalanceData) -> None:
    """v[k,n] = now_k[n] + Σ_i dP_k[i,n]·(X[i,n] − [p_i=n]) + dS_k[i,n]·(Y[i,n] − [s_i=n])."""
    ix = _Index(m, data)
    inst = {i.name: i for i in data.instances}
    m.K = pyo.Set(initialize=range(len(SD_METRICS)), ordered=True)
    names = [n.name for n in data.nodes]
    m.N = pyo.Set(initialize=names, ordered=True)
    now = data.node
    m.v = pyo.Var(m.K, m.N, domain=pyo.Reals)
    lead = twins(data)

    def rule(_m, k, n):  # noqa: ANN001, ANN202
        if lead[k] != k:
            # twin: v[k,n] = v[leader,n] (a metric with another's values and changes: the
            # loads without utilisation data, the *_forth copies without forthcoming instances)
            return m.v[k, n] == m.v[lead[k], n]
        expr = now[n].sd_now[k]
        for j in ix.on_node.get(n, ()):
            i = inst[j]
            dp = i.sd_primary.get(n)
            if dp is not None and dp[k]:
                expr = expr + dp[k] * ix.dX(j, n)
            ds = i.sd_secondary.get(n)
            if ds is not None and ds[k]:
                expr = expr + ds[k] * ix.dY(j, n)
        # v_def: v[k,n] = now_k[n] + Σ changes
        return m.v[k, n] == expr

    m.v_def = pyo.Constraint(m.K, m.N, rule=rule)


def twins(data: BalanceData) -> list[int]:
    """Each spread metric's leader: the first metric with the same values now and the same
    changes everywhere (the model keeps one set of rows for them)."""

    def column(k: int) -> tuple:
        return (
            tuple(n.sd_now[k] for n in data.nodes),
            tuple(
                (i.name, n, d[k])
                for i in data.instances
                for table in (i.sd_primary, i.sd_secondary)
                for n, d in sorted(table.items())
            ),
        )

    cols = [column(k) for k in range(len(SD_METRICS))]
    return [next(j for j in range(k + 1) if cols[j] == cols[k]) for k in range(len(cols))]


def define_reserve(m: pyo.ConcreteModel, data: BalanceData, spec: BalanceModelSpec) -> None:
    """r[n] = max_q peers_n[q], with peers_n[q] = fixed_n[q] + Σ_i f_i · [i on (q, n)]:
        low:   r[n] ≥ peers_n[q]                                   for every q
        high:  r[n] ≤ peers_n[q] + open_n + M_n·(1 − w[n,q]),  Σ_q w[n,q] + w0[n] = 1,
               r[n] ≤ M_n·(1 − w0[n])
    where open_n = Σ f_i·y2[i,n] over the (x,y) instances whose pair is not summed exactly
    (each may be on (q, n) for any q: r[n] is then between its bounds, a relaxation), and
    p_rem[n] = r[n] / t_mem[n]."""
    peers: dict[tuple[str, str], list] = defaultdict(list)
    open_: dict[str, list] = defaultdict(list)
    most: dict[str, float] = defaultdict(float)
    for n, table in data.fixed_peers.items():
        for q, mib in table.items():
            peers[n, q].append(mib)
    exact = {(j, z) for j, _, z in m.Z2}
    for i in data.instances:
        if not i.drbd or not i.failover_mib:
            continue
        for q, n, ind in _pairs(m, i, spec):
            if n in data.node:
                peers[n, q].append(i.failover_mib * ind)
        for j, z in m.Y2:
            if j == i.name and z in data.node and (j, z) not in exact:
                open_[z].append(i.failover_mib * m.y2[j, z])
        for n in i.secondaries:
            most[n] += i.failover_mib
    keys = sorted(k for k in peers if k[0] in data.node)
    m.RQ = pyo.Set(initialize=keys, dimen=2, ordered=True)
    big = {
        n.name: max(data.fixed_peers.get(n.name, {}).values(), default=0)
        + most[n.name]
        + n.reserve_mib
        for n in data.nodes
    }
    m.r = pyo.Var(m.N, domain=pyo.NonNegativeReals, bounds=lambda _m, n: (0, big[n]))
    m.w = pyo.Var(m.RQ, domain=pyo.Binary)
    m.w0 = pyo.Var(m.N, domain=pyo.Binary)
    # low: r[n] ≥ peers_n[q]
    m.r_low = pyo.Constraint(m.RQ, rule=lambda _m, n, q: m.r[n] >= sum(peers[n, q]))
    # high: r[n] ≤ peers_n[q] + open_n + M·(1 − w[n,q])
    m.r_high = pyo.Constraint(
        m.RQ,
        rule=lambda _m, n, q: m.r[n] <= sum(peers[n, q]) + sum(open_[n]) + big[n] * (1 - m.w[n, q]),
    )
    by_n: dict[str, list] = defaultdict(list)
    for n, q in keys:
        by_n[n].append(q)
    # choose: Σ_q w[n,q] + w0[n] = 1;  zero: r[n] ≤ M·(1 − w0[n])
    m.r_choose = pyo.Constraint(
        m.N, rule=lambda _m, n: sum(m.w[n, q] for q in by_n[n]) + m.w0[n] == 1
    )
    m.r_zero = pyo.Constraint(m.N, rule=lambda _m, n: m.r[n] <= big[n] * (1 - m.w0[n]))
    m.p_rem = pyo.Var(m.N, domain=pyo.Reals)
    tmem = {n.name: n.total_memory_mib for n in data.nodes}
    # p_rem_def: p_rem[n] = r[n] / t_mem[n]
    m.p_rem_def = pyo.Constraint(m.N, rule=lambda _m, n: m.p_rem[n] == m.r[n] / tmem[n])


def _arrivals(m: pyo.ConcreteModel, data: BalanceData) -> tuple[dict, dict]:
    """node -> [(instance, indicator)] of new primaries there, and of new secondaries."""
    prim: dict[str, list] = defaultdict(list)
    sec: dict[str, list] = defaultdict(list)
    for i in data.instances:
        for n, e in _primary_at(m, i).items():
            if n != i.primary and n in data.node:
                prim[n].append((i, e))
        for n, e in _secondary_at(m, i).items():
            if n != i.secondary and n in data.node:
                sec[n].append((i, e))
    return prim, sec


def define_capacity(m: pyo.ConcreteModel, data: BalanceData) -> None:
    """Where a node takes a new role (or, for the memory row, has its primary re-added by a
    replaced secondary), its final numbers pass that role's strict rows:
        a[n,κ] ≥ indicator of every arrival on n checked against row κ
        Σ_i uP_κ[i]·(X[i,n] − [p_i=n]) + uS_κ[i]·(Y[i,n] − [s_i=n]) ≤ cap_κ[n] + M·(1 − a[n,κ])
    (a forced arrival meets the hard rows only). Rows no arrival can fill are left out."""
    ix = _Index(m, data)
    prim, sec = _arrivals(m, data)
    readd: dict[str, list] = defaultdict(list)
    for i in data.instances:
        px = [m.b[i.name, k, n] for k, n, _ in _vars_of(i) if k == PX]
        if px and i.primary in data.node:
            readd[i.primary].append(sum(px))
    keys, rows_of = [], {}
    inst = {i.name: i for i in data.instances}
    for node in data.nodes:
        n = node.name
        for kind, cap in node.caps.items():
            checked = [
                e
                for i, e in prim[n]
                if (not i.forced or kind in FORCED_ROWS)
                and (i.usage_primary.get(kind, 0) > 0 or kind == MEMORY)
            ]
            checked += [
                e
                for i, e in sec[n]
                if not i.forced and kind in SECONDARY_ROWS and i.usage_secondary.get(kind, 0) > 0
            ]
            if kind == MEMORY:  # a replaced secondary re-adds the primary with force: its
                # hard rule (free memory above 0) holds on the primary's node
                checked += readd.get(n, [])
            if not checked:
                continue
            # each step brings a node at most one new role: K arrivals at most
            most = max(
                [i.usage_primary.get(kind, 0) for i, _ in prim[n]]
                + [i.usage_secondary.get(kind, 0) for i, _ in sec[n]],
                default=0,
            )
            up = data.max_steps * max(most, 0)
            if cap >= up:
                continue  # nothing the arrivals bring can fill it
            keys.append((n, kind))
            rows_of[n, kind] = (checked, cap, up)
    m.A = pyo.Set(initialize=keys, dimen=2, ordered=True)
    m.a = pyo.Var(m.A, domain=pyo.Binary)
    idx = [
        (n, kind, t) for (n, kind), (checked, _, _) in rows_of.items() for t in range(len(checked))
    ]
    m.AI = pyo.Set(initialize=idx, dimen=3, ordered=True)
    # arrive: a[n,κ] ≥ indicator
    m.arrive = pyo.Constraint(
        m.AI, rule=lambda _m, n, kind, t: m.a[n, kind] >= rows_of[n, kind][0][t]
    )

    def row(_m, n, kind):  # noqa: ANN001, ANN202
        _, cap, up = rows_of[n, kind]
        use = 0
        for j in ix.on_node.get(n, ()):
            i = inst[j]
            use = use + i.usage_primary.get(kind, 0) * ix.dX(j, n)
            use = use + i.usage_secondary.get(kind, 0) * ix.dY(j, n)
        big = up + max(0, -cap) + abs(cap) + 1
        return use <= cap + big * (1 - m.a[n, kind])

    m.cap_row = pyo.Constraint(m.A, rule=row)
    define_emptiest(m, data, sec)


def define_emptiest(m: pyo.ConcreteModel, data: BalanceData, sec: dict) -> None:
    """Checks made on a node at some step, whose role the final state does not show, hold
    at the node's emptiest: its memory now plus what every primary leaving it frees
    (nothing else ever gives it more unallocated memory), D[n] = Σ_{p_j = n} mem_j·(1 − X[j,n]):
        failover:  f_i·Y' ≤ unalloc_n − 1 + D[n] + M·(1 − Y')   a new secondary (addSec: its
                   failover memory below the unallocated memory when it arrived), Y' its
                   arrival indicator
        fr f:      mem_i·b ≤ unalloc_s − 1 + D[s] + M·(1 − b)    a replace-primary's failover
                   makes the old secondary s the primary for a moment, b = Σ_n b[i,xs,n]
    Soft checks: not for forced moves."""
    ix = _Index(m, data)
    node = data.node
    leaving: dict[str, list] = defaultdict(list)
    for i in data.instances:
        if i.memory_mib and i.primary in node:
            leaving[i.primary].append(i.memory_mib * (1 - ix.X[i.name, i.primary]))
    rows = []
    for n, arrivals in sec.items():
        for i, e in arrivals:
            if not i.forced and i.failover_mib:
                rows.append((n, i.failover_mib, e))
    for i in data.instances:
        xs = [m.b[i.name, k, n] for k, n, _ in _vars_of(i) if k == XS]
        if xs and not i.forced and i.memory_mib and i.secondary in node:
            rows.append((i.secondary, i.memory_mib, sum(xs)))
    m.emptiest = pyo.ConstraintList()
    for n, need, e in rows:
        room = node[n].unallocated_mib - 1 + sum(leaving[n])
        big = need + abs(node[n].unallocated_mib) + 1
        row = need * e <= room + big * (1 - e)
        if row is True:  # e a constant 0 (no such arrival can happen) and no variable left:
            continue  # nothing to state (Pyomo refuses a trivial row; seen on Ganeti's RAPI data)
        m.emptiest.add(row)


def define_n1(m: pyo.ConcreteModel, data: BalanceData) -> None:
    """The N+1 flag F[n] and htools' n1_cnt:
    touched: u[n] ≥ each class variable that changes n's roles, u[n] ≤ their sum
    kept:    F[n] ≥ loaded_n − u[n]             (an untouched node keeps its loaded flag)
    ok:      unalloc_n − r[n] ≥ 1 − M·(F[n] + 1 − u[n])   (recomputed where touched)
    never:   F[n] = 0 where n fails N+1 neither way now and no forced move reaches it
    count:   t[n] ≥ cnt[n] − M·(1 − F[n]),  t ≥ 0"""
    ix = _Index(m, data)
    inst = {i.name: i for i in data.instances}
    touch: dict[str, list] = defaultdict(list)
    for i in data.instances:
        moved = 1 - _c(m, i.name, STAY)
        for n in (i.primary, i.secondary):
            if n is not None and n in data.node:
                touch[n].append(moved)
        for n, e in _primary_at(m, i).items():
            if n not in (i.primary, i.secondary):
                touch[n].append(e)
        for n, e in _secondary_at(m, i).items():
            if n not in (i.primary, i.secondary):
                touch[n].append(e)
    forced_reach = {n for i in data.instances if i.forced for n in (*i.primaries, *i.secondaries)}
    m.u = pyo.Var(m.N, domain=pyo.Binary)
    m.F = pyo.Var(m.N, domain=pyo.Binary)
    m.t = pyo.Var(m.N, domain=pyo.NonNegativeReals)
    node = data.node
    # touch_any: |terms|·u[n] ≥ Σ terms (u[n] = 1 as soon as one of them is)
    m.touch_any = pyo.Constraint(
        m.N, rule=lambda _m, n: len(touch.get(n, [])) * m.u[n] >= sum(touch.get(n, []))
    )
    # touch_most: u[n] ≤ Σ terms
    m.touch_most = pyo.Constraint(m.N, rule=lambda _m, n: m.u[n] <= sum(touch.get(n, [])))
    m.kept = pyo.Constraint(m.N, rule=lambda _m, n: m.F[n] >= int(node[n].fails_loaded) - m.u[n])

    def unalloc(n: str) -> object:
        expr = node[n].unallocated_mib
        for j in ix.on_node.get(n, ()):
            expr = expr - inst[j].memory_mib * ix.dX(j, n)
        return expr

    big = {
        n.name: abs(n.unallocated_mib)
        + sum(inst[j].memory_mib for j in ix.on_node.get(n.name, ()))
        + m.r[n.name].ub
        + 2
        for n in data.nodes
    }
    m.n1_ok = pyo.Constraint(
        m.N,
        rule=lambda _m, n: unalloc(n) - m.r[n] >= 1 - big[n] * (m.F[n] + 1 - m.u[n]),
    )
    never = [n.name for n in data.nodes if not n.fails_now and n.name not in forced_reach]
    m.never = pyo.Constraint(never, rule=lambda _m, n: m.F[n] == 0)

    def count(n: str) -> object:
        expr = node[n].instances
        for j in ix.on_node.get(n, ()):
            expr = expr + ix.dX(j, n) + ix.dY(j, n)
        return expr

    most = {n.name: n.instances + len(ix.on_node.get(n.name, ())) for n in data.nodes}
    m.n1_count = pyo.Constraint(m.N, rule=lambda _m, n: m.t[n] >= count(n) - most[n] * (1 - m.F[n]))


def define_tags(m: pyo.ConcreteModel, data: BalanceData) -> None:
    """pri_tags_score per (tag, node): q[t,n] ≥ count_t[n] − 1, q ≥ 0, with
    count_t[n] = now_t[n] + Σ_{i with t} (X[i,n] − [p_i=n]); and a new primary with tag t is
    checked on a node without another: count_t[n] ≤ 1 + M·(1 − X[i,n])."""
    ix = _Index(m, data)
    keys = [(t, n.name) for t, n in tag_keys(data.nodes, data.instances)]
    m.TG = pyo.Set(initialize=keys, dimen=2, ordered=True)
    m.q = pyo.Var(m.TG, domain=pyo.NonNegativeReals)
    node = data.node
    inst = {i.name: i for i in data.instances}

    def count(t: str, n: str) -> object:
        expr = node[n].tag_counts.get(t, 0)
        for j in ix.on_node.get(n, ()):
            if t in inst[j].exclusion_tags:
                expr = expr + ix.dX(j, n)
        return expr

    m.tag_conflicts = pyo.Constraint(m.TG, rule=lambda _m, t, n: m.q[t, n] >= count(t, n) - 1)
    m.tag_check = pyo.ConstraintList()
    for t, n in keys:
        big = node[n].tag_counts.get(t, 0) + len(ix.on_node.get(n, ()))
        for i in data.instances:
            e = ix.X.get((i.name, n))
            if e is None or n == i.primary or i.forced or t not in i.exclusion_tags:
                continue
            m.tag_check.add(count(t, n) <= 1 + big * (1 - e))


def define_score(m: pyo.ConcreteModel, data: BalanceData) -> None:
    """score = Σ_k w_k·σ_k + w_res·σ_res + w_tot·Σ p_rem + Σ t[n] + offline counts of what
    stays on offline nodes + 2·Σ q[t,n] + constant (model/balance.py `modelled_score`), with
    σ_k ≥ 0 cut by tangent planes."""
    ix = _Index(m, data)
    m.sigma = pyo.Var(m.K, domain=pyo.NonNegativeReals)
    m.sigma_res = pyo.Var(domain=pyo.NonNegativeReals)
    off = 0
    for i in data.instances:
        if i.primary_offline:
            weight = WEIGHTS["offline_all_cnt"] + WEIGHTS["offline_pri_cnt"]
            off = off + weight * ix.X.get((i.name, i.primary), 0)
        if i.secondary_offline:
            off = off + WEIGHTS["offline_all_cnt"] * ix.Y.get((i.name, i.secondary), 0)
    m.score = pyo.Expression(
        expr=sum(m_.weight * m.sigma[k] for k, m_ in enumerate(SD_METRICS))
        + WEIGHTS[RESERVED] * m.sigma_res
        + WEIGHTS[RESERVED_TOTAL] * sum(m.p_rem[n] for n in m.N)
        + WEIGHTS["n1_cnt"] * sum(m.t[n] for n in m.N)
        + off
        + WEIGHTS["pri_tags_score"] * sum(m.q[key] for key in m.TG)
        + data.score_constant
    )


def define_deviations(m: pyo.ConcreteModel, data: BalanceData) -> None:
    """Planes of every spread in the directions of single nodes, valid at every point: for
    any u with Σu = 0 and |u| = 1, σ = |v − μ|/√N ≥ u·v/√N; with u along e_n − 1/N,
        σ_k ≥ ±(v[k,n] − mean_k(v)) / √(N − 1)
    (a node far from the mean alone bounds the spread; tangent planes touch only at their
    point, and the first rounds' relaxation spread every move's fraction under them)."""
    names = list(m.N)
    count = len(names)
    if count < 2:
        return
    scale = 1.0 / (count - 1) ** 0.5
    keys = [(k, n, sign) for k in m.K for n in names for sign in (1, -1)]
    m.DEV = pyo.Set(initialize=keys, dimen=3, ordered=True)

    def mean(k: int) -> object:
        return sum(m.v[k, x] for x in names) / count

    # deviation: σ_k ≥ ±(v[k,n] − mean_k) / √(N − 1)
    m.deviation = pyo.Constraint(
        m.DEV,
        rule=lambda _m, k, n, sign: m.sigma[k] >= sign * scale * (m.v[k, n] - mean(k)),
    )
    rem_mean = sum(m.p_rem[x] for x in names) / count
    m.DEVR = pyo.Set(initialize=[(n, sign) for n in names for sign in (1, -1)], dimen=2)
    # deviation_res: σ_res ≥ ±(p_rem[n] − mean(p_rem)) / √(N − 1)
    m.deviation_res = pyo.Constraint(
        m.DEVR,
        rule=lambda _m, n, sign: m.sigma_res >= sign * scale * (m.p_rem[n] - rem_mean),
    )


def define_cuts(m: pyo.ConcreteModel, data: BalanceData, spec: BalanceModelSpec) -> None:
    """A set of finals with no valid order of steps: not all of them again,
    Σ_{(i, P, S) in cut} [i ends on (P, S)] ≤ |cut| − 1."""
    m.cuts = pyo.ConstraintList()
    for cut in spec.cuts:
        m.cuts.add(sum(final_indicator(m, data, i, p, s) for i, p, s in cut) <= len(cut) - 1)


def final_indicator(
    m: pyo.ConcreteModel, data: BalanceData, name: str, p: str, s: str | None
) -> object:
    """[instance ends on (p, s)]: its class variable, or for an (x,y) final a lower bound
    x2 + y2 − 1 (exact at whole points: the cut still removes exactly that final)."""
    ix = _Index(m, data)
    i = next(x for x in data.instances if x.name == name)
    if not i.drbd:
        return ix.X.get((name, p), 0)
    for q, z, ind in _pairs(m, i, BalanceModelSpec()):
        if (q, z) == (p, s):
            return ind
    return m.x2[name, p] + m.y2[name, s] - 1


def build(
    data: BalanceData,
    spec: BalanceModelSpec = BalanceModelSpec(),
    deadline: float | None = None,
) -> pyo.ConcreteModel:
    """The model, family by family; formulations.deadline.OutOfTime once the perf_counter
    time `deadline` passes between two (a 200-node group's build took 16-17 s)."""
    m = pyo.ConcreteModel(name="balance")
    build_families(
        [
            ("choice", lambda: define_choice(m, data, spec)),
            ("changes", lambda: define_changes(m, data)),
            ("steps", lambda: define_steps(m, data)),
            ("values", lambda: define_values(m, data)),
            ("reserve", lambda: define_reserve(m, data, spec)),
            ("capacity", lambda: define_capacity(m, data)),
            ("n1", lambda: define_n1(m, data)),
            ("tags", lambda: define_tags(m, data)),
            ("score", lambda: define_score(m, data)),
            ("deviations", lambda: define_deviations(m, data)),
            ("cuts", lambda: define_cuts(m, data, spec)),
        ],
        deadline,
    )
    if spec.fewest_steps_to is None:
        # budget: steps ≤ K
        m.budget = pyo.Constraint(expr=m.steps <= data.max_steps)
    else:
        # target: score ≤ target (planes make it a relaxation: the strategy checks the truth)
        m.target = pyo.Constraint(expr=m.score <= spec.fewest_steps_to + 1e-9)
        m.budget = pyo.Constraint(expr=m.steps <= data.max_steps)
    return m


def objectives(m: pyo.ConcreteModel, spec: BalanceModelSpec) -> list[Objective]:
    if spec.fewest_steps_to is not None:
        return [Objective("steps", m.steps, "min", integral=True)]
    return [Objective("score", m.score, "min", integral=False)]


def tangent_rows(
    m: pyo.ConcreteModel, values: Sequence[Sequence[float]], rem: Sequence[float]
) -> list[tuple[object, float, None]]:
    """Planes at a point (each spread metric's node values, and p_rem):
    σ_k − Σ_n g_n·v[k,n] ≥ sd_k(v̄) − Σ_n g_n·v̄_n."""
    rows = []
    names = list(m.N)
    for k in m.K:
        sd, grad = tangent(values[k])
        const = sd - sum(g * v for g, v in zip(grad, values[k], strict=True))
        expr = m.sigma[k] - sum(g * m.v[k, n] for g, n in zip(grad, names, strict=True) if g)
        rows.append((expr, const, None))
    sd, grad = tangent(rem)
    const = sd - sum(g * v for g, v in zip(grad, rem, strict=True))
    expr = m.sigma_res - sum(g * m.p_rem[n] for g, n in zip(grad, names, strict=True) if g)
    rows.append((expr, const, None))
    return rows


def solution(m: pyo.ConcreteModel, data: BalanceData) -> dict[str, tuple[str, str | None]]:
    """Each instance's final (primary, secondary) in the loaded solution."""
    out = {}
    for i in data.instances:
        prim = max(_primary_at(m, i).items(), key=lambda kv: pyo.value(kv[1]))[0]
        sec = None
        if i.drbd:
            sec = max(_secondary_at(m, i).items(), key=lambda kv: pyo.value(kv[1]))[0]
        out[i.name] = (prim, sec)
    return out


def open_xy(m: pyo.ConcreteModel, data: BalanceData) -> list[tuple[str, str, str]]:
    """(instance, x, y) of the (x,y) finals of the loaded solution not summed exactly."""
    out = []
    for j, k in m.C:
        if k != XY or pyo.value(m.c[j, k]) < 0.5:
            continue
        x = next(n for jj, n in m.X2 if jj == j and pyo.value(m.x2[jj, n]) > 0.5)
        y = next(n for jj, n in m.Y2 if jj == j and pyo.value(m.y2[jj, n]) > 0.5)
        if (j, x, y) not in set(m.Z2):
            out.append((j, x, y))
    return out


def load_plan(
    m: pyo.ConcreteModel, data: BalanceData, finals: dict[str, tuple[str, str | None]]
) -> list:
    """Set the choice variables to a plan (each instance's final; absent ones stay) and
    return them, for the solver to complete the rest into a starting solution."""
    for v in (m.c, m.b, m.x2, m.y2):
        for key in v:
            v[key].set_value(0)
    for i in data.instances:
        j = i.name
        p, s = finals.get(j, (i.primary, i.secondary))
        if not i.drbd:
            if p == i.primary:
                m.c[j, STAY].set_value(1)
            else:
                m.b[j, FA, p].set_value(1)
            continue
        from model.balance import class_of

        k = class_of((i.primary, i.secondary), (p, s))  # type: ignore[arg-type]
        if k in (STAY, SWAP, XY):
            if (j, k) in m.c:
                m.c[j, k].set_value(1)
            if k == XY and (j, p) in m.x2 and (j, s) in m.y2:
                m.x2[j, p].set_value(1)
                m.y2[j, s].set_value(1)
        else:
            other = s if k in (PX, SX) else p
            if (j, k, other) in m.b:
                m.b[j, k, other].set_value(1)
    return [v[key] for v in (m.c, m.b, m.x2, m.y2) for key in v]
