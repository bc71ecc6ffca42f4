"""A lean relaxation of the least score within K of hbal's steps, built as arrays for HiGHS
directly (docs/balance.md, "The lean relaxation"; solvers/highs_arrays.py solves it).

formulations/balance.py's model carries every check hbal makes (capacities, the N+1 reserve's
max, the N+1 flags, tag conflicts): at 40 nodes it takes longer to build and copy through
Pyomo than the whole time limit. This one keeps only what bounds the score: one binary per
final the planes leave (model/balance_bound.py), the step budget, each spread metric's node
values as affine functions of the finals, each spread above its tangent planes (rows added at
every point the strategy visits), and the reserve terms above their tangents at r[n]. The
N+1 count is bounded by a constant and every capacity is dropped, so its optimum is a lower
bound of the least score (among the finals left, hence at most the pruning threshold), and its
solutions are candidate plans the strategy orders and checks.

    one:     Σ_f x[i,f] + c[i] ≤ 1                       (one final per instance; c: its (x,y))
    xy:      Σ_x x2[i,x] = c[i],  Σ_y y2[i,y] = c[i],  x2[i,n] + y2[i,n] ≤ c[i]
    budget:  Σ cost_f·x[i,f] + cost_xy·c[i] ≤ K
    values:  v[k,n] − Σ Δ_k[f,n]·(final f's indicator) = now_k[n]
    planes:  σ_k − Σ_n g_n·v[k,n] ≥ sd_k(v̄) − g·v̄              (each point v̄)
    pair:    r[n] ≥ what pair (q, n) holds after the finals      (`_define_reserve`)
    top:     r[n] ≤ r now + what arrives on n
    ladder:  r[n] ≥ P_1 − Σ_j Σ_{i on pair j} min(f_i, P_j − P_{j+1})·moved_i
    reserve: ρ ≥ Σ_n (w_res·g_n + w_total)·r[n]/t_mem[n]          (each point's p_rem slopes)
    min      Σ_k w_k·σ_k + ρ + Σ offline gains + constant
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from formulations.balance import twins
from model.balance import FA, XY, BalanceData
from model.balance_bound import XY_PRIMARY, XY_SECONDARY, Gains, Plane
from model.placement import SD_METRICS, tangent

INF = float("inf")


@dataclass(frozen=True)
class Rows:
    """Rows in compressed form: lower ≤ Σ value·x[index] ≤ upper, row r's entries from
    starts[r] to starts[r+1]."""

    lower: np.ndarray
    upper: np.ndarray
    starts: np.ndarray
    index: np.ndarray
    value: np.ndarray

    @staticmethod
    def of(rows: Sequence[tuple[float, float, Sequence[int], Sequence[float]]]) -> Rows:
        starts = np.zeros(len(rows) + 1, dtype=np.int32)
        index: list[int] = []
        value: list[float] = []
        for r, (_, _, idx, val) in enumerate(rows):
            if len(set(idx)) < len(idx):  # one column twice in a row: HiGHS wants it once
                merged: dict[int, float] = {}
                for k, v in zip(idx, val, strict=True):
                    merged[k] = merged.get(k, 0.0) + v
                idx, val = list(merged), list(merged.values())
            index.extend(idx)
            value.extend(val)
            starts[r + 1] = len(index)
        return Rows(
            np.array([r[0] for r in rows], dtype=float),
            np.array([r[1] for r in rows], dtype=float),
            starts,
            np.array(index, dtype=np.int32),
            np.array(value, dtype=float),
        )


@dataclass(frozen=True)
class ArrayModel:
    """Columns (cost, bounds, integrality), rows and the objective's constant."""

    cost: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    integer: np.ndarray  # column indices that are binary
    rows: Rows
    offset: float


@dataclass(frozen=True)
class LeanModel:
    """The arrays and what their columns mean."""

    model: ArrayModel
    #: column -> (instance, P, S) of a one-final column; (instance, None, None) for an (x,y)
    #: class column c[i]; x2/y2 columns as (instance, "x"/"y", node)
    finals: Mapping[int, tuple[str, str, str | None]]
    xy_class: Mapping[str, int]
    xy_x: Mapping[int, tuple[str, str]]
    xy_y: Mapping[int, tuple[str, str]]
    #: (leader metric, node) -> column of v; leader metric -> column of σ
    v: Mapping[tuple[int, str], int]
    sigma: Mapping[int, int]
    rho: int
    r: Mapping[str, int]  # node -> column of its N+1 reserve r[n]
    tmem: tuple[float, ...]  # each node's total memory (p_rem = r / tmem)
    leaders: tuple[int, ...]
    lead: tuple[int, ...]  # each metric's leader (formulations/balance.py `twins`)
    nodes: tuple[str, ...]


