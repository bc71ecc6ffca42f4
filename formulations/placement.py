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

Objectives (`objectives`): placed (max), [instances on last-resort groups (min)], [instances
placed back where they are (min): a node evacuation's that do not move], score (min).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence

import pyomo.core as pyo

from formulations.batch import batch_solution, build_batch
from formulations.deadline import build_families
from formulations.objective import Objective
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
from model.spread import NodeSpread, SpreadBound, twin_groups

RESERVED_WEIGHT = WEIGHTS["reserved_mem_cv"]
RESERVED_TOTAL_WEIGHT = WEIGHTS["reserved_mem_rtotal"]
TAGS_WEIGHT = WEIGHTS[TAGS]
LOCATION_WEIGHT = WEIGHTS["location_exclusion_score"]
PAIR_LOCATION_WEIGHT = WEIGHTS["location_score"]
N1_WEIGHT = WEIGHTS["n1_cnt"]


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
    # a metric with another's values and changes (model.spread.twin_groups) names its values
    leader = {k: group[0] for group in twin_groups(problem) for k in group}

    def define(_m, k, n):  # noqa: ANN001, ANN202
        if leader[k] != k:  # twin: v[k,n] = v[leader,n]
            return m.v[k, n] == m.v[leader[k], n]
        # v_def: v[k,n] = base_k[n] + Σ_j dp_k[j,n]·x[j,n] + Σ_j ds_k[j,n]·y[j,n]
        return m.v[k, n] == value(m, k, n)

    m.v_def = pyo.Constraint(m.K, m.NV, rule=define)
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


def define_pair_locations(m: pyo.ConcreteModel, problem: PlacementProblem) -> None:
    """l[j,t] ≥ 0, 1 when the scored primary and the secondary of drbd instance j both carry
    location tag t (location_score counts, on the primary, the tags the two share), minimised
    so exact at the optimum: each instance has one primary and one secondary, so at most one
    of each side's sums is 1. A forthcoming instance scores no location (htools' addPri
    changes only its counters)."""
    scored = set(problem.scored)
    tags = problem.location_tags
    batch = problem.batch
    keys = []
    for i in batch.instances:
        if not i.drbd or i.forthcoming:
            continue
        primary = {t for n in batch.primaries[i.name] if n in scored for t in tags.get(n, ())}
        secondary = {t for n in batch.secondaries[i.name] for t in tags.get(n, ())}
        keys += [(i.name, t) for t in sorted(primary & secondary)]
    m.JL = pyo.Set(initialize=keys, dimen=2, doc="(drbd instance, location tag)")
    m.pair_location = pyo.Var(m.JL, domain=pyo.NonNegativeReals)

    def at_least(_m, j, t):  # noqa: ANN001, ANN202
        # l[j,t] ≥ Σ_{p scored, carrying t} x[j,p] + Σ_{s carrying t} y[j,s] − 1
        on_primary = sum(
            m.x[j, n] for n in batch.primaries[j] if n in scored and t in tags.get(n, ())
        )
        on_secondary = sum(m.y[j, n] for n in batch.secondaries[j] if t in tags.get(n, ()))
        return m.pair_location[j, t] >= on_primary + on_secondary - 1

    m.pair_location_shared = pyo.Constraint(m.JL, rule=at_least)


def define_n1_failures(m: pyo.ConcreteModel, problem: PlacementProblem) -> None:
    """A node that forced placements make fail N+1 (f[n] = 1, formulations/batch.py) counts
    every instance on it (htools' n1_cnt): the ones there now, c[n]·f[n], and the new ones,
    t[n] = added[n]·f[n]:
        n1_new: t[n] ≥ Σ_j x[j,n] + Σ_j y[j,n] − K[n]·(1 − f[n]),   K[n] = the most added"""
    batch = problem.batch
    prim, sec = batch.kinds_on
    nodes = [n for n in m.NF if n in problem.n1_counts]

    def added(n: str):  # noqa: ANN202
        return sum(m.x[j, n] for j in prim[n]) + sum(m.y[j, n] for j in sec[n])

    def most(n: str) -> int:
        return sum(batch.instance[j].count for j in prim[n]) + len(sec[n])

    m.NFC = pyo.Set(initialize=nodes, ordered=True, doc="scored nodes that may fail N+1")
    m.n1_added = pyo.Var(m.NFC, domain=pyo.NonNegativeReals, doc="t[n]: new instances counted")
    m.n1_new = pyo.Constraint(
        m.NFC, rule=lambda _m, n: m.n1_added[n] >= added(n) - most(n) * (1 - m.f[n])
    )


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
        + PAIR_LOCATION_WEIGHT * sum(m.pair_location[key] for key in m.JL)
        + N1_WEIGHT * sum(problem.n1_counts[n] * m.f[n] + m.n1_added[n] for n in m.NFC)
        + problem.score_constant
    )


