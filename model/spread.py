"""The score's spreads, bounded where placements are whole (docs/placement.md, "A bound that
sees whole instances").

Each standard deviation is sd = √V with, for any constant c (here the mean at a known plan),

    V = (1/N)·Σ_n (v_n − c)² − (μ − c)²,    v_n = b_n + D_n,   D_n = Σ_j d_jn·x_jn

and x_jn counts whole instances. Tangent planes of sd alone are exact only where they touch:
a relaxation spreads fractions of instances over every node and stays under them. Per node,
(v_n − c)² = (b_n − c)² + 2·(b_n − c)·D_n + D_n², and D_n² has linear lower bounds that are
exact at whole placements:

    squares:  D² ≥ Σ_j d_jn²·x_jn              (every d_jn of one sign: cross terms ≥ 0, x² ≥ x)
    lattice:  D² ≥ δ²·((2t+1)·u − t·(t+1))     (every d_jn a multiple of δ, u = |D|/δ whole:
                                               the chord of u² between t and t+1)
    tangent:  D² ≥ 2·a·D − a²                  (everywhere)

(μ − c)² is bounded from above by secants over μ's range, and √V from below through σ² ≤
secants of σ² over [σ_lo, σ_hi]: σ_lo is the least spread of the continuous relaxation (the
batch's amounts poured onto the nodes, `lowest_sd`), σ_hi the most that a plan no worse than the
known one allows. This module computes these constants from the problem alone;
formulations/placement.py writes the rows.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from model.placement import SD_METRICS, PlacementProblem, sd_weights, sum_weights
from model.score import WEIGHTS

#: Totals of two instances per node where rows are exact from the start (the largest ones;
#: later rounds add rows where their plans land).
MAX_POINTS = 10
#: Largest divisor of the smallest change tried for a lattice unit (memory sizes in whole GiB
#: have unit 1 GiB: divisor ≤ 16 for 16 GiB instances).
MAX_DIVISOR = 64
#: Relative slack on every bound computed in floating point, so that rounding never cuts off a
#: plan (σ_lo lowered, σ_hi raised by this fraction).
SLACK = 1e-7

Placements = Sequence[tuple[str, str, str | None]]  # (kind, primary, secondary)


@dataclass(frozen=True)
class NodeSpread:
    """One movable node of one metric: its value now and where its rows are exact."""

    base: float
    sign: float  # +1 or −1 when every change has this sign, 0 when they are mixed
    lattice: float | None  # δ: every change is a whole multiple of it (None: no small unit)
    points: tuple[float, ...]  # changes D at which a row is exact (chords on a lattice)
    terms: tuple[tuple[str, str, float], ...] = ()  # (kind, role "p"/"s", change d_jn)

    def chords(self, point: float) -> tuple[int, ...]:
        """The lattice chords exact at `point` (u = |D|/δ): between u−1, u and u, u+1."""
        assert self.lattice is not None
        u = int(round(abs(point) / self.lattice))
        return (u - 1, u) if u else (0,)


@dataclass(frozen=True)
class SpreadBound:
    """What the model needs to bound one standard-deviation metric (and its twins)."""

    metric: int  # index into SD_METRICS
    twins: tuple[int, ...]  # metrics with the same values now and the same changes
    centre: float  # c
    fixed: float  # Σ (b_n − c)² over the scored nodes no placement changes
    nodes: Mapping[str, NodeSpread]
    mean_range: tuple[float, float]  # μ − c over plans placing every instance
    sd_range: tuple[float, float]  # σ_lo, σ_hi


def _changes(problem: PlacementProblem) -> dict[tuple[int, str], list[tuple[str, str, float]]]:
    """(metric, node) -> [(kind, role, change)] for the nonzero changes."""
    out: dict[tuple[int, str], list[tuple[str, str, float]]] = defaultdict(list)
    for role, table in (("p", problem.primary_sd), ("s", problem.secondary_sd)):
        for (j, n), delta in table.items():
            for k, d in enumerate(delta):
                if d:
                    out[k, n].append((j, role, d))
    return out


def twin_groups(problem: PlacementProblem) -> list[tuple[int, ...]]:
    """Metrics grouped when their values now and every change are equal (htools scores
    e.g. the cpu, memory and network loads alike when no utilisation is given): one sd."""

    def signature(k: int) -> tuple:
        base = tuple(problem.base_sd[n][k] for n in problem.scored)
        changes = tuple(
            sorted(
                (role, j, n, delta[k])
                for role, table in (("p", problem.primary_sd), ("s", problem.secondary_sd))
                for (j, n), delta in table.items()
            )
        )
        return base, changes

    groups: dict[tuple, list[int]] = {}
    for k in range(len(SD_METRICS)):
        groups.setdefault(signature(k), []).append(k)
    return [tuple(g) for g in groups.values()]


def values_at(problem: PlacementProblem, plan: Placements) -> dict[str, list[float]]:
    """Every scored node's SD-metric values after a plan."""
    values = {n: list(problem.base_sd[n]) for n in problem.scored}
    for j, p, s in plan:
        for table, node in ((problem.primary_sd, p), (problem.secondary_sd, s)):
            if node is None or node not in values:
                continue
            for k, d in enumerate(table[j, node]):
                values[node][k] += d
    return values