def _define_columns(data: BalanceData, gains: Gains, leaders: Sequence[int]) -> dict:
    """Every column: finals left, the (x,y) class and its nodes, v, σ and ρ."""
    cols: list[tuple[float, float, float, bool]] = []  # cost, lower, upper, binary
    finals: dict[int, tuple[str, str, str | None]] = {}
    xy_c: dict[str, int] = {}
    xy_x: dict[int, tuple[str, str]] = {}
    xy_y: dict[int, tuple[str, str]] = {}
    from model.score import WEIGHTS

    off_p = WEIGHTS["offline_all_cnt"] + WEIGHTS["offline_pri_cnt"]
    off_s = WEIGHTS["offline_all_cnt"]
    for i in data.instances:
        for cls, big_p, big_s in gains.finals[i.name]:
            if not i.keeps(cls, big_s if cls in ("px", "sx") else big_p):
                continue
            cost = -off_p * (i.primary_offline and big_p != i.primary)
            cost -= off_s * (i.secondary_offline and big_s != i.secondary)
            finals[len(cols)] = (i.name, big_p, big_s)
            cols.append((cost, 0.0, 1.0, True))
        xs, ys = gains.xy[i.name]
        xs = [x for x in xs if i.keeps(XY_PRIMARY, x)]
        ys = [y for y in ys if i.keeps(XY_SECONDARY, y)]
        if xs and ys:
            xy_c[i.name] = len(cols)
            cols.append((-off_p * i.primary_offline - off_s * i.secondary_offline, 0.0, 1.0, True))
            for x in xs:
                xy_x[len(cols)] = (i.name, x)
                cols.append((0.0, 0.0, 1.0, True))
            for y in ys:
                xy_y[len(cols)] = (i.name, y)
                cols.append((0.0, 0.0, 1.0, True))
    weight = {k: 0.0 for k in leaders}
    lead = twins(data)
    for k, m in enumerate(SD_METRICS):
        weight[lead[k]] += m.weight
    v: dict[tuple[int, str], int] = {}
    for k in leaders:
        for n in data.nodes:
            v[k, n.name] = len(cols)
            cols.append((0.0, -INF, INF, False))
    sigma = {}
    for k in leaders:
        sigma[k] = len(cols)
        cols.append((weight[k], 0.0, INF, False))
    rho = len(cols)
    cols.append((1.0, -INF, INF, False))
    r = {}
    for n in data.nodes:
        r[n.name] = len(cols)
        cols.append((0.0, 0.0, INF, False))
    return dict(cols=cols, finals=finals, xy_c=xy_c, xy_x=xy_x, xy_y=xy_y, v=v, sigma=sigma,
                rho=rho, r=r)  # fmt: skip


def _define_choice(data: BalanceData, c: dict) -> list:
    """one, xy and budget rows."""
    rows = []
    by_inst: dict[str, list[int]] = {}
    for col, (j, _, _) in c["finals"].items():
        by_inst.setdefault(j, []).append(col)
    xs_of: dict[str, list[int]] = {}
    ys_of: dict[str, list[int]] = {}
    for col, (j, _) in c["xy_x"].items():
        xs_of.setdefault(j, []).append(col)
    for col, (j, _) in c["xy_y"].items():
        ys_of.setdefault(j, []).append(col)
    budget_idx: list[int] = []
    budget_val: list[float] = []
    inst = {i.name: i for i in data.instances}
    for i in data.instances:
        j = i.name
        idx = list(by_inst.get(j, []))
        if j in c["xy_c"]:
            idx.append(c["xy_c"][j])
        if idx:
            rows.append((-INF, 1.0, idx, [1.0] * len(idx)))
        if j in c["xy_c"]:
            cj = c["xy_c"][j]
            rows.append((0.0, 0.0, [*xs_of[j], cj], [1.0] * len(xs_of[j]) + [-1.0]))
            rows.append((0.0, 0.0, [*ys_of[j], cj], [1.0] * len(ys_of[j]) + [-1.0]))
            y_at = {c["xy_y"][col][1]: col for col in ys_of[j]}
            for col in xs_of[j]:
                n = c["xy_x"][col][1]
                if n in y_at:
                    rows.append((-INF, 0.0, [col, y_at[n], cj], [1.0, 1.0, -1.0]))
    for col, (j, big_p, big_s) in c["finals"].items():
        i = inst[j]
        cls = _class(i, big_p, big_s)
        budget_idx.append(col)
        budget_val.append(1.0 if cls == FA else float(i.steps[cls]))
    for j, cj in c["xy_c"].items():
        budget_idx.append(cj)
        budget_val.append(float(inst[j].steps[XY]))
    rows.append((-INF, float(data.max_steps), budget_idx, budget_val))
    return rows


