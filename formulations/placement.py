"""Joint placement on normal groups: most instances, then the least score (docs/placement.md).

The feasibility part is formulations/batch.py's batch model (every strict row of every node
for the batch as a whole). On top of it, the cluster score after the plan (`model.score`):

    score = Σ_k w_k·sd_k(v_k) + w_res·sd(p_rem) + Σ_k w_k·Σ_n sum_k[n] + w_tot·Σ_n p_rem[n]

with v_k[n] = base_k[n] + Σ_j (dp_k[j,n] · x[j,n] + ds_k[j,n] · y[j,n]) for every scored node n
(`model.placement` computes the changes dp, ds from htools' own adds) and p_rem[n] = r[n] / t_mem[n]
where the batch model carries the reserve r[n] as a variable.

Each sd is convex in the node values, so σ_k ≥ sd_k is replaced by tangent planes
    tangent: σ_k − Σ_n g_n · v_k[n] ≥ sd_k(v̄) − Σ_n g_n · v̄_k[n]
added at each solution v̄ (`tangent_rows`); the model's optimum is then a lower bound of the true
least score, met when a solution's planes no longer move it.

Objectives (`objectives`): placed (max), [instances on last-resort groups (min)], score (min).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

import pyomo.core as pyo

from formulations.batch import batch_solution, build_batch
from model.placement import (
    SD_METRICS,
    TAGS,
    PlacementProblem,
    sd_of,
    sd_weights,
    sum_weights,
    tangent,
)
from model.score import WEIGHTS
from solvers import Objective

RESERVED_WEIGHT = WEIGHTS["reserved_mem_cv"]
RESERVED_TOTAL_WEIGHT = WEIGHTS["reserved_mem_rtotal"]
TAGS_WEIGHT = WEIGHTS[TAGS]
LOCATION_WEIGHT = WEIGHTS["location_exclusion_score"]


def _terms(problem: PlacementProblem) -> tuple[dict, dict]:
    """Per node: [(kind, role, change per SD metric)], and the summed metrics' linear terms."""
    per_node: dict[str, list[tuple[str, str, tuple[float, ...]]]] = defaultdict(list)
    for (j, n), delta in problem.primary_sd.items():
        per_node[n].append((j, "p", delta))
    for (j, n), delta in problem.secondary_sd.items():
        per_node[n].append((j, "s", delta))
    weights = sum_weights()
    linear: dict[tuple[str, str, str], float] = {}
    for role, table in (("p", problem.primary_sum), ("s", problem.secondary_sum)):
        for (j, n), delta in table.items():
            linear[j, n, role] = sum(w * d for w, d in zip(weights, delta, strict=True))
    return per_node, linear


def define_values(m: pyo.ConcreteModel, problem: PlacementProblem) -> None:
    """v[k,n]: each scored node's SD-metric values after the batch (nodes where nothing can
    land keep their constants); p_rem[n] = r[n] / t_mem[n] where the reserve may grow."""
    per_node, _ = _terms(problem)
    m.K = pyo.Set(initialize=range(len(SD_METRICS)), ordered=True)
    movable = [n for n in problem.scored if per_node.get(n)]
    m.NV = pyo.Set(initialize=movable, ordered=True, doc="scored nodes whose values may change")

    def value(_m, k, n):  # noqa: ANN001, ANN202
        expr = problem.base_sd[n][k]
        for j, role, delta in per_node[n]:
            if delta[k]:
                var = m.x[j, n] if role == "p" else m.y[j, n]
                expr = expr + delta[k] * var
        return expr

    # v[k,n] and p_rem[n] are variables defined by equality rather than expressions: every
    # tangent plane names them, and a plane over the expressions would repeat each node's
    # Σ delta·x in every round (on 200 nodes and 40 instances, 80,000 nonzeros a round, more
    # than the LP could take within a round's time; as variables, 200 a plane)
    m.v = pyo.Var(m.K, m.NV, domain=pyo.Reals, doc="v[k,n]: SD metric k of node n after")
    # v_def: v[k,n] = base_k[n] + Σ_j dp_k[j,n]·x[j,n] + Σ_j ds_k[j,n]·y[j,n]
    m.v_def = pyo.Constraint(m.K, m.NV, rule=lambda _m, k, n: m.v[k, n] == value(m, k, n))
    reserve = [n for n in problem.scored if n in m.r]
    m.NR = pyo.Set(initialize=reserve, ordered=True, doc="scored nodes whose reserve may grow")
    m.p_rem = pyo.Var(m.NR, domain=pyo.Reals, doc="p_rem[n]: n's reserve share after")
    # p_rem_def: p_rem[n] = r[n] / t_mem[n]
    m.p_rem_def = pyo.Constraint(
        m.NR, rule=lambda _m, n: m.p_rem[n] == m.r[n] / problem.total_memory_mib[n]
    )