def _lattice(changes: list[float]) -> float | None:
    """The largest δ that every |change| is a whole multiple of, among the smallest change
    divided by 1 .. MAX_DIVISOR (None when there is none)."""
    sizes = sorted({abs(d) for d in changes})
    smallest = sizes[0]
    for divisor in range(1, MAX_DIVISOR + 1):
        unit = smallest / divisor
        if all(abs(s / unit - round(s / unit)) <= 1e-9 * (s / unit) for s in sizes):
            return unit
    return None


def _pairs(sizes: Mapping[float, int]) -> list[float]:
    """The totals of two changes (size -> how many there are), largest first: a single change
    is exact by the squares row, and a missed total costs (D − a)², most for large ones."""
    items = sorted(sizes)
    totals = {a + b for i, a in enumerate(items) for b in items[i:] if a != b or sizes[a] >= 2}
    return sorted(totals, reverse=True)


def _node_rows(base: float, terms: list[tuple[str, str, float]], counts: Mapping[str, int],
               at: float) -> NodeSpread:  # fmt: skip
    """The rows of one node: squares (exact with one instance) when one sign; rows exact at
    the largest totals of two instances, at one to three lattice units and at the known
    plan's change."""
    changes = [d for _, _, d in terms]
    sign = 1.0 if all(d > 0 for d in changes) else -1.0 if all(d < 0 for d in changes) else 0.0
    unit = _lattice(changes) if sign else None
    sizes: dict[float, int] = defaultdict(int)
    for j, _, d in terms:
        sizes[abs(d)] += counts[j]
    reach = sum(size * k for size, k in sizes.items())
    direction = sign or 1.0
    points = [direction * t for t in _pairs(sizes)[:MAX_POINTS] if t <= reach * (1 + 1e-12)]
    if unit is not None:  # a few whole units (a node's third or fourth instance of one size)
        points += [direction * unit * u for u in (1, 2, 3) if unit * u <= reach * (1 + 1e-12)]
    if at:
        points.append(at)
    return NodeSpread(base, sign, unit, tuple(sorted(set(points))), tuple(terms))