def _class(i, big_p: str, big_s: str | None) -> str:  # noqa: ANN001
    from model.balance import class_of

    if not i.drbd:
        return FA
    return class_of((i.primary, i.secondary), (big_p, big_s))


def _define_values(data: BalanceData, c: dict, leaders: Sequence[int]) -> list:
    """values rows: v[k,n] − Σ Δ·indicator = now_k[n]."""
    entries: dict[tuple[int, str], tuple[list[int], list[float]]] = {
        key: ([col], [1.0]) for key, col in c["v"].items()
    }
    scored = {n.name for n in data.nodes}
    inst = {i.name: i for i in data.instances}

    def add(col: int, n: str | None, delta: Sequence[float], sign: float) -> None:
        if n is None or n not in scored:
            return
        for k in leaders:
            if delta[k]:
                idx, val = entries[k, n]
                idx.append(col)
                val.append(-sign * delta[k])

    for col, (j, big_p, big_s) in c["finals"].items():
        i = inst[j]
        if big_p != i.primary:
            add(col, i.primary, i.sd_primary[i.primary], -1.0)
            add(col, big_p, i.sd_primary[big_p], 1.0)
        if i.drbd and big_s != i.secondary:
            add(col, i.secondary, i.sd_secondary[i.secondary], -1.0)
            add(col, big_s, i.sd_secondary[big_s], 1.0)  # type: ignore[index]
    for j, cj in c["xy_c"].items():
        i = inst[j]
        add(cj, i.primary, i.sd_primary[i.primary], -1.0)
        add(cj, i.secondary, i.sd_secondary[i.secondary], -1.0)  # type: ignore[index]
    for col, (j, n) in c["xy_x"].items():
        add(col, n, inst[j].sd_primary[n], 1.0)
    for col, (j, n) in c["xy_y"].items():
        add(col, n, inst[j].sd_secondary[n], 1.0)
    node = data.node
    rows = []
    for (k, n), (idx, val) in entries.items():
        now = node[n].sd_now[k]
        rows.append((now, now, idx, val))
    return rows


def build(data: BalanceData, planes: Sequence[Plane], n1_floor: float) -> LeanModel:
    """The lean model with the reserve rows of `planes` (the spreads' planes come from
    `plane_rows`, at the same points and at every later one)."""
    gains = Gains(data)
    lead = twins(data)
    leaders = tuple(k for k in range(len(SD_METRICS)) if lead[k] == k)
    c = _define_columns(data, gains, leaders)
    rows = _define_choice(data, c) + _define_values(data, c, leaders)
    rows += _define_reserve(data, c)
    cols = c["cols"]
    model = ArrayModel(
        cost=np.array([x[0] for x in cols], dtype=float),
        lower=np.array([x[1] for x in cols], dtype=float),
        upper=np.array([x[2] for x in cols], dtype=float),
        integer=np.array([k for k, x in enumerate(cols) if x[3]], dtype=np.int32),
        rows=Rows.of(rows),
        offset=gains.constant_terms(n1_floor),
    )
    return LeanModel(
        model=model,
        finals=c["finals"],
        xy_class=c["xy_c"],
        xy_x=c["xy_x"],
        xy_y=c["xy_y"],
        v=c["v"],
        sigma=c["sigma"],
        rho=c["rho"],
        r=c["r"],
        tmem=tuple(n.total_memory_mib for n in data.nodes),
        leaders=leaders,
        lead=tuple(lead),
        nodes=tuple(n.name for n in data.nodes),
    )


