"""The cluster score bit for bit as htools computes it (Cluster/Metrics.hs, Statistics.hs).

`model.score` gives the 20 metrics and their values (equal to hinfo); hail's *choices*
depend on the last bits of the score, because near-ties are common and resolved by order
(docs/hail.md, "Scores and ties"). This module reproduces the exact floating-point
operations:

* `node_row`: a node's 20 components (compDetailedCVNode), from `model.score.METRICS`;
* `Stats` / `list_stats`: the statistics of a node list, sums and variances folded left to
  right, the variance in two passes (getStdDevStatistics);
* `update_stats`: hail's incremental replacement of one node's contribution
  (updateStatistics: the running variance update of pair allocation);
* `score_of`: the weighted sum, folded left to right (compCVfromStats / compCVNodes);
* `ListScores`: the two-pass score of one node list with a few nodes replaced, for many
  candidates: an O(1) estimate with an error bound for every candidate, and the exact two-pass
  value only for those whose bound touches the best one. `ranked` yields candidates in hail's
  exact order (score ascending, equal scores: the later candidate first), lazily.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from model.resources import NodeState, safe_div
from model.score import METRICS

WEIGHTS: tuple[float, ...] = tuple(m.weight for m in METRICS)
N_METRICS = len(METRICS)
#: index of location_exclusion_score, the one pooled (map) statistic
MAP_INDEX = next(i for i, m in enumerate(METRICS) if m.aggregation == "pooled")
#: numeric components (all but the map), in METRICS order
NUMERIC = tuple(i for i in range(N_METRICS) if i != MAP_INDEX)
SD = tuple(i for i, m in enumerate(METRICS) if m.aggregation == "sd")
SUM = tuple(i for i, m in enumerate(METRICS) if m.aggregation == "sum")
ONLINE = tuple(m.online for m in METRICS)
_VALUE = tuple(m.value for m in METRICS)

EPS = 2.0**-52

#: A node's components: 19 floats and, at MAP_INDEX, its (location, exclusion tag) counts.
Row = tuple


def node_row(st: NodeState) -> Row:
    """compDetailedCVNode: the node's contribution to each metric, as doubles."""
    out: list = []
    for i, value in enumerate(_VALUE):
        if i == MAP_INDEX:
            out.append(st.location_exclusion_counts)
        else:
            out.append(float(value(st)))  # type: ignore[misc]
    return tuple(out)


# --- statistics of a list (Utils/Statistics.hs) ---------------------------------------------


@dataclass(frozen=True, slots=True)
class Stats:
    """One list's statistics: per metric (count, sum, variance) for std-devs, the sum for
    sums, the pooled counts for the map statistic; `empty` when no node is online."""

    values: tuple
    empty: bool = False


def _pool(maps: Sequence[Sequence[tuple[tuple[str, str], int]]]) -> dict:
    pooled: dict = {}
    for m in maps:
        for key, count in m:
            pooled[key] = pooled.get(key, 0) + count
    return pooled


def list_stats(rows: Sequence[Row], online: Sequence[bool]) -> Stats:
    """compClusterStatistics: online metrics over the online rows, offline over the others."""
    on = [r for r, o in zip(rows, online, strict=True) if o]
    off = [r for r, o in zip(rows, online, strict=True) if not o]
    if not on:
        return Stats((), empty=True)
    values: list = []
    for k in range(N_METRICS):
        xs = on if ONLINE[k] else off
        if k == MAP_INDEX:
            values.append(_pool([r[k] for r in xs]))
            continue
        if METRICS[k].aggregation == "sum":
            s = 0.0
            for r in xs:
                s += r[k]
            values.append(s)
            continue
        n = 0.0
        s = 0.0
        for r in xs:
            n += 1.0
            s += r[k]
        mean = s / n if n else math.nan
        v = 0.0
        for r in xs:
            d = r[k] - mean
            v += d * d
        values.append((n, s, v / n if n else math.nan))
    return Stats(tuple(values))


def _hmax0(x: float) -> float:
    """Haskell's `max 0 x` for Double (`if 0 <= x then x else 0`: NaN gives 0)."""
    return x if 0.0 <= x else 0.0