def _separable(
    problem: PlacementProblem, k: int
) -> tuple[dict[tuple[str, str], float], dict[str, float]] | None:
    """Changes of metric k as amount(kind, role) × scale(node), amounts positive, or None:
    then the batch's amounts can be poured onto the nodes (`lowest_sd`).

    The factors are read along the changes that link kinds and nodes: a kind's amount is its
    largest change, a node's scale its change per unit of that, and from the node on to the
    kinds it takes. Not every kind reaches every node (a node too small for one, a drbd
    secondary's candidates), so one kind's largest change need not be at the node another
    kind's is (until 2026-11-27 each kind's own largest set its amount, and seed 2 of
    benchmarks/bench_joint.py lost its memory, disk and vCPU bounds)."""
    entries = [
        (j, role, n, delta[k])
        for role, table in (("p", problem.primary_sd), ("s", problem.secondary_sd))
        for (j, n), delta in table.items()
    ]
    largest: dict[tuple[str, str], float] = defaultdict(float)
    of_kind: dict[tuple[str, str], list[tuple[str, float]]] = defaultdict(list)
    of_node: dict[str, list[tuple[tuple[str, str], float]]] = defaultdict(list)
    for j, role, n, d in entries:
        if abs(d) > abs(largest[j, role]):
            largest[j, role] = d
        if d:
            of_kind[j, role].append((n, d))
            of_node[n].append(((j, role), d))
    scale: dict[str, float] = {}
    amount: dict[tuple[str, str], float] = {}
    for first, ref in largest.items():
        if not ref or first in amount:
            continue
        amount[first] = abs(ref)
        kinds = [first]
        while kinds:  # one linked part of kinds and nodes
            kind = kinds.pop()
            for n, d in of_kind[kind]:
                if n in scale:
                    continue
                scale[n] = d / amount[kind]
                for other, e in of_node[n]:
                    if other not in amount:
                        amount[other] = e / scale[n]
                        if amount[other] <= 0:  # changes of opposite signs on one node
                            return None
                        kinds.append(other)
    for j, role, n, d in entries:
        expect = amount.get((j, role), 0.0) * scale.get(n, 0.0)
        if abs(d - expect) > 1e-9 * max(abs(d), abs(expect), 1e-12):
            return None
    return amount, scale


def lowest_sd(base: np.ndarray, scale: np.ndarray, cap: np.ndarray, total: float) -> float:
    """min sd(b + s·M) over 0 ≤ M_n ≤ cap_n, Σ M_n = total (the amounts poured continuously):
    below every whole plan's sd. For a centre c, the least Σ (b_n + s_n·M_n − c)² has
    M_n = clamp((c − b_n)/s_n − λ/(2·s_n²), 0, cap_n), λ found by bisection; the least over c
    by golden section (the inner minimum is convex in c). Nodes with s_n = 0 take amounts
    without changing: Σ over the others need only reach total − their room."""
    if len(base) == 0:
        return 0.0
    active = scale != 0
    room = float(cap[~active].sum())
    least = max(total - room, 0.0)
    s = np.where(active, scale, 1.0)

    def amounts(c: float, lam: float) -> np.ndarray:
        return np.where(active, np.clip((c - base) / s - lam / (2 * s * s), 0.0, cap), 0.0)

    def pour(c: float) -> np.ndarray:
        free = amounts(c, 0.0)
        poured = float(free.sum())
        if least <= poured <= total:
            return free
        target, lo, hi = (total, 0.0, 1.0) if poured > total else (least, -1.0, 0.0)
        while amounts(c, hi).sum() > target and hi < 1e300:
            hi *= 2
        while amounts(c, lo).sum() < target and lo > -1e300:
            lo *= 2
        for _ in range(200):
            mid = (lo + hi) / 2
            if mid in (lo, hi):
                break
            if amounts(c, mid).sum() > target:
                lo = mid
            else:
                hi = mid
        return amounts(c, (lo + hi) / 2)

    def cost(c: float) -> float:
        return float(np.sum((base + scale * pour(c) - c) ** 2))

    reach = np.abs(scale) * cap
    least_cost = _golden(cost, float((base - reach).min()), float((base + reach).max()))
    return math.sqrt(least_cost / len(base))


