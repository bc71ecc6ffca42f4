"""Balancing load between the groups of a pool (`exalloc balance --across-groups`, docs/balance.md
"Across groups", model/balance_groups.py).

Variables: x[i,n] ∈ {0..c_i}, how many of shape i's c_i instances (alike in all the model
reads, model.balance_groups.Mover) migrate to node n (one of their targets: another group of
their pool, the node's strict add passing on its own); r[n] = 1 when node n receives (only
where n also hosts a mover); σ[P,k] ≥ 0 the spread of term k over pool P's groups.

    moves:     Σ_n x[i,n] ≤ c_i                  Σ_i,n x[i,n] ≤ K
    capacity:  Σ_i use_k(i) · x[i,n] ≤ cap_k(n)   every strict row k of a receiving node
    exclusion: Σ_{i has tag t} x[i,n] ≤ 1         (n holds no t yet: `targets` checked it)
    one way:   Σ_i x[i,n] ≤ (Σ_i c_i)·r[n],  Σ_m x[j,m] ≤ c_j·(1 − r[n])   for every shape j on n
    ratios:    v[g,k] = (L_k(g) + Σ_{n∈g} load_k(i)·x[i,n] − Σ_{i∈g} load_k(i)·Σ_m x[i,m]) / C_k(g)
    spreads:   σ[P,k] ≥ Σ_g c_g · v[g,k]          for every plane (c) given
    objective: min Σ_P Σ_k w_k · σ[P,k]

The capacity rows are exact (model.balance_groups.node_rows: a receiving node only gains, and
each row applies to every arrival), so the feasible plans are the checker's. The spreads are
convex and the planes lie under them: the model's optimum is a lower bound of the least score,
and the strategy adds planes where a solution lands until its true score meets the bound.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyomo.core as pyo

from formulations.objective import Objective
from model.balance_groups import TERMS, AcrossData
from model.groups import Relocation


def _arrivals(m: pyo.ConcreteModel) -> dict[str, list[str]]:
    """Receiving node -> the instances that may arrive there."""
    found: dict[str, list[str]] = {}
    for i, n in m.X:
        found.setdefault(n, []).append(i)
    return found


def define_variables(m: pyo.ConcreteModel, data: AcrossData) -> None:
    m.X = pyo.Set(
        initialize=[(mv.name, n) for mv in data.movers for n in mv.targets], dimen=2, ordered=True
    )
    count = {mv.name: len(mv.names) for mv in data.movers}
    m.x = pyo.Var(m.X, domain=pyo.NonNegativeIntegers, bounds=lambda m, i, n: (0, count[i]))
    senders = {mv.node for mv in data.movers}
    m.R = pyo.Set(initialize=sorted(senders & set(data.rows)))
    m.r = pyo.Var(m.R, domain=pyo.Binary)
    m.S = pyo.Set(initialize=[(p, k) for p in data.pools for k in range(len(TERMS))], dimen=2)
    m.sigma = pyo.Var(m.S, domain=pyo.NonNegativeReals)


def _moved(m: pyo.ConcreteModel, data: AcrossData, name: str) -> object:
    """1 when `name` migrates (to any of its targets)."""
    return sum(m.x[name, n] for n in data.mover(name).targets)


def define_moves(m: pyo.ConcreteModel, data: AcrossData) -> None:
    """Each instance migrates once at most; at most K migrations."""
    m.once = pyo.Constraint(
        [mv.name for mv in data.movers if mv.targets],
        rule=lambda m, i: _moved(m, data, i) <= len(data.mover(i).names),
    )
    if data.max_moves is not None and len(m.X):
        m.most = pyo.Constraint(expr=sum(m.x[i, n] for i, n in m.X) <= data.max_moves)


def define_capacity(m: pyo.ConcreteModel, data: AcrossData) -> None:
    """Every strict row of every receiving node holds the sum of its arrivals."""
    usage = {mv.name: mv.usage for mv in data.movers}
    m.capacity = pyo.ConstraintList()
    for n, names in _arrivals(m).items():
        for kind, cap in data.rows[n]:
            lhs = sum(usage[i][kind] * m.x[i, n] for i in names if usage[i][kind])
            if not isinstance(lhs, int):
                m.capacity.add(lhs <= cap)


def define_exclusion(m: pyo.ConcreteModel, data: AcrossData) -> None:
    """Two arrivals sharing an exclusion tag never land on one node."""
    tags = {mv.name: mv.tags for mv in data.movers}
    arrivals = _arrivals(m)
    m.exclusion = pyo.ConstraintList()
    for n, arriving in data.arriving_tags.items():
        for t in sorted(arriving):
            names = [i for i in arrivals.get(n, ()) if t in tags[i]]
            if len(names) > 1:
                m.exclusion.add(sum(m.x[i, n] for i in names) <= 1)


def define_one_way(m: pyo.ConcreteModel, data: AcrossData) -> None:
    """A node that receives gives nothing up (so every order of the plan passes): arrivals
    only where r[n] = 1, departures only where r[n] = 0."""
    arrivals = _arrivals(m)
    leaving: dict[str, list[str]] = {}
    for mv in data.movers:
        if mv.targets:
            leaving.setdefault(mv.node, []).append(mv.name)
    m.one_way = pyo.ConstraintList()
    for n in m.R:
        names = arrivals.get(n, ())
        most = sum(len(data.mover(i).names) for i in names)
        m.one_way.add(sum(m.x[i, n] for i in names) <= most * m.r[n])
        for i in leaving.get(n, ()):
            m.one_way.add(_moved(m, data, i) <= len(data.mover(i).names) * (1 - m.r[n]))


def define_ratios(m: pyo.ConcreteModel, data: AcrossData) -> None:
    """Each pool group's load / capacity per term after the plan, affine in x: v[g,k]."""
    groups = sorted({g for gs in data.pools.values() for g in gs})
    m.V = pyo.Set(initialize=[(g, k) for g in groups for k in range(len(TERMS))], dimen=2)
    load = {mv.name: mv.load for mv in data.movers}
    gaining: dict[str, list[tuple[str, str]]] = {}
    losing: dict[str, list[tuple[str, str]]] = {}
    source = {mv.name: mv.group for mv in data.movers}
    for i, n in m.X:
        gaining.setdefault(data.node_group[n], []).append((i, n))
        losing.setdefault(source[i], []).append((i, n))

    def ratio(m: pyo.ConcreteModel, g: str, k: int) -> object:
        gained = sum(load[i][k] * m.x[i, n] for i, n in gaining.get(g, ()) if load[i][k])
        lost = sum(load[i][k] * m.x[i, n] for i, n in losing.get(g, ()) if load[i][k])
        now = data.loads.get(g, (0.0,) * len(TERMS))[k]
        return (now + gained - lost) / data.capacities[g][k]

    # a variable per ratio, so that the planes over it stay short rows
    m.v = pyo.Var(m.V, domain=pyo.Reals)
    m.ratio = pyo.Constraint(m.V, rule=lambda m, g, k: m.v[g, k] == ratio(m, g, k))