#: Pieces of the secants of σ² (widths doubling from σ_lo) and of (μ − c)² (equal widths).
SD_PIECES = 8
MEAN_PIECES = 8
#: The narrowest piece written (in the metric's units): a piece's width is a coefficient of
#: its fill row, and HiGHS 1.12's presolve, at its tolerances, found models with widths of
#: 1e-9 infeasible (six of the generated evacuations of benchmarks/joint_status.py, whose σ
#: ranges were under 1e-6 wide). A range too narrow for the pieces gets fewer: its secants
#: then lose at most (width/2)² / σ, nothing a proof at 1e-6 sees.
PIECE_MIN_WIDTH = 1e-6


def _pieces(m: pyo.ConcreteModel, name: str, points: Sequence[float]) -> pyo.Var:
    """An incremental piecewise variable over the breakpoints: value = points[0] + Σ_s d[s],
    0 ≤ d[s] ≤ width_s, the pieces filled in order (binary z[s]):
        fill:  d[s] ≥ width_s·z[s],   order:  d[s+1] ≤ width_{s+1}·z[s]"""
    widths = [b - a for a, b in zip(points, points[1:], strict=False)]
    inner = range(len(widths) - 1)
    d = pyo.Var(range(len(widths)), bounds=lambda _m, s: (0.0, widths[s]))
    z = pyo.Var(inner, domain=pyo.Binary)
    m.add_component(f"{name}_step", d)
    m.add_component(f"{name}_full", z)
    m.add_component(
        f"{name}_fill", pyo.Constraint(inner, rule=lambda _m, s: d[s] >= widths[s] * z[s])
    )
    m.add_component(
        f"{name}_order",
        pyo.Constraint(inner, rule=lambda _m, s: d[s + 1] <= widths[s + 1] * z[s]),
    )
    return d


def _exact_at(node: NodeSpread, points: Sequence[float]) -> list[tuple[str, float]]:
    """Rows exact at these changes: the lattice chords around each, or tangents."""
    if node.lattice is None:
        return [("tangent", a) for a in points]
    return [("chord", float(t)) for t in sorted({t for a in points for t in node.chords(a)})]


def _node_lower(m: pyo.ConcreteModel, b: SpreadBound, n: str, kind: str, a: float) -> object:
    """A lower bound of (v[k,n] − c)² = (b_n − c)² + 2(b_n − c)·D + D², D = v[k,n] − b_n."""
    node = b.nodes[n]
    gap = node.base - b.centre
    change = m.v[b.metric, n] - node.base
    expr = gap * gap + 2 * gap * change
    if kind == "squares":  # D² ≥ Σ_j d_jn²·x_jn
        return expr + sum(
            d * d * (m.x[j, n] if role == "p" else m.y[j, n]) for j, role, d in node.terms
        )
    if kind == "chord":  # D² ≥ δ²·((2t+1)·|D|/δ − t(t+1))
        unit = node.lattice
        return expr + (2 * a + 1) * unit * node.sign * change - a * (a + 1) * unit * unit
    return expr + 2 * a * change - a * a  # tangent: D² ≥ 2aD − a²


def spread_rows_at(
    m: pyo.ConcreteModel,
    bounds: Sequence[SpreadBound],
    values: Mapping[str, Sequence[float]],
) -> list[tuple[object, float, None]]:
    """Rows exact at a plan's node values (node -> SD values), as (expr, lb, None) for the
    solver session: later rounds make the bound exact where their plans land."""
    rows = []
    for b in bounds:
        k = b.metric
        for n, node in b.nodes.items():
            change = values[n][k] - node.base
            if not change:
                continue
            for kind, a in _exact_at(node, [change]):
                rows.append((m.sq[k, n] - _node_lower(m, b, n, kind, a), 0.0, None))
    return rows