def lowest_whole_sd(base: np.ndarray, step: float, units: np.ndarray, total: int) -> float:
    """min sd(b + step·M) over whole M with 0 ≤ M_n ≤ units_n, Σ M_n = total: the amounts
    poured one unit at a time. The total is fixed, so the mean is, and the least Σ v² is
    reached greedily: each unit onto the node where it adds least to Σ v² (a separable
    convex sum, whole steps). Above `lowest_sd` where the values are counts (the loads)."""
    values = base.astype(float).copy()
    room = units.astype(int).copy()
    for _ in range(total):
        added = np.where(room > 0, 2 * step * values + step * step, np.inf)
        n = int(np.argmin(added))
        if not np.isfinite(added[n]):
            break
        values[n] += step
        room[n] -= 1
    return float(values.std()) if len(values) else 0.0


#: Intervals of the centre scanned by `few_box_sd`.
FEW_BOX_INTERVALS = 4000


def few_box_sd(low: np.ndarray, high: np.ndarray, most: int) -> float:
    """A lower bound of min sd(v) over v_n = low_n but for at most `most` nodes, each of which
    may take any value in [low_n, high_n]. For a centre c in an interval I, each node's
    (v_n − c)² is at least its distance to I squared, from low_n or from its box; the best
    `most` boxes are taken; the least over the intervals covering every centre is below the
    minimum (the selection makes the inner cost non-convex in c, so no golden section)."""
    if len(low) == 0:
        return 0.0
    if most <= 0:
        return float(low.std())
    edges = np.linspace(float(low.min()), float(high.max()), FEW_BOX_INTERVALS + 1)
    least = np.inf
    take = min(most, len(low))
    for chunk in np.array_split(np.arange(FEW_BOX_INTERVALS), 16):
        a, b = edges[chunk][:, None], edges[chunk + 1][:, None]
        stay = np.where(low < a, a - low, np.where(low > b, low - b, 0.0)) ** 2
        moved = np.where(high < a, a - high, np.where(low > b, low - b, 0.0)) ** 2
        gain = stay - moved
        best = -np.partition(-gain, take - 1, axis=1)[:, :take].sum(axis=1)
        least = min(least, float((stay.sum(axis=1) - best).min()))
    return math.sqrt(max(least, 0.0) / len(low))


def _golden(cost, a: float, b: float) -> float:  # noqa: ANN001
    """The least value of a convex function of one variable on [a, b], by golden section."""
    golden = (math.sqrt(5) - 1) / 2
    x1, x2 = b - golden * (b - a), a + golden * (b - a)
    f1, f2 = cost(x1), cost(x2)
    while b - a > 1e-13 * max(1.0, abs(a), abs(b)):
        if f1 <= f2:
            b, x2, f2 = x2, x1, f1
            x1 = b - golden * (b - a)
            f1 = cost(x1)
        else:
            a, x1, f1 = x1, x2, f2
            x2 = a + golden * (b - a)
            f2 = cost(x2)
    return min(f1, f2)


def box_sd(low: np.ndarray, high: np.ndarray) -> float:
    """min sd(v) over low ≤ v ≤ high: for a centre c the best v is c clamped into the box."""
    if len(low) == 0:
        return 0.0
    least = _golden(
        lambda c: float(np.sum((np.clip(c, low, high) - c) ** 2)),
        float(low.min()),
        float(high.max()),
    )
    return math.sqrt(least / len(low))