def define_reserve_exact(m: pyo.ConcreteModel, problem: PlacementProblem) -> None:
    """The batch model bounds a secondary's reserve r[n] from below only (enough for the strict
    rows); the score needs it exact, or the model could raise it to even out p_rem. So r[n] is
    also bounded from above by the term that attains the maximum, chosen by binaries:
        choose:  w0[n] + Σ_j w[j,n] + Σ_p wp[p,n] = 1,   w[j,n] ≤ y[j,n]
        now:     r[n] ≤ R0[n] + M[n]·(1 − w0[n])
        one:     r[n] ≤ Σ_p peers[n,p]·x[j,p] + f_j + M[n]·(1 − w[j,n])
        shared:  r[n] ≤ peers[n,p] + Σ_j f_j·z[j,p,n] + M[n]·(1 − wp[p,n])   (pairs summed exactly)
    with R0 the reserve now and M[n] = ub(r[n]) (every term is ≥ 0)."""
    batch = problem.batch
    inst = batch.instance
    reserving = [
        (j, n) for j, n in m.JS if n in m.r and not inst[j].forthcoming and inst[j].failover_mib > 0
    ]
    pair_keys = sorted({(a, n) for (_, a, n) in m.z})
    m.RW = pyo.Set(initialize=reserving, dimen=2)
    m.RP = pyo.Set(initialize=pair_keys, dimen=2)
    m.w0 = pyo.Var(list(m.r), domain=pyo.Binary)
    m.w = pyo.Var(m.RW, domain=pyo.Binary)
    m.wp = pyo.Var(m.RP, domain=pyo.Binary)
    by_n: dict = defaultdict(lambda: ([], []))
    for j, n in reserving:
        by_n[n][0].append(j)
    for a, n in pair_keys:
        by_n[n][1].append(a)
    # choose: w0[n] + Σ_j w[j,n] + Σ_p wp[p,n] = 1
    m.choose_max = pyo.Constraint(
        list(m.r),
        rule=lambda _m, n: (
            m.w0[n] + sum(m.w[j, n] for j in by_n[n][0]) + sum(m.wp[a, n] for a in by_n[n][1]) == 1
        ),
    )
    m.w_on = pyo.Constraint(m.RW, rule=lambda _m, j, n: m.w[j, n] <= m.y[j, n])

    def big_m(n: str) -> float:
        """r[n] never exceeds its upper bound and every term is ≥ 0: M = ub(r[n])."""
        return float(m.r[n].ub)

    m.r_now = pyo.Constraint(
        list(m.r),
        rule=lambda _m, n: m.r[n] <= batch.node[n].reserve_mib + big_m(n) * (1 - m.w0[n]),
    )
    candidates = {j: set(ns) for j, ns in batch.primaries.items()}

    def one(_m, j, n):  # noqa: ANN001, ANN202
        peers = batch.node[n].peers_mib
        held = sum(v * m.x[j, a] for a, v in peers.items() if a in candidates[j])
        return m.r[n] <= held + inst[j].failover_mib + big_m(n) * (1 - m.w[j, n])

    m.r_one = pyo.Constraint(m.RW, rule=one)
    on_pair: dict = defaultdict(list)
    for j, a, n in m.z:
        on_pair[a, n].append(j)
    m.r_shared = pyo.Constraint(
        m.RP,
        rule=lambda _m, a, n: (
            m.r[n]
            <= batch.node[n].peers_mib.get(a, 0)
            + sum(inst[j].failover_mib * m.z[j, a, n] for j in on_pair[a, n])
            + big_m(n) * (1 - m.wp[a, n])
        ),
    )


