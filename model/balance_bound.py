"""A lower bound of the group score after at most K of hbal's steps from tangent planes, and
the finals it proves useless (docs/balance.md, "Planes and pruning").

Every spread σ_k of the score is convex and positively homogeneous, so one plane at any point
v̄ bounds it everywhere: σ_k(v) ≥ g_k·v with g_k = (v̄ − mean v̄) / (N·sd(v̄)). Each node's
values are affine in the instances' finals (model.balance: value = now + Σ changes), so under
one plane the score is at least a constant plus a sum of per-instance gains, one gain per final
(P, S), separable in P and S. The reserve terms (the spread and the total of p_rem) are bounded
the same way with r[n] between bounds that are linear in the finals (r[n] = max_q peers_n[q]:
at least peers_n[q*] minus what leaves the pair (q*, n), at most r now plus what arrives),
the N+1 count by the locality argument of model.balance.locality_bound, the tag conflicts by 0.

Under one plane the least bound over plans of at most K steps is a knapsack over instances (each
final costs its class's fewest steps, model.balance.class_paths): a dynamic programme over the
budget. It is a valid lower bound of the least score (the final state relaxes every check),
and it proves finals useless: a plan that ends an instance on final f scores at least
C + gain(f) + (the best of the other instances with K − cost(f) steps), and where that is at
least a threshold T for some plane, no plan using f scores below T. The model is then built on
the finals left (formulations/balance.py `allowed`), and the least score is at least
min(the model's bound, T).

Plain data and numpy only: no solver here.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from model.balance import FA, PX, STAY, SWAP, SX, XP, XS, XY, BalanceData, MovableData

#: `PlaneBound.allowed`'s keys of the (x,y) class: its primaries x and secondaries y left
XY_PRIMARY, XY_SECONDARY = "xy:x", "xy:y"
#: relative slack under which a final is kept though its bound reaches the threshold (floats)
PRUNE_SLACK = 1e-9


@dataclass(frozen=True)
class Plane:
    """A tangent of the score's convex part at a point: per spread metric and node the
    weighted slope, and per node the slope of the reserve share p_rem (its spread's tangent
    plus the total's weight)."""

    sd_slope: np.ndarray  # (metrics, nodes): w_k · g_k[n]
    rem_slope: np.ndarray  # (nodes,): w_res · g_res[n] + w_total


def plane_at(values: Sequence[Sequence[float]], rem: Sequence[float]) -> Plane:
    """The plane at a point (each spread metric's node values, and p_rem per node)."""
    from model.placement import RESERVED, RESERVED_TOTAL, SD_METRICS, tangent
    from model.score import WEIGHTS

    slopes = np.array(
        [
            np.array(tangent(list(vs))[1]) * m.weight
            for vs, m in zip(values, SD_METRICS, strict=True)
        ]
    )
    rem_slope = np.array(tangent(list(rem))[1]) * WEIGHTS[RESERVED] + WEIGHTS[RESERVED_TOTAL]
    return Plane(slopes, rem_slope)


@dataclass(frozen=True)
class _Finals:
    """One instance's candidate finals under one plane: (class, primary, secondary) and gain."""

    keys: tuple[tuple[str, str, str | None], ...]
    gains: np.ndarray
    costs: np.ndarray
    #: the (x,y) class: gain = xy_x[x] + xy_y[y] over x != y, at cost xy_cost
    xy_x: np.ndarray
    xy_y: np.ndarray
    xy_cost: int
    xs_in_y: np.ndarray  # position of each x among the ys, or -1
    ys_in_x: np.ndarray

    def xy_best(self) -> tuple[np.ndarray, np.ndarray]:
        """Per x the least gain over y != x, and per y the least over x != y."""
        return _least_apart(self.xy_x, self.xy_y, self.xs_in_y), _least_apart(
            self.xy_y, self.xy_x, self.ys_in_x
        )


@dataclass(frozen=True)
class PlaneBound:
    """What the planes prove: the score after at most K steps is at least `bound`; with a
    threshold T, every final in `pruned` ends only plans scoring at least T, and `allowed`
    holds, per instance and class, the nodes (the other node x, or for (x,y) both) left."""

    bound: float
    threshold: float | None
    allowed: Mapping[str, Mapping[str, frozenset[str]]]
    kept: int  # finals left
    total: int  # finals before pruning


def _node_index(data: BalanceData) -> dict[str, int]:
    return {n.name: k for k, n in enumerate(data.nodes)}


def _finals(i: MovableData) -> list[tuple[str, str, str | None]]:
    """Every final within reach (class, P, S) but the (x,y) ones (their gain is a sum of a
    term of x and a term of y: kept apart as two arrays), as formulations/balance.py names
    them."""
    if not i.drbd:
        return [(FA, n, None) for n in i.primaries]
    p, s = i.primary, i.secondary
    assert s is not None
    out: list[tuple[str, str, str | None]] = []
    if SWAP in i.steps and s in i.primaries and p in i.secondaries:
        out.append((SWAP, s, p))
    if PX in i.steps:
        out += [(PX, p, n) for n in i.secondaries if n != p]
    if SX in i.steps and s in i.primaries:
        out += [(SX, s, n) for n in i.secondaries if n != p]
    if XP in i.steps and p in i.secondaries:
        out += [(XP, n, p) for n in i.primaries if n != s]
    if XS in i.steps:
        out += [(XS, n, s) for n in i.primaries if n != s]
    return out


def _xy_nodes(i: MovableData) -> tuple[list[str], list[str]]:
    """The (x,y) class's candidate primaries and secondaries (formulations/balance.py's)."""
    if not i.drbd or XY not in i.steps:
        return [], []
    return (
        [n for n in i.primaries if n != i.secondary],
        [n for n in i.secondaries if n != i.primary],
    )


class Gains:
    """Per plane, each instance's gain per final: the change of the plane's value. The
    nodes' changes are kept as arrays per instance, so a plane costs a few array products."""

    def __init__(self, data: BalanceData) -> None:
        self.data = data
        self.index = _node_index(data)
        self.tmem = np.array([n.total_memory_mib for n in data.nodes], dtype=float)
        self.width = len(data.nodes[0].sd_now) if data.nodes else 0
        self.finals = {i.name: _finals(i) for i in data.instances}
        self.xy = {i.name: _xy_nodes(i) for i in data.instances}
        # the pair whose failover memory sets each node's reserve now (ties: any of them)
        self.top: dict[str, str | None] = {}
        for n in data.nodes:
            best = max(n.peers_mib.items(), key=lambda kv: kv[1], default=(None, 0))
            self.top[n.name] = best[0] if best[1] == n.reserve_mib and best[1] > 0 else None
        self.arrays = {i.name: self._arrays(i) for i in data.instances}

    def _arrays(self, i: MovableData) -> tuple:
        """The instance's candidate nodes and changes as arrays, and each final's place."""
        from model.score import WEIGHTS

        idx = self.index
        p, s = i.primary, i.secondary
        prim = sorted(n for n in {*i.primaries, p} if n in idx and n in i.sd_primary)
        sec = sorted(n for n in {*i.secondaries, s} if n in idx and n in i.sd_secondary)
        pos_p = {n: k for k, n in enumerate(prim)}
        pos_s = {n: k for k, n in enumerate(sec)}
        dp = np.array([i.sd_primary[n] for n in prim], dtype=float).reshape(len(prim), self.width)
        ds = np.array([i.sd_secondary[n] for n in sec], dtype=float).reshape(len(sec), self.width)
        keys = self.finals[i.name]
        # a node not scored (an offline primary kept) has no place: it adds nothing
        fp = np.array([pos_p.get(k[1], -1) for k in keys], dtype=int)
        fs = np.array([-1 if k[2] is None else pos_s.get(k[2], -1) for k in keys], dtype=int)
        # the offline counts: a primary or secondary that leaves its offline node
        off_p = WEIGHTS["offline_all_cnt"] + WEIGHTS["offline_pri_cnt"]
        off = np.array(
            [
                -off_p * (i.primary_offline and k[1] != p)
                - WEIGHTS["offline_all_cnt"] * (i.secondary_offline and k[2] != s)
                for k in keys
            ],
            dtype=float,
        )
        costs = np.array([1 if k[0] == FA else i.steps[k[0]] for k in keys], dtype=int)
        xs, ys = self.xy[i.name]
        xp = np.array([pos_p[x] for x in xs], dtype=int)
        ysp = np.array([pos_s[y] for y in ys], dtype=int)
        pos_y = {y: k for k, y in enumerate(ys)}
        pos_x = {x: k for k, x in enumerate(xs)}
        xs_in_y = np.array([pos_y.get(x, -1) for x in xs], dtype=int)
        ys_in_x = np.array([pos_x.get(y, -1) for y in ys], dtype=int)
        node_p = np.array([idx[n] for n in prim], dtype=int)
        node_s = np.array([idx[n] for n in sec], dtype=int)
        return (prim, sec, pos_p, pos_s, dp, ds, fp, fs, costs, xp, ysp, xs_in_y, ys_in_x,
                node_p, node_s, off)  # fmt: skip

    def constant(self, plane: Plane, n1_floor: float) -> float:
        """The plane's value with nothing moved, plus the terms bounded by constants."""
        from model.score import WEIGHTS

        data = self.data
        now = np.array([n.sd_now for n in data.nodes], dtype=float).T  # (metrics, nodes)
        total = float(np.sum(plane.sd_slope * now))
        rem = np.array([n.reserve_mib for n in data.nodes], dtype=float) / self.tmem
        total += float(np.dot(plane.rem_slope, rem))
        for i in data.instances:
            total += (WEIGHTS["offline_all_cnt"] + WEIGHTS["offline_pri_cnt"]) * i.primary_offline
            total += WEIGHTS["offline_all_cnt"] * i.secondary_offline
        return total + n1_floor + data.score_constant

    def constant_terms(self, n1_floor: float) -> float:
        """The score's terms no plane carries, with nothing moved: the N+1 floor, the offline
        counts now and what the model leaves out (`score_constant`)."""
        from model.score import WEIGHTS

        total = n1_floor + self.data.score_constant
        for i in self.data.instances:
            total += (WEIGHTS["offline_all_cnt"] + WEIGHTS["offline_pri_cnt"]) * i.primary_offline
            total += WEIGHTS["offline_all_cnt"] * i.secondary_offline
        return total

    def of(self, plane: Plane, i: MovableData) -> _Finals:
        from model.score import WEIGHTS

        (prim, sec, pos_p, pos_s, dp, ds, fp, fs, costs, xp, ysp, xs_in_y, ys_in_x,
         node_p, node_s, off) = self.arrays[i.name]  # fmt: skip
        idx = self.index
        gp = np.einsum("kn,nk->n", plane.sd_slope[:, node_p], dp) if len(prim) else np.zeros(0)
        gs = np.einsum("kn,nk->n", plane.sd_slope[:, node_s], ds) if len(sec) else np.zeros(0)
        p, s = i.primary, i.secondary
        leave = -(gp[pos_p[p]] if p in pos_p else 0.0) - (gs[pos_s[s]] if s in pos_s else 0.0)
        moved = 0.0  # every final but staying
        f = i.failover_mib
        if i.drbd and f and s in idx and self.top.get(s) == p:  # type: ignore[arg-type]
            c = plane.rem_slope[idx[s]]  # type: ignore[index]
            moved -= max(c, 0.0) * f / self.tmem[idx[s]]  # type: ignore[index]
        if f and len(sec):
            # an arrival there: the reserve's upper bound grows where its slope is negative
            arrive = np.minimum(plane.rem_slope[node_s], 0.0) * f / self.tmem[node_s]
        else:
            arrive = np.zeros(len(sec))
        # one more place, 0, for a node without one
        gp0 = np.append(gp, 0.0)
        gs0 = np.append(gs + arrive, 0.0)
        gains = leave + moved + off + gp0[fp] + gs0[fs]
        off_xy = -(WEIGHTS["offline_all_cnt"] + WEIGHTS["offline_pri_cnt"]) * i.primary_offline
        off_xy -= WEIGHTS["offline_all_cnt"] * i.secondary_offline
        xy_x = leave + moved + off_xy + gp0[xp]
        xy_y = gs0[ysp]
        return _Finals(self.finals[i.name], gains, costs, xy_x, xy_y, i.steps.get(XY, 0),
                       xs_in_y, ys_in_x)  # fmt: skip


def _least_apart(own: np.ndarray, other: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """own[a] + min over b of other[b], b not the same node as a (`pos`: a's place among
    the b, or -1)."""
    if not len(own) or not len(other):
        return np.full(len(own), np.inf)
    order = np.argsort(other)
    first = other[order[0]]
    second = other[order[1]] if len(other) > 1 else np.inf
    best = np.where(pos == order[0], second, first)
    return own + best


def _best_by_cost(fin: _Finals, k_max: int) -> np.ndarray:
    """best[c] = least gain of a final costing exactly c steps (0: staying)."""
    best = np.full(k_max + 1, np.inf)
    best[0] = 0.0
    for c in range(1, k_max + 1):
        sel = fin.costs == c
        if sel.any():
            best[c] = float(fin.gains[sel].min())
    if 0 < fin.xy_cost <= k_max and len(fin.xy_x):
        best[fin.xy_cost] = min(best[fin.xy_cost], float(fin.xy_best()[0].min()))
    return best


def _knap(acc: np.ndarray, best: np.ndarray) -> np.ndarray:
    """Least total gain with each budget b (at most b steps), one more instance added."""
    k_max = len(acc) - 1
    out = acc.copy()
    for c in range(1, k_max + 1):
        if math.isfinite(best[c]):
            out[c:] = np.minimum(out[c:], acc[: k_max + 1 - c] + best[c])
    return out


def plane_bound(
    data: BalanceData,
    planes: Sequence[Plane],
    n1_floor: float,
    threshold: float | None = None,
    deadline: float | None = None,
) -> PlaneBound:
    """The best of the planes' knapsack bounds, and with `threshold` the finals each plane
    proves useless below it (see the module's docstring). Once the perf_counter time
    `deadline` has passed, the planes after the first are left out (each plane's bound and
    pruning hold alone; on 200 nodes a plane takes seconds)."""
    k_max = data.max_steps
    gains = Gains(data)
    insts = list(data.instances)
    best_bound = -math.inf
    prune: dict[str, np.ndarray] = {
        i.name: np.zeros(len(gains.finals[i.name]), dtype=bool) for i in insts
    }
    prune_x = {i.name: np.zeros(len(gains.xy[i.name][0]), dtype=bool) for i in insts}
    prune_y = {i.name: np.zeros(len(gains.xy[i.name][1]), dtype=bool) for i in insts}
    for k, plane in enumerate(planes):
        if k and deadline is not None and time.perf_counter() >= deadline:
            break
        const = gains.constant(plane, n1_floor)
        fins = [gains.of(plane, i) for i in insts]
        bests = [_best_by_cost(f, k_max) for f in fins]
        zero = np.zeros(k_max + 1)
        pre = [zero]
        for b in bests:
            pre.append(_knap(pre[-1], b))
        best_bound = max(best_bound, const + float(pre[-1][k_max]))
        if threshold is None:
            continue
        suf = [zero]
        for b in reversed(bests):
            suf.append(_knap(suf[-1], b))
        suf.reverse()  # suf[j]: instances j.. on
        for j, (i, fin) in enumerate(zip(insts, fins, strict=True)):
            a, z = pre[j], suf[j + 1]
            # the best of every other instance with each budget left
            rest = np.array([min(a[b] + z[budget - b] for b in range(budget + 1))
                             for budget in range(k_max + 1)])  # fmt: skip
            cut = threshold * (1 + PRUNE_SLACK) + PRUNE_SLACK
            if len(fin.gains):
                lower = const + fin.gains + rest[np.maximum(k_max - fin.costs, 0)]
                prune[i.name] |= (lower >= cut) | (fin.costs > k_max)
            if len(fin.xy_x):
                if fin.xy_cost > k_max:
                    prune_x[i.name][:] = True
                    prune_y[i.name][:] = True
                    continue
                bx, by = fin.xy_best()
                prune_x[i.name] |= const + bx + rest[k_max - fin.xy_cost] >= cut
                prune_y[i.name] |= const + by + rest[k_max - fin.xy_cost] >= cut
    allowed: dict[str, dict[str, set[str]]] = {}
    kept = total = 0
    for i in insts:
        classes: dict[str, set[str]] = {}
        for (cls, big_p, big_s), gone in zip(gains.finals[i.name], prune[i.name], strict=True):
            total += 1
            if gone:
                continue
            kept += 1
            nodes = classes.setdefault(cls, set())
            if cls in (PX, SX):
                nodes.add(big_s)  # type: ignore[arg-type]
            elif cls in (XP, XS, FA):
                nodes.add(big_p)
            elif cls == SWAP:
                nodes.add(big_p)
        xs, ys = gains.xy[i.name]
        total += len(xs) * len(ys)
        left_x = [x for x, gone in zip(xs, prune_x[i.name], strict=True) if not gone]
        left_y = [y for y, gone in zip(ys, prune_y[i.name], strict=True) if not gone]
        if left_x and left_y:
            kept += len(left_x) * len(left_y)
            classes[XY_PRIMARY] = set(left_x)
            classes[XY_SECONDARY] = set(left_y)
        classes.setdefault(STAY, set())
        allowed[i.name] = classes
    frozen = {
        j: {cls: frozenset(nodes) for cls, nodes in classes.items()}
        for j, classes in allowed.items()
    }
    return PlaneBound(best_bound, threshold, frozen, kept, total)


def n1_floor(data: BalanceData) -> float:
    """The N+1 count after K steps is at least what the nodes no step reaches keep: every
    failing node's count but the 3K largest (model.balance.locality_bound's argument)."""
    from model.balance import NODES_PER_STEP
    from model.score import WEIGHTS

    counts = sorted(n.instances for n in data.nodes if n.fails_loaded)
    keep = max(len(counts) - NODES_PER_STEP * data.max_steps, 0)
    return WEIGHTS["n1_cnt"] * math.fsum(counts[:keep])


def restricted(
    data: BalanceData, allowed: Mapping[str, Mapping[str, frozenset[str]]]
) -> BalanceData:
    """The data with each instance's finals cut down to those the planes leave."""
    from dataclasses import replace

    insts = tuple(replace(i, allowed=allowed.get(i.name)) for i in data.instances)
    return replace(data, instances=insts)