def rest_lower(problem: PlacementProblem) -> float:
    """A lower bound of the score apart from its spreads: the constant, each kind's least
    summed-metric change over its candidates (times its count), the N+1 reserves as they are
    now (a new secondary only raises them) and the least spread of the reserves, each between
    its value now and now plus every failover that may land on it, and on at most as many
    nodes as there are new secondaries."""
    weights = sum_weights()
    least: dict[tuple[str, str], float] = {}
    for role, table in (("p", problem.primary_sum), ("s", problem.secondary_sum)):
        for (j, _), delta in table.items():
            c = sum(w * d for w, d in zip(weights, delta, strict=True))
            least[j, role] = min(least.get((j, role), c), c)
    counts = {k.name: k.count for k in problem.batch.instances}
    now = problem.reserved_base
    rise: dict[str, float] = defaultdict(float)
    for i in problem.batch.instances:
        if i.forthcoming or i.failover_mib <= 0:
            continue
        for n in i.secondaries:
            if n in now:
                rise[n] += i.failover_mib * i.count / problem.total_memory_mib[n]
    nodes = list(now)
    low = np.array([now[n] for n in nodes])
    high = np.array([now[n] + rise[n] for n in nodes])
    # a node's reserve changes only where a new drbd instance puts its secondary
    secondaries = sum(
        i.count
        for i in problem.batch.instances
        if not i.forthcoming and i.failover_mib > 0 and any(n in now for n in i.secondaries)
    )
    reserve_spread = max(box_sd(low, high), few_box_sd(low, high, secondaries))
    return (
        problem.score_constant
        + WEIGHTS["reserved_mem_rtotal"] * math.fsum(now.values())
        + WEIGHTS["reserved_mem_cv"] * reserve_spread
        + math.fsum(counts[j] * c for (j, _), c in least.items())
    )


#: Frank-Wolfe steps of `joint_floors`: one per JOINT_PLACEMENTS_PER_STEP placements (blocks ×
#: nodes) with at least JOINT_MIN_STEPS, at most JOINT_STEPS and within JOINT_WORK (steps × runs
#: × blocks × metrics × nodes): 400 steps (0.45 s) on a 200-node evacuation of 40 instances,
#: 50 (0.03 s) on a small request that the model proves in a moment, fewer on very large
#: problems. The bound holds after any number of steps.
JOINT_STEPS = 400
JOINT_MIN_STEPS = 50
JOINT_PLACEMENTS_PER_STEP = 30
JOINT_WORK = 1.8e8