def define_spread_bound(
    m: pyo.ConcreteModel, problem: PlacementProblem, bounds: Sequence[SpreadBound]
) -> None:
    """Each bounded σ_k from below by rows exact at whole placements (model/spread.py):
    node:    q[k,n] ≥ (b_n − c)² + 2·(b_n − c)·D + lower(D²),   D = v[k,n] − b_n
    spread:  W_k = (Σ_n q[k,n] + fixed_k)/N − P_k,   P_k ≥ (μ_k − c_k)² by secants
    sd:      W_k ≤ secants of σ_k² over [σ_lo, σ_hi]  (so σ_k ≥ √W_k)
    twin:    σ_t = σ_k for a metric t with k's values and changes"""
    size = len(problem.scored)
    rows = []  # (k, n, kind, parameter)
    for b in bounds:
        for n, node in b.nodes.items():
            if node.sign:
                rows.append((b.metric, n, "squares", 0.0))
            rows += [(b.metric, n, kind, a) for kind, a in _exact_at(node, node.points)]
    by_metric = {b.metric: b for b in bounds}
    m.SBN = pyo.Set(initialize=[(b.metric, n) for b in bounds for n in b.nodes], dimen=2)
    m.SBR = pyo.Set(initialize=range(len(rows)))
    m.sq = pyo.Var(m.SBN, doc="q[k,n] ≥ (v[k,n] − c_k)², exact at whole placements")

    def node_row(_m, r):  # noqa: ANN001, ANN202
        k, n, kind, a = rows[r]
        return m.sq[k, n] >= _node_lower(m, by_metric[k], n, kind, a)

    m.sq_lower = pyo.Constraint(m.SBR, rule=node_row)
    for b in bounds:
        k = b.metric
        mean = (
            sum(m.v[k, n] for n in b.nodes)
            + sum(problem.base_sd[n][k] for n in problem.scored if n not in b.nodes)
        ) / size - b.centre
        lo, hi = b.mean_range
        pieces = min(MEAN_PIECES, int((hi - lo) / PIECE_MIN_WIDTH))
        if pieces >= 1:
            points = [lo + (hi - lo) * s / pieces for s in range(pieces + 1)]
            step = _pieces(m, f"mean{k}", points)
            # mean_at: μ_k − c_k = lo + Σ_s e[s];   P_k = lo² + Σ_s (e_s + e_{s+1})·e[s]
            m.add_component(f"mean{k}_at", pyo.Constraint(expr=mean == lo + sum(step.values())))
            square = lo * lo + sum((points[s] + points[s + 1]) * step[s] for s in range(pieces))
        else:  # P_k ≤ the larger end's square
            square = max(lo * lo, hi * hi)
        spread = (sum(m.sq[k, n] for n in b.nodes) + b.fixed) / size - square
        sd_lo, sd_hi = b.sd_range
        # pieces doubling in width, the first at least PIECE_MIN_WIDTH (one at the least)
        pieces = max(1, min(SD_PIECES, int(math.log2((sd_hi - sd_lo) / PIECE_MIN_WIDTH + 1))))
        width = (sd_hi - sd_lo) / (2**pieces - 1)
        points = [sd_lo + width * (2**s - 1) for s in range(pieces + 1)]
        step = _pieces(m, f"sd{k}", points)
        # sd_at: σ_k = σ_lo + Σ_s d[s]
        m.add_component(f"sd{k}_at", pyo.Constraint(expr=m.sigma[k] == sd_lo + sum(step.values())))
        # sd_spread: W_k ≤ σ_lo² + Σ_s (σ_s + σ_{s+1})·d[s], divided by σ_hi² so that its
        # numbers are near 1 whatever the metric's scale (at HiGHS's absolute tolerances,
        # presolve found the plan a range of variances near 1e-3 was centred on infeasible:
        # generated change-group seed 21154)
        scale = 1.0 / max(sd_hi * sd_hi, 1e-12)
        m.add_component(
            f"sd{k}_spread",
            pyo.Constraint(
                expr=scale * spread
                <= scale
                * (
                    sd_lo * sd_lo
                    + sum((points[s] + points[s + 1]) * step[s] for s in range(pieces))
                )
            ),
        )
        for t in b.twins[1:]:
            # twin: σ_t = σ_k
            m.add_component(f"sd{t}_twin", pyo.Constraint(expr=m.sigma[t] == m.sigma[k]))