def _define_reserve(data: BalanceData, c: dict) -> list:
    """The reserve r[n] = max_q peers_n[q], bounded on both sides by the finals:
        pair:  r[n] ≥ fixed_n[q] + Σ_{i on (q,n)} f_i·(1 − moved_i) + Σ_{finals (q,n)} f_i·x
               (exact at a whole plan where r[n] is pushed down; an (x,y) final's pair is
               not named, so its arrival is left out: a relaxation)
        top:   r[n] ≤ r_now[n] + Σ_{finals with secondary n} f_i·x   (what arrives, at most)
    where moved_i = Σ of i's final columns."""
    inst = {i.name: i for i in data.instances}
    cols_of: dict[str, list[int]] = {}
    for col, (j, _, _) in c["finals"].items():
        cols_of.setdefault(j, []).append(col)
    for j, col in c["xy_c"].items():
        cols_of.setdefault(j, []).append(col)
    scored = {n.name for n in data.nodes}
    # (n, q) -> [constant, {column: coefficient}] of the pair's failover memory
    pairs: dict[tuple[str, str], list] = {}

    def pair(n: str, q: str) -> list:
        if (n, q) not in pairs:
            pairs[n, q] = [float(data.fixed_peers.get(n, {}).get(q, 0)), {}]
        return pairs[n, q]

    for i in data.instances:
        f = i.failover_mib
        if not i.drbd or not f or i.secondary not in scored:
            continue
        entry = pair(i.secondary, i.primary)  # type: ignore[arg-type]
        entry[0] += f
        for col in cols_of.get(i.name, ()):
            entry[1][col] = entry[1].get(col, 0.0) - f
    arrive: dict[str, dict[int, float]] = {n: {} for n in scored}
    for col, (j, big_p, big_s) in c["finals"].items():
        i = inst[j]
        if not i.drbd or not i.failover_mib or big_s not in scored:
            continue
        entry = pair(big_s, big_p)  # type: ignore[arg-type]
        entry[1][col] = entry[1].get(col, 0.0) + i.failover_mib
        arrive[big_s][col] = float(i.failover_mib)  # type: ignore[index]
    for col, (j, n) in c["xy_y"].items():
        if inst[j].failover_mib and n in scored:
            arrive[n][col] = float(inst[j].failover_mib)
    rows = _reserve_ladder(data, c, cols_of)
    for n in data.nodes:
        fixed = data.fixed_peers.get(n.name, {})
        for q, mib in fixed.items():
            if (n.name, q) not in pairs and mib:
                rows.append((float(mib), INF, [c["r"][n.name]], [1.0]))
    for (n, _), (const, terms) in pairs.items():
        idx = [c["r"][n], *terms]
        val = [1.0, *(-v for v in terms.values())]
        rows.append((const, INF, idx, val))
    for n in data.nodes:
        terms = arrive[n.name]
        idx = [c["r"][n.name], *terms]
        val = [1.0, *(-v for v in terms.values())]
        rows.append((-INF, float(n.reserve_mib), idx, val))
    return rows


def _reserve_ladder(data: BalanceData, c: dict, cols_of: Mapping[str, list[int]]) -> list:
    """ladder: r[n] ≥ P_1 − Σ_j Σ_{i on pair j} min(f_i, P_j − P_{j+1})·moved_i, the pairs'
    failover memory now sorted P_1 ≥ P_2 ≥ … (P_{m+1} = 0), arrivals left out. Valid at every
    whole plan: let k be the first pair whose terms sum below P_k − P_{k+1}; each of its
    movers then counts its whole f_i, so the right side is at most P_k − (what left pair k),
    at most r[n]; with no such k it is at most 0. A relaxation that moves a fraction of the
    top pair's instance lowers r[n] only by that fraction of the step to the next pair."""
    movers: dict[tuple[str, str], list] = {}
    for i in data.instances:
        if i.drbd and i.failover_mib and i.name in cols_of:
            movers.setdefault((i.secondary, i.primary), []).append(i)  # type: ignore[arg-type]
    rows = []
    for n in data.nodes:
        loads = sorted(n.peers_mib.items(), key=lambda kv: -kv[1])
        if not loads or loads[0][1] <= 0:
            continue
        idx: list[int] = []
        val: list[float] = []
        for k, (q, mib) in enumerate(loads):
            step = mib - (loads[k + 1][1] if k + 1 < len(loads) else 0)
            for i in movers.get((n.name, q), ()):
                coef = float(min(i.failover_mib, step))
                if coef > 0:
                    for col in cols_of[i.name]:
                        idx.append(col)
                        val.append(coef)
        if idx:
            rows.append((float(loads[0][1]), INF, [c["r"][n.name], *idx], [1.0, *val]))
    return rows