def update_stats(stats: Stats, old: Row, new: Row, online: bool) -> Stats:
    """updateClusterStatistics: replace one node's contribution (old row by new row)."""
    if stats.empty:
        return stats
    out = list(stats.values)
    for k in range(N_METRICS):
        if ONLINE[k] != online:
            continue
        x, y = old[k], new[k]
        if k == MAP_INDEX:
            if x == y:
                continue
            m = dict(out[k])
            for key, c in x:
                m[key] = m.get(key, 0) - c
            for key, c in y:
                m[key] = m.get(key, 0) + c
            out[k] = m
        elif METRICS[k].aggregation == "sum":
            out[k] = out[k] + (y - x)
        else:
            n, s, var = out[k]
            ds = y - x
            dss = y * y - x * x
            dnnvar = (n * dss - 2 * s * ds) - ds * ds
            out[k] = (n, s + ds, _hmax0(var + dnnvar / (n * n)))
    return Stats(tuple(out))


def pair_scores(
    stats: Stats,
    old: np.ndarray,
    new: np.ndarray,
    online: np.ndarray | None = None,
) -> np.ndarray:
    """`score_of(update_stats(stats, old_s, new_s, online_s))` for many secondaries at once
    (rows of numeric components, `NUMERIC` order): the same IEEE operations per element, so
    each value is bit for bit the scalar one. The map statistic is unchanged (adding a
    secondary does not change a node's exclusion-tag counts); a metric no secondary changes
    keeps its value (the update of an unchanged value gives it back exactly)."""
    if stats.empty:
        return np.zeros(len(old))
    if online is None:
        online = np.ones(len(old), dtype=bool)
    differs = (old != new) | ~np.isfinite(old) | ~np.isfinite(new)  # inf - inf is NaN
    moving = {NUMERIC[j] for j in np.flatnonzero(np.any(differs, axis=0)).tolist()}
    total = 0.0
    with np.errstate(all="ignore"):
        for k in range(N_METRICS):
            value = stats.values[k]
            if k == MAP_INDEX or k not in moving:
                total = total + WEIGHTS[k] * stat_value(k, value)
                continue
            x = old[:, _COLUMN[k]]
            y = new[:, _COLUMN[k]]
            touched = online if ONLINE[k] else ~online
            if METRICS[k].aggregation == "sum":
                v = np.where(touched, value + (y - x), value)
            else:
                n, sm, var = value
                ds = y - x
                dss = y * y - x * x
                dnnvar = (n * dss - 2 * sm * ds) - ds * ds
                var2 = var + dnnvar / (n * n)
                updated = np.sqrt(np.where(0.0 <= var2, var2, 0.0))
                v = np.where(touched, updated, stat_value(k, value))
            total = total + WEIGHTS[k] * v
    return np.broadcast_to(total, (len(old),)).astype(float)


def stat_value(k: int, value) -> float:
    """getStatisticValue."""
    if k == MAP_INDEX:
        return float(sum(value.values()) - len(value))
    if METRICS[k].aggregation == "sum":
        return value
    return math.sqrt(value[2]) if not math.isnan(value[2]) else math.nan


def score_of(stats: Stats) -> float:
    """compCVfromStats: Σ weight × value, folded left to right from 0."""
    if stats.empty:
        return 0.0
    total = 0.0
    for k in range(N_METRICS):
        total += WEIGHTS[k] * stat_value(k, stats.values[k])
    return total


def list_score(states: Sequence[NodeState]) -> float:
    """compCVNodes: the score of a node list, computed from scratch."""
    rows = [node_row(s) for s in states]
    return score_of(list_stats(rows, [not s.offline for s in states]))


# --- many candidates on one list ---------------------------------------------------------------