def _fill(m: pyo.ConcreteModel, name: str, amount: float) -> None:
    """Set a piecewise variable's increments to `amount` above its first breakpoint, the
    pieces filled in order (a start for the solver)."""
    step, full = m.component(f"{name}_step"), m.component(f"{name}_full")
    if step is None:
        return
    for s in step:
        width = step[s].ub
        take = min(max(amount, 0.0), width)
        step[s].set_value(take, skip_validation=True)
        amount -= take
        if s in full:
            full[s].set_value(1 if amount > 0 else 0, skip_validation=True)


def load_spread(
    m: pyo.ConcreteModel,
    problem: PlacementProblem,
    bounds: Sequence[SpreadBound],
    values: Mapping[str, Sequence[float]],
) -> None:
    """The spread bound's variables at a plan (node -> SD values there): q at the true
    squares, the pieces at the plan's mean and true spread (σ ≤ σ_hi for a plan no worse than
    the cutoff), so that a start whose σ were lifted onto the true spreads (`lift_spread`)
    stays a solution."""
    size = len(problem.scored)
    for b in bounds:
        k = b.metric
        column = [values[n][k] for n in problem.scored]
        for n in b.nodes:
            m.sq[k, n].set_value((values[n][k] - b.centre) ** 2, skip_validation=True)
        _fill(m, f"mean{k}", sum(column) / size - b.centre - b.mean_range[0])
        _fill(m, f"sd{k}", sd_of(column) - b.sd_range[0])


def reserve_may_rise(problem: PlacementProblem) -> bool:
    """Whether a plan's score can fall by raising a reserve above its true value (the batch
    model bounds it from below only). Raising r[n] by δ adds w_tot·δ/t_n to the reserves'
    total and changes their spread by at most w_res·δ/(t_n·√N): a plane of the spread has
    |∂sd/∂v_n| = |v_n − μ|/(N·sd) ≤ 1/√N over N nodes. So with w_res < w_tot·√N (N > 16 at
    htools' weights) the least score has every reserve exact, and `define_reserve_exact`
    (two binaries and two rows per new secondary, a sixth of a 200-node evacuation's rows)
    is needed only on smaller groups."""
    return RESERVED_WEIGHT >= RESERVED_TOTAL_WEIGHT * math.sqrt(len(problem.scored))


def build(problem: PlacementProblem, deadline: float | None = None) -> pyo.ConcreteModel:
    """The joint model; past `deadline` (time.perf_counter()) the build stops between two
    families with formulations.deadline.OutOfTime."""
    m = build_batch(problem.batch, usage=False, deadline=deadline)
    m.name = "joint_placement"
    families = [("values", lambda: define_values(m, problem))]
    if reserve_may_rise(problem):
        families.append(("reserve_exact", lambda: define_reserve_exact(m, problem)))
    families += [
        ("tag_conflicts", lambda: define_tag_conflicts(m, problem)),
        ("location_conflicts", lambda: define_location_conflicts(m, problem)),
        ("pair_locations", lambda: define_pair_locations(m, problem)),
        ("n1_failures", lambda: define_n1_failures(m, problem)),
        ("score", lambda: define_score(m, problem)),
    ]
    build_families(families, deadline)
    return m


def objectives(m: pyo.ConcreteModel, problem: PlacementProblem) -> list[Objective]:
    objs = [Objective("placed", m.placed, "max")]
    if problem.batch.has_last_resort:
        objs.append(Objective("on_last_resort", m.on_last_resort, "min"))
    if problem.batch.has_stays:
        objs.append(Objective("stayed", m.stayed, "min"))
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


def lift_spread(m: pyo.ConcreteModel, at: tuple[list[list[float]], list[float]]) -> None:
    """σ_k := sd_k and σ_res := sd(p_rem) at the loaded point `at` (`point`): a solution on or
    above every tangent plane, present or later (sd is convex), so a start stays feasible as
    planes come."""
    values, rem = at
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