def _fractional_blocks(
    problem: PlacementProblem, groups: Sequence[tuple[int, ...]]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The batch as blocks of amounts to spread: one per (kind, role), its count over its
    candidates. Returns each block's change per unit (block × group × scored node), where it
    may go (block × node, a last column for the candidates outside the scored nodes, which
    change no spread), and its count."""
    index = {n: i for i, n in enumerate(problem.scored)}
    size = len(index)
    counts = {i.name: i.count for i in problem.batch.instances}
    leaders = [g[0] for g in groups]
    blocks: dict[tuple[str, str], int] = {}
    entries: list[tuple[int, int, tuple[float, ...]]] = []
    for role, table in (("p", problem.primary_sd), ("s", problem.secondary_sd)):
        for (j, n), delta in table.items():
            b = blocks.setdefault((j, role), len(blocks))
            entries.append((b, index.get(n, size), tuple(delta[k] for k in leaders)))
    change = np.zeros((len(blocks), len(groups), size))
    allowed = np.zeros((len(blocks), size + 1), dtype=bool)
    for b, col, delta in entries:
        allowed[b, col] = True
        if col < size:
            change[b, :, col] = delta
    count = np.array([float(counts[j]) for j, _ in blocks])
    return change, allowed, count


def joint_floors(
    problem: PlacementProblem, groups: Sequence[tuple[int, ...]], weights: Sequence[float]
) -> list[float]:
    """For each metric group g, a lower bound of Σ_{h≠g} w_h·sd_h over the plans placing the
    whole batch: the least of the continuous relaxation (each kind's count spread over its
    candidates in fractions, capacities dropped) of those spreads together. The sum is convex,
    so at any point x its linearisation minimised over the relaxation, f(x) + ∇f(x)·(s − x)
    with s each block on its cheapest candidate, is below the least (Frank-Wolfe's bound;
    steps along s − x raise it). Together the spreads pull apart (a node with free memory may
    have busy disks) and their least is above the sum of each one's own: 0.019-0.028 in score
    on the 200-node evacuations of benchmarks/bench_joint.py (docs/placement.md)."""
    w = np.asarray(weights, dtype=float)
    runs = np.repeat(w[None, :], len(groups), axis=0)
    np.fill_diagonal(runs, 0.0)
    nodes = list(problem.scored)
    if not nodes or not groups:
        return [0.0] * len(groups)
    base = np.array([[problem.base_sd[n][g[0]] for n in nodes] for g in groups])
    change, allowed, count = _fractional_blocks(problem, groups)
    if len(count) == 0:
        return [float(r @ base.std(axis=1)) for r in runs]
    size = len(nodes)
    x = np.where(allowed, 1.0, 0.0)
    x = np.repeat((x * (count / x.sum(axis=1))[:, None])[None], len(runs), axis=0)
    work = len(runs) * change.size
    wanted = max(JOINT_MIN_STEPS, len(count) * size // JOINT_PLACEMENTS_PER_STEP)
    steps = max(1, min(JOINT_STEPS, wanted, int(JOINT_WORK / max(work, 1))))
    best = np.full(len(runs), -np.inf)
    picks = np.arange(len(count))[None, :]
    rows = np.arange(len(runs))[:, None]
    values = base[None] + np.einsum("bgn,rbn->rgn", change, x[:, :, :size])
    for _ in range(steps):
        dev = values - values.mean(axis=2, keepdims=True)
        sd = np.sqrt((dev * dev).mean(axis=2))
        slope = np.where(sd > 0, runs / (size * np.where(sd > 0, sd, 1.0)), 0.0)  # ∂f/∂v / dev
        grad = np.zeros_like(x)
        grad[:, :, :size] = np.einsum("rgn,bgn->rbn", slope[:, :, None] * dev, change)
        cheapest = np.where(allowed[None], grad, np.inf).argmin(axis=2)  # run × block
        least = grad[rows, picks, cheapest]
        # bound: f(x) − ∇f(x)·(x − s), s every block on its cheapest candidate
        drop = (grad * x).sum(axis=(1, 2)) - (least * count).sum(axis=1)
        value = (runs * sd).sum(axis=1)
        best = np.maximum(best, value - drop)
        if np.all(drop <= 1e-12 * np.maximum(1.0, np.abs(value))):
            break
        direction = -x
        direction[rows, picks, cheapest] += count[None, :]
        delta = np.einsum("bgn,rbn->rgn", change, direction[:, :, :size])
        gamma = _step(runs, dev, delta)[:, None, None]
        x += gamma * direction
        values += gamma * delta
    return [max(float(b) * (1 - SLACK) - SLACK, 0.0) for b in best]


def _step(runs: np.ndarray, dev: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """The step γ in [0, 1] along each run's direction that minimises Σ_g w_g·sd_g (convex in
    γ: sd_g² is a quadratic a + 2bγ + cγ²), by bisection on the derivative's sign."""
    moved = delta - delta.mean(axis=2, keepdims=True)
    a = (dev * dev).sum(axis=2)
    b = (dev * moved).sum(axis=2)
    c = (moved * moved).sum(axis=2)

    def slope(gamma: np.ndarray) -> np.ndarray:
        g = gamma[:, None]
        root = np.sqrt(np.maximum(a + 2 * b * g + c * g * g, 0.0))
        return (runs * np.where(root > 0, (b + c * g) / np.where(root > 0, root, 1.0), 0.0)).sum(
            axis=1
        )

    lo, hi = np.zeros(len(runs)), np.ones(len(runs))
    full = slope(hi) <= 0
    for _ in range(24):
        mid = (lo + hi) / 2
        down = slope(mid) < 0
        lo, hi = np.where(down, mid, lo), np.where(down, hi, mid)
    return np.where(full, 1.0, (lo + hi) / 2)