def plane_rows(
    m: pyo.ConcreteModel, planes: Sequence[tuple[str, int, dict[str, float]]]
) -> list[tuple[object, float, None]]:
    """σ[P,k] − Σ_g c_g · v[g,k] ≥ 0 for each plane (model.balance_groups' `spread_planes`,
    `point_planes`), as rows a solver session adds."""
    return [
        (m.sigma[p, k] - sum(c * m.v[g, k] for g, c in coef.items() if c), 0.0, None)
        for p, k, coef in planes
    ]


def define_objective(m: pyo.ConcreteModel) -> None:
    weights = [w for _, w in TERMS]
    m.score = pyo.Expression(expr=sum(weights[k] * m.sigma[p, k] for p, k in m.S))


def build(data: AcrossData) -> pyo.ConcreteModel:
    m = pyo.ConcreteModel(name="balance_groups")
    define_variables(m, data)
    define_moves(m, data)
    define_capacity(m, data)
    define_exclusion(m, data)
    define_one_way(m, data)
    define_ratios(m, data)
    define_objective(m)
    return m


def objective(m: pyo.ConcreteModel) -> Objective:
    return Objective("score", m.score, "min", integral=False)


def load_plan(m: pyo.ConcreteModel, data: AcrossData, plan: Sequence[Relocation]) -> list[pyo.Var]:
    """Set x and r to a plan (relocations with `instance` and `primary`); the variables set,
    for a solver to fix while it completes the plan into a solution."""
    chosen: dict[tuple[str, str], int] = {}
    for r in plan:
        key = (data.mover(r.instance).name, r.primary)
        chosen[key] = chosen.get(key, 0) + 1
    for key in m.X:
        m.x[key].set_value(chosen.get(key, 0))
    takers = {n for _, n in chosen}
    for n in m.R:
        m.r[n].set_value(1 if n in takers else 0)
    return [m.x[key] for key in m.X] + [m.r[n] for n in m.R]


def solution(m: pyo.ConcreteModel, data: AcrossData) -> list[tuple[str, str]]:
    """(instance, node) of every migration in the loaded solution: each shape's count on a
    node taken by the next of its instances, in the cluster's order."""
    out = []
    used: dict[str, int] = {}
    for i, n in m.X:
        count = round(pyo.value(m.x[i, n]))
        names = data.mover(i).names
        k = used.get(i, 0)
        out += [(name, n) for name in names[k : k + count]]
        used[i] = k + count
    return out