def define_tag_conflicts(m: pyo.ConcreteModel, problem: PlacementProblem) -> None:
    """c[t,n] ≥ 0, the exclusion-tag conflicts of tag t on node n after the batch
    (pri_tags_score: max(0, count − 1)), minimised so exact at the optimum."""
    m.TN = pyo.Set(initialize=sorted(problem.tag_counts), dimen=2, doc="(tag, node) reachable")
    m.tag_conflicts = pyo.Var(m.TN, domain=pyo.NonNegativeReals)
    tagged = [i for i in problem.batch.instances if i.exclusion_tags]

    def at_least(_m, t, n):  # noqa: ANN001, ANN202
        # c[t,n] ≥ count_now[t,n] + Σ_{j carrying t} x[j,n] − 1
        added = sum(m.x[i.name, n] for i in tagged if t in i.exclusion_tags and (i.name, n) in m.x)
        return m.tag_conflicts[t, n] >= problem.tag_counts[t, n] + added - 1

    m.tag_conflicts_count = pyo.Constraint(m.TN, rule=at_least)


def define_location_conflicts(m: pyo.ConcreteModel, problem: PlacementProblem) -> None:
    """e[l,t] ≥ 0, the pooled conflicts of (location tag l, exclusion tag t) after the batch
    (location_exclusion_score: max(0, pooled count − 1)), minimised so exact at the optimum."""
    m.LT = pyo.Set(initialize=sorted(problem.location_pool), dimen=2, doc="(location, tag)")
    m.location_conflicts = pyo.Var(m.LT, domain=pyo.NonNegativeReals)
    adds: dict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)
    for (j, n), keys in problem.location_keys.items():
        for key in keys:
            adds[key].append((j, n))

    def at_least(_m, loc, t):  # noqa: ANN001, ANN202
        # e[l,t] ≥ pooled_now[l,t] + Σ_{(j,n) adding (l,t)} x[j,n] − 1
        added = sum(m.x[j, n] for j, n in adds[loc, t])
        return m.location_conflicts[loc, t] >= problem.location_pool[loc, t] + added - 1

    m.location_conflicts_count = pyo.Constraint(m.LT, rule=at_least)


def define_score(m: pyo.ConcreteModel, problem: PlacementProblem) -> None:
    """σ_k ≥ 0 per SD metric (and σ_res for the reserve), cut from below by tangent planes;
    the score expression."""
    _, linear = _terms(problem)
    m.sigma = pyo.Var(m.K, domain=pyo.NonNegativeReals, doc="σ_k ≥ sd_k, via tangent planes")
    m.sigma_res = pyo.Var(domain=pyo.NonNegativeReals, doc="σ_res ≥ sd(p_rem)")
    fixed_rem = sum(v for n, v in problem.reserved_base.items() if n not in m.NR)
    weights = sd_weights()
    m.score = pyo.Expression(
        expr=sum(weights[k] * m.sigma[k] for k in m.K)
        + RESERVED_WEIGHT * m.sigma_res
        + sum(
            c * (m.x[j, n] if role == "p" else m.y[j, n]) for (j, n, role), c in linear.items() if c
        )
        + RESERVED_TOTAL_WEIGHT * (fixed_rem + sum(m.p_rem[n] for n in m.NR))
        + TAGS_WEIGHT
        * sum(m.tag_conflicts[t, n] - max(c - 1, 0) for (t, n), c in problem.tag_counts.items())
        + LOCATION_WEIGHT
        * sum(m.location_conflicts[key] - max(c - 1, 0) for key, c in problem.location_pool.items())
        + problem.score_constant
    )


def build(problem: PlacementProblem) -> pyo.ConcreteModel:
    m = build_batch(problem.batch)
    m.name = "joint_placement"
    define_values(m, problem)
    define_reserve_exact(m, problem)
    define_tag_conflicts(m, problem)
    define_location_conflicts(m, problem)
    define_score(m, problem)
    return m


def objectives(m: pyo.ConcreteModel, problem: PlacementProblem) -> list[Objective]:
    objs = [Objective("placed", m.placed, "max")]
    if problem.batch.has_last_resort:
        objs.append(Objective("on_last_resort", m.on_last_resort, "min"))
    objs.append(Objective("score", m.score, "min", integral=False))
    return objs