def least_spread(problem: PlacementProblem, k: int) -> float | None:
    """σ_lo of metric k (None when its changes are not amount × scale)."""
    split = _separable(problem, k)
    if split is None:
        return None
    amount, scale = split
    counts = {i.name: i.count for i in problem.batch.instances}
    cap: dict[str, float] = defaultdict(float)
    for role, table in (("p", problem.primary_sd), ("s", problem.secondary_sd)):
        for j, n in table:
            cap[n] += amount.get((j, role), 0.0) * counts[j]
    nodes = list(problem.scored)
    total = math.fsum(a * counts[j] for (j, _), a in amount.items())
    base = np.array([problem.base_sd[n][k] for n in nodes])
    scales = np.array([scale.get(n, 0.0) for n in nodes])
    caps = np.array([cap.get(n, 0.0) for n in nodes])
    low = lowest_sd(base, scales, caps, total)
    # whole units: every active node scaled alike, every amount a multiple of one unit, and no
    # node that takes amounts without changing (the total, hence the mean, is then fixed)
    active = {s for n, s in scale.items() if cap.get(n, 0.0) > 0}
    unit = _lattice([a for a in amount.values() if a]) if amount else None
    if unit is not None and len(active) == 1 and 0.0 not in active:
        (common,) = active
        units = np.round(caps / unit)
        whole = int(round(total / unit))
        if np.allclose(units * unit, caps) and abs(whole * unit - total) <= 1e-9 * max(total, 1):
            low = max(low, lowest_whole_sd(base, common * unit, units, whole))
    return low


def spread_bounds(problem: PlacementProblem, plan: Placements, cutoff: float) -> list[SpreadBound]:
    """The bounds of every metric whose least spread is known, centred at `plan` (which places
    every instance), for plans scoring at most `cutoff` (the known plan's score)."""
    values = values_at(problem, plan)
    changes = _changes(problem)
    counts = {i.name: i.count for i in problem.batch.instances}
    weights = sd_weights()
    groups = twin_groups(problem)
    lows = {g: least_spread(problem, g[0]) for g in groups}
    group_weight = [sum(weights[i] for i in g) for g in groups]
    apart = math.fsum(w * (lows[g] or 0.0) for g, w in zip(groups, group_weight, strict=True))
    together = joint_floors(problem, groups, group_weight)
    rest = rest_lower(problem)
    # everything but g's spread: the others' own leasts summed, or their joint least
    others = {
        g: max(apart - w * (lows[g] or 0.0), joint)
        for g, w, joint in zip(groups, group_weight, together, strict=True)
    }
    nodes = problem.scored
    size = len(nodes)
    out = []
    for g, low in lows.items():
        weight = sum(weights[i] for i in g)
        if low is None or weight <= 0:
            continue
        k = g[0]
        high = (cutoff - rest - others[g]) / weight
        low_s = max(low * (1 - SLACK) - SLACK, 0.0)
        high_s = max(high * (1 + SLACK) + SLACK, low_s)
        centre = math.fsum(values[n][k] for n in nodes) / size
        moved: dict[str, NodeSpread] = {}
        fixed = 0.0
        for n in nodes:
            base = problem.base_sd[n][k]
            terms = changes.get((k, n), [])
            if not terms:
                fixed += (base - centre) ** 2
                continue
            moved[n] = _node_rows(base, terms, counts, values[n][k] - base)
        total_lo = total_hi = math.fsum(problem.base_sd[n][k] for n in nodes)  # Σ_n v_n
        reach: dict[tuple[str, str], list[float]] = defaultdict(list)
        for role, table in (("p", problem.primary_sd), ("s", problem.secondary_sd)):
            for (j, _), delta in table.items():
                reach[j, role].append(delta[k])
        for (j, _), ds in reach.items():
            total_lo += counts[j] * min(ds)
            total_hi += counts[j] * max(ds)
        mean_range = (total_lo / size - centre, total_hi / size - centre)
        out.append(SpreadBound(k, g, centre, fixed, moved, mean_range, (low_s, high_s)))
    return out