def _sqrt(a: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return np.sqrt(a)


_NUMERIC_ONLINE = np.array([ONLINE[k] for k in NUMERIC], dtype=bool)
_NUMERIC_SD = np.array([METRICS[k].aggregation == "sd" for k in NUMERIC], dtype=bool)
_NUMERIC_WEIGHTS = np.array([WEIGHTS[k] for k in NUMERIC])
_COLUMN = {k: j for j, k in enumerate(NUMERIC)}


@dataclass(frozen=True)
class Change:
    """A candidate: some positions of the list replaced by new rows."""

    positions: tuple[int, ...]
    rows: tuple[Row, ...]
    vectors: tuple[np.ndarray, ...] = ()  # the rows' numeric parts (filled by RowCache)

    def numeric(self) -> tuple[np.ndarray, ...]:
        if self.vectors:
            return self.vectors
        return tuple(np.array([r[k] for k in NUMERIC], dtype=float) for r in self.rows)


class ListScores:
    """The two-pass score (compCVNodes) of one node list with a few rows replaced, for many
    candidates, exactly as hail recomputes it for each.

    Exact two-pass values cost O(list length) per candidate; hail's choices need them only
    where candidates are within rounding of each other. `estimate` gives every candidate an
    O(1) value (the replacement applied to the exact two-pass sums of the base list) and a
    bound on its distance from the exact value; `ranked` computes exact values only for
    candidates whose interval touches the best remaining one.
    """

    def __init__(
        self,
        rows: Sequence[Row],
        online: Sequence[bool],
        matrix: np.ndarray | None = None,
    ):
        self.rows = list(rows)
        self.online = np.array(online, dtype=bool)
        self.n = len(self.rows)
        if matrix is None:
            matrix = np.array([[r[k] for k in NUMERIC] for r in self.rows], dtype=float)
        self.matrix = matrix.reshape(self.n, len(NUMERIC))
        self.maps = [r[MAP_INDEX] for r in self.rows]
        n_on = int(self.online.sum())
        self.empty = n_on == 0
        self.count = np.where(_NUMERIC_ONLINE, float(n_on), float(self.n - n_on))
        on = self.matrix[self.online]
        off = self.matrix[~self.online]
        # two passes, folded left to right (cumsum is sequential), as getStdDevStatistics
        with np.errstate(all="ignore"):
            sums_on = np.cumsum(on, axis=0)[-1] if n_on else np.zeros(len(NUMERIC))
            sums_off = np.cumsum(off, axis=0)[-1] if len(off) else np.zeros(len(NUMERIC))
        with np.errstate(all="ignore"):
            mean = sums_on / float(n_on) if n_on else np.zeros(len(NUMERIC))
            dev = on - mean
            m2 = np.cumsum(dev * dev, axis=0)[-1] if n_on else np.zeros(len(NUMERIC))
            self.var = m2 / float(n_on) if n_on else np.zeros(len(NUMERIC))
        self.sums = np.where(_NUMERIC_ONLINE, sums_on, sums_off)
        self.mean = mean
        self.values = np.where(_NUMERIC_SD, _sqrt(self.var), self.sums)
        self.pooled = _pool([m for m, o in zip(self.maps, self.online, strict=True) if o])
        self.map_value = float(sum(self.pooled.values()) - len(self.pooled))
        with np.errstate(all="ignore"):
            col2 = np.where(self.online[:, None] == _NUMERIC_ONLINE[None, :], self.matrix**2, 0.0)
        self.scale2 = col2.max(axis=0) if self.n else np.zeros(len(NUMERIC))
        self.score = 0.0 if self.empty else self._total(self.values, self.map_value)

    @staticmethod
    def _total(values: np.ndarray, map_value):
        """Σ weight × value folded left to right, the map statistic in its place."""
        total = 0.0 if np.ndim(values) == 1 else np.zeros(values.shape[0])
        for k in range(N_METRICS):
            v = map_value if k == MAP_INDEX else values[..., _COLUMN[k]]
            total = total + WEIGHTS[k] * v
        return total

    def _map_values(self, changes: Sequence[Change]) -> np.ndarray:
        out = np.full(len(changes), self.map_value)
        if not self.pooled and not any(r[MAP_INDEX] for ch in changes for r in ch.rows):
            return out
        for i, ch in enumerate(changes):
            pooled = None
            for p, r in zip(ch.positions, ch.rows, strict=True):
                if self.online[p] and r[MAP_INDEX] != self.maps[p]:
                    pooled = dict(self.pooled) if pooled is None else pooled
                    for key, cnt in self.maps[p]:
                        pooled[key] -= cnt
                    for key, cnt in r[MAP_INDEX]:
                        pooled[key] = pooled.get(key, 0) + cnt
            if pooled is not None:
                pooled = {key: v for key, v in pooled.items() if v}
                out[i] = float(sum(pooled.values()) - len(pooled))
        return out

    # -- exact -------------------------------------------------------------------------

    def exact(self, changes: Sequence[Change]) -> np.ndarray:
        """The two-pass score of the list with each candidate's rows in place."""
        out = np.zeros(len(changes))
        if self.empty or not len(changes):
            return out
        chunk = max(1, 2_000_000 // max(1, self.n))
        with np.errstate(all="ignore"):  # IEEE results, as Haskell's (NaN, ±Inf)
            for start in range(0, len(changes), chunk):
                out[start : start + chunk] = self._exact_chunk(changes[start : start + chunk])
        return out

    def _exact_chunk(self, changes: Sequence[Change]) -> np.ndarray:
        c = len(changes)
        values = np.tile(self.values, (c, 1))
        numeric = [ch.numeric() for ch in changes]
        for j, k in enumerate(NUMERIC):
            mask = self.online == ONLINE[k]
            base_col = self.matrix[:, j]
            changed = [
                i
                for i, ch in enumerate(changes)
                if any(
                    mask[p] and not _same(v[j], base_col[p])
                    for p, v in zip(ch.positions, numeric[i], strict=True)
                )
            ]
            if not changed:
                continue
            sel = np.flatnonzero(mask)
            where = np.full(self.n, -1)
            where[sel] = np.arange(len(sel))
            x = np.tile(base_col[sel], (len(changed), 1))
            for row_i, i in enumerate(changed):
                for p, v in zip(changes[i].positions, numeric[i], strict=True):
                    if mask[p]:
                        x[row_i, where[p]] = v[j]
            s = np.cumsum(x, axis=1)[:, -1]
            if not _NUMERIC_SD[j]:
                values[changed, j] = s
                continue
            n = float(x.shape[1])
            d = x - (s / n)[:, None]
            values[changed, j] = _sqrt(np.cumsum(d * d, axis=1)[:, -1] / n)
        return self._total(values, self._map_values(changes))

    # -- estimate ----------------------------------------------------------------------

    def estimate(self, changes: Sequence[Change]) -> tuple[np.ndarray, np.ndarray]:
        """(estimate, bound) per candidate: |exact two-pass score − estimate| ≤ bound."""
        c = len(changes)
        if self.empty or not c:
            return np.zeros(c), np.zeros(c)
        width = max(len(ch.positions) for ch in changes)
        k = len(NUMERIC)
        pos = np.zeros((c, width), dtype=np.int64)
        used = np.zeros((c, width), dtype=bool)
        new = np.zeros((c, width, k))
        for i, ch in enumerate(changes):
            vs = ch.numeric()
            for w, p in enumerate(ch.positions):
                pos[i, w] = p
                used[i, w] = True
                new[i, w] = vs[w]
        rel = used[:, :, None] & (self.online[pos][:, :, None] == _NUMERIC_ONLINE[None, None, :])
        old = np.where(rel, self.matrix[pos], 0.0)
        new = np.where(rel, new, 0.0)
        n = self.count
        with np.errstate(all="ignore"):
            mean = np.tile(self.mean, (c, 1))
            m2 = np.tile(self.var * n, (c, 1))
            for w in range(width):
                b, a = new[:, w], old[:, w]
                mean_new = mean + (b - a) / n
                m2 = m2 + (b - a) * (b + a - mean - mean_new)
                mean = mean_new
            var = np.maximum(m2 / n, 0.0)
            sums = self.sums + (new - old).sum(axis=1)
            scale2 = np.maximum(self.scale2, (new * new).max(axis=1))
            err = 64.0 * (n + 4) * EPS * (scale2 + 1e-300)
            sd = _sqrt(var)
            sd_bound = np.maximum(_sqrt(var + err) - sd, sd - _sqrt(np.maximum(var - err, 0.0)))
            sum_bound = 2.0 * (n + 4) ** 2 * EPS * (_sqrt(scale2) + 1.0)
            values = np.where(_NUMERIC_SD, sd, sums)
            bounds = np.where(_NUMERIC_SD, sd_bound, sum_bound)
            total = self._total(values, self._map_values(changes))
            bound = bounds @ _NUMERIC_WEIGHTS + 64 * EPS * (np.abs(total) + 1.0)
        return total, bound

    # -- hail's order --------------------------------------------------------------------

    def ranked(
        self,
        changes: Sequence[Change],
        estimated: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> Iterator[tuple[int, float]]:
        """(candidate index, exact score) in hail's sorted order: score ascending, equal
        scores with the later candidate first (a stable sort of the reversed list)."""
        c = len(changes)
        if not c:
            return
        est, bound = estimated if estimated is not None else self.estimate(changes)
        if not np.all(np.isfinite(est)) or not np.all(np.isfinite(bound)):
            exact = self.exact(changes)
            yield from haskell_sorted(exact)
            return
        lo = est - bound
        hi = est + bound
        known = np.zeros(c, dtype=bool)
        exact_of = np.zeros(c)
        remaining = np.ones(c, dtype=bool)
        while remaining.any():
            top = float(np.min(np.where(remaining, hi, np.inf)))
            todo = remaining & ~known & (lo <= top)
            if todo.any():
                idx = np.flatnonzero(todo)
                exact_of[idx] = self.exact([changes[i] for i in idx])
                known[idx] = True
                lo[idx] = hi[idx] = exact_of[idx]
                continue
            cands = np.flatnonzero(remaining & known & (lo <= top))
            best = max(cands, key=lambda i: (-exact_of[i], i))
            remaining[best] = False
            yield int(best), float(exact_of[best])

    def best(self, changes: Sequence[Change], *, need_score: bool = True) -> tuple[int, float]:
        """(index, score) of the candidate hail's fold keeps: the least score, the later
        candidate on equal scores (`if old < new then old else new`). Without `need_score`
        a candidate that is best by the bounds alone is returned with its estimate."""
        est, bound = self.estimate(changes)
        if np.all(np.isfinite(est)) and np.all(np.isfinite(bound)):
            if not need_score and len(changes) > 1:
                i = int(np.argmin(est))
                others = np.delete(est - bound, i)
                if float(est[i] + bound[i]) < float(others.min()):
                    return i, float(est[i])
            return next(self.ranked(changes, (est, bound)))
        exact = self.exact(changes)
        best = 0
        for i in range(1, len(changes)):
            if not exact[best] < exact[i]:
                best = i
        return best, float(exact[best])


def _same(a: float, b: float) -> bool:
    return a == b or (a != a and b != b)


def haskell_sorted(scores: np.ndarray) -> Iterator[tuple[int, float]]:
    """Hail's sortBy (comparing score) of the reversed candidate list, for any doubles:
    GHC compares doubles with `<` and `==`, a NaN is greater than everything."""

    def cmp(a: int, b: int) -> int:
        x, y = scores[a], scores[b]
        if x < y:
            return -1
        if x == y:
            return 0
        return 1

    rev = list(range(len(scores)))[::-1]
    for i in _ghc_sort_by(cmp, rev):
        yield i, float(scores[i])


def _ghc_sort_by(cmp, xs: list) -> list:
    """GHC's Data.List.sortBy (a merge sort of ascending/descending runs), so that even an
    inconsistent comparison (NaN) gives hail's order."""

    def sequences(a: list) -> list[list]:
        out: list[list] = []
        i = 0
        while i < len(a):
            if i + 1 == len(a):
                out.append([a[i]])
                break
            x, y = a[i], a[i + 1]
            if cmp(x, y) > 0:  # descending run
                run = [y, x]
                j = i + 2
                while j < len(a) and cmp(run[0], a[j]) > 0:
                    run.insert(0, a[j])
                    j += 1
                out.append(run)
            else:
                run = [x, y]
                j = i + 2
                while j < len(a) and cmp(run[-1], a[j]) <= 0:
                    run.append(a[j])
                    j += 1
                out.append(run)
            i = j
        return out

    def merge(a: list, b: list) -> list:
        out: list = []
        i = j = 0
        while i < len(a) and j < len(b):
            if cmp(a[i], b[j]) > 0:
                out.append(b[j])
                j += 1
            else:
                out.append(a[i])
                i += 1
        return out + a[i:] + b[j:]

    runs = sequences(xs)
    if not runs:
        return []
    while len(runs) > 1:
        nxt = [merge(runs[i], runs[i + 1]) for i in range(0, len(runs) - 1, 2)]
        if len(runs) % 2:
            nxt.append(runs[-1])
        runs = nxt
    return runs[0]


class RowCache:
    """Node components by node state (states are immutable, so identity is enough)."""

    def __init__(self) -> None:
        self._rows: dict[int, tuple[NodeState, tuple, np.ndarray]] = {}

    def _get(self, st: NodeState) -> tuple[NodeState, tuple, np.ndarray]:
        hit = self._rows.get(id(st))
        if hit is not None and hit[0] is st:
            return hit
        r = node_row(st)
        entry = (st, r, np.array([r[k] for k in NUMERIC], dtype=float))
        self._rows[id(st)] = entry
        return entry

    def row(self, st: NodeState) -> tuple:
        return self._get(st)[1]

    def size(self) -> int:
        """How many node states are cached (a long run drops the cache when it grows)."""
        return len(self._rows)

    def change(self, positions: Sequence[int], states: Sequence[NodeState]) -> Change:
        entries = [self._get(s) for s in states]
        return Change(tuple(positions), tuple(e[1] for e in entries), tuple(e[2] for e in entries))

    def scores(self, nodes: Mapping[str, NodeState], names: Sequence[str]) -> ListScores:
        entries = [self._get(nodes[n]) for n in names]
        matrix = np.array([e[2] for e in entries]) if entries else np.zeros((0, len(NUMERIC)))
        return ListScores([e[1] for e in entries], [not e[0].offline for e in entries], matrix)


__all__ = [
    "Change",
    "RowCache",
    "haskell_sorted",
    "pair_scores",
    "ListScores",
    "Stats",
    "list_score",
    "list_stats",
    "node_row",
    "safe_div",
    "score_of",
    "update_stats",
]