def point(m: pyo.ConcreteModel, problem: PlacementProblem) -> tuple[list[list[float]], list[float]]:
    """Every scored node's SD-metric values and p_rem in the loaded solution (the point where
    the next planes touch)."""
    values = []
    for k in m.K:
        row = []
        for n in problem.scored:
            row.append(pyo.value(m.v[k, n]) if n in m.NV else problem.base_sd[n][k])
        values.append(row)
    rem = [pyo.value(m.p_rem[n]) if n in m.NR else problem.reserved_base[n] for n in problem.scored]
    return values, rem


def tangent_rows(
    m: pyo.ConcreteModel,
    problem: PlacementProblem,
    values: list[list[float]],
    rem: list[float],
) -> list[tuple[object, float, None]]:
    """The planes at a point, as rows (expr, lb, None) for the solver session:
    σ_k − Σ_{n movable} g_n · v_k[n] ≥ sd_k(v̄) − Σ_n g_n · v̄_n + Σ_{n fixed} g_n · base_k[n]."""
    rows = []
    names = list(problem.scored)
    for k in m.K:
        sd, grad = tangent(values[k])
        const = sd - sum(g * v for g, v in zip(grad, values[k], strict=True))
        expr = m.sigma[k]
        for g, n, v in zip(grad, names, values[k], strict=True):
            if not g:
                continue
            if n in m.NV:
                expr = expr - g * m.v[k, n]
            else:
                const += g * v
        rows.append((expr, const, None))
    sd, grad = tangent(rem)
    const = sd - sum(g * v for g, v in zip(grad, rem, strict=True))
    expr = m.sigma_res
    for g, n, v in zip(grad, names, rem, strict=True):
        if not g:
            continue
        if n in m.NR:
            expr = expr - g * m.p_rem[n]
        else:
            const += g * v
    rows.append((expr, const, None))
    return rows


def solution(
    m: pyo.ConcreteModel, problem: PlacementProblem
) -> dict[str, list[tuple[str, str | None]]]:
    """kind -> its placements (primary, secondary), as the batch model reads them."""
    return batch_solution(m, problem.batch)


def load_plan(
    m: pyo.ConcreteModel,
    problem: PlacementProblem,
    plan: Mapping[str, tuple[str, str | None]],
    members: Mapping[str, Sequence[str]],
) -> None:
    """A known plan (instance -> (primary, secondary)) as the placement variables' values, for
    a solver's first incumbent: x[j,n] = members of kind j on n, y[j,s] likewise; the other
    variables are left for the solver to complete."""
    x_count: dict[tuple[str, str], int] = defaultdict(int)
    y_count: dict[tuple[str, str], int] = defaultdict(int)
    for kind, names in members.items():
        for name in names:
            if name in plan:
                primary, secondary = plan[name]
                x_count[kind, primary] += 1
                if secondary is not None:
                    y_count[kind, secondary] += 1
    for index in m.x:
        m.x[index].set_value(x_count.get(index, 0), skip_validation=True)
    for index in m.y:
        m.y[index].set_value(y_count.get(index, 0), skip_validation=True)


def lift_spread(m: pyo.ConcreteModel, problem: PlacementProblem) -> None:
    """σ_k := sd_k and σ_res := sd(p_rem) at the loaded point: a solution on or above every
    tangent plane, present or later (sd is convex), so a start stays feasible as planes come."""
    values, rem = point(m, problem)
    for k in m.K:
        m.sigma[k].set_value(sd_of(values[k]))
    m.sigma_res.set_value(sd_of(rem))


def not_all_of(
    m: pyo.ConcreteModel, held: list[tuple[str, str, str]]
) -> tuple[object, None, float]:
    """no_good: Σ_{(j,n) held} x[j,n] (y for secondaries) ≤ |held| − 1, a row (expr, lb, ub)
    that keeps a later plan from holding all of these placements (each kind one instance)."""
    expr = sum(m.x[j, n] if role == "p" else m.y[j, n] for j, n, role in held)
    return (expr, None, float(len(held) - 1))