def reserve_rows(lean: LeanModel, planes: Sequence[Plane]) -> Rows:
    """reserve: ρ ≥ Σ_n (w_res·g_n + w_total)·r[n]/t_mem[n] for each plane's p_rem slopes
    (the spread of p_rem is at least its tangent, homogeneous, the total is linear)."""
    rows = []
    for plane in planes:
        idx = [lean.rho]
        val = [1.0]
        for n, slope, t in zip(lean.nodes, plane.rem_slope, lean.tmem, strict=True):
            if slope:
                idx.append(lean.r[n])
                val.append(-float(slope) / t)
        rows.append((0.0, INF, idx, val))
    return Rows.of(rows)


def rem_of(lean: LeanModel, x: np.ndarray) -> list[float]:
    """p_rem per node in a solution."""
    return [float(x[lean.r[n]]) / t for n, t in zip(lean.nodes, lean.tmem, strict=True)]


def plane_rows(lean: LeanModel, values: Sequence[Sequence[float]]) -> Rows:
    """planes: σ_k − Σ_n g_n·v[k,n] ≥ sd(v̄) − g·v̄ at a point (every metric's node values)."""
    rows = []
    for k in lean.leaders:
        sd, grad = tangent(list(values[k]))
        const = sd - sum(g * x for g, x in zip(grad, values[k], strict=True))
        idx = [lean.sigma[k]]
        val = [1.0]
        for n, g in zip(lean.nodes, grad, strict=True):
            if g:
                idx.append(lean.v[k, n])
                val.append(-g)
        rows.append((const, INF, idx, val))
    return Rows.of(rows)


def point_of(lean: LeanModel, x: np.ndarray) -> list[list[float]]:
    """Each metric's node values in a solution (twins take their leader's)."""
    values = {k: [float(x[lean.v[k, n]]) for n in lean.nodes] for k in lean.leaders}
    return [values[lead] for lead in lean.lead]


def finals_of(lean: LeanModel, data: BalanceData, x: np.ndarray) -> dict:
    """Each instance's final (primary, secondary) in a whole solution."""
    out = {i.name: (i.primary, i.secondary) for i in data.instances}
    for col, (j, big_p, big_s) in lean.finals.items():
        if x[col] > 0.5:
            out[j] = (big_p, big_s)
    xs = {j: n for col, (j, n) in lean.xy_x.items() if x[col] > 0.5}
    ys = {j: n for col, (j, n) in lean.xy_y.items() if x[col] > 0.5}
    for j, n in xs.items():
        if j in ys:
            out[j] = (n, ys[j])
    return out


def nogood_row(lean: LeanModel, data: BalanceData, finals: Mapping, moved: Sequence[str]) -> Rows:
    """A set of finals with no order: not all of them again (Σ indicators ≤ |set| − 1; an
    (x,y) final's indicator bounded below by x2 + y2 − 1)."""
    col_of = {(j, p, s): col for col, (j, p, s) in lean.finals.items()}
    x_of = {v: col for col, v in lean.xy_x.items()}
    y_of = {v: col for col, v in lean.xy_y.items()}
    idx: list[int] = []
    val: list[float] = []
    rhs = float(len(moved)) - 1.0
    for j in moved:
        p, s = finals[j]
        if (j, p, s) in col_of:
            idx.append(col_of[j, p, s])
            val.append(1.0)
        else:
            idx += [x_of[j, p], y_of[j, s]]
            val += [1.0, 1.0]
            rhs += 1.0
    return Rows.of([(-INF, rhs, idx, val)])


def start_of(lean: LeanModel, finals: Mapping[str, tuple[str, str | None]]) -> tuple:
    """Every binary column's value for a plan (each instance's final; absent ones stay): a
    starting point the solver completes. None when a final of the plan is not in the model."""
    values = np.zeros(len(lean.model.cost))
    col_of = {(j, p, s): col for col, (j, p, s) in lean.finals.items()}
    x_of = {v: col for col, v in lean.xy_x.items()}
    y_of = {v: col for col, v in lean.xy_y.items()}
    for j, (p, s) in finals.items():
        if (j, p, s) in col_of:
            values[col_of[j, p, s]] = 1.0
        elif j in lean.xy_class and (j, p) in x_of and (j, s) in y_of:
            values[lean.xy_class[j]] = 1.0
            values[x_of[j, p]] = values[y_of[j, s]] = 1.0
    idx = lean.model.integer
    return idx, values[idx]
