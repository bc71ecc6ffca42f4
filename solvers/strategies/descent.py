"""A known plan made better by moving single instances (docs/placement.md, "Better plans
by single moves").

Why: the joint model's first incumbent is its start, and the spread bound's σ_hi is what a
plan no worse than the start leaves each metric (model/spread.py): a lower start is a tighter
root bound. And on large groups the model's proof needs more than a request's seconds, while
hail's one-by-one plan, which the answer falls back to, was not a local optimum on any of the
evacuations measured (benchmarks/bench_joint.py's, tests/test_descent.py's): moving one
instance (its primary or its drbd secondary) to another node, or swapping a drbd pair's roles,
lowered the score, and an iterated search (two instances moved at random, then single moves
again) lowered it further.

Moves are ranked by the score they would give, computed from the problem's tables: the SD and
summed metrics are affine in the placements (a move changes two nodes' values, so every
target's spreads come from running sums), and the N+1 reserve (the most failover memory one
primary node sends a secondary) and the exclusion-tag counts are recomputed on the nodes a
move touches, for the best moves by the other terms. A plan is kept only when the checker's
verdict on it is valid and its true score lower, so every plan returned is one the checker
passed.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from model.placement import TAGS, PlacementProblem, sd_weights, sum_weights
from model.score import WEIGHTS

RESERVED_WEIGHT = WEIGHTS["reserved_mem_cv"]
RESERVED_TOTAL_WEIGHT = WEIGHTS["reserved_mem_rtotal"]
TAGS_WEIGHT = WEIGHTS[TAGS]
LOCATION_WEIGHT = WEIGHTS["location_exclusion_score"]
LOCATION_SCORE_WEIGHT = WEIGHTS["location_score"]

Plan = dict[str, tuple[str, str | None]]  # instance -> (primary, secondary)
Verdict = Callable[[Plan], tuple[float | None, list[str]]]
Pair = tuple[str, str | None]
Array = np.ndarray

#: Moves offered to the checker per step of the checked descent, best ranked first: a step
#: whose best moves all fail (a full node, a rule the ranking does not see) ends it.
TRIES_PER_STEP = 6
#: Moves per step whose reserve and tag terms are computed, the best by the other terms (at
#: most TARGETS_RANKED per instance and role).
RESERVE_RANKED = 60
TARGETS_RANKED = 8
#: Instances moved at random between descents of the iterated search (2 of 40 on a 200-node
#: evacuation lowered the score most in 12 s, against 3 and 5).
PERTURBED = 2
#: Least rank gain worth taking (the score is a sum of about 20 terms near 10-40).
MIN_GAIN = 1e-9


@dataclass(frozen=True)
class Improved:
    plan: Plan
    score: float
    moves: int  # single moves kept, each checked
    restarts: int  # descents of the iterated search
    better: int  # of them, plans the checker passed lower
    verdicts: int  # plans the checker judged
    seconds: float


@dataclass(frozen=True)
class _Move:
    gain: float  # the ranked score after, minus now (< 0: better)
    name: str
    pair: Pair


class _Spreads:
    """The SD metrics at the current plan as running sums per metric, and the summed metrics'
    weighted total: the rank of every plan one move away."""

    def __init__(self, problem: PlacementProblem) -> None:
        self.row = {n: i for i, n in enumerate(problem.scored)}
        self.size = len(problem.scored)
        self.weights = np.array(sd_weights())
        sums = np.array(sum_weights())
        self.values = np.array([problem.base_sd[n] for n in problem.scored], dtype=float)
        self.linear = 0.0
        # (kind, role) -> targets, target -> index, SD changes, weighted summed changes
        self.tables: dict[tuple[str, str], tuple[list[str], dict[str, int], Array, Array]] = {}
        # (kind, role) -> the targets' rows among the scored nodes, and which are scored
        self.rows: dict[tuple[str, str], tuple[Array, Array]] = {}
        for role, sd_table, sum_table in (
            ("p", problem.primary_sd, problem.primary_sum),
            ("s", problem.secondary_sd, problem.secondary_sum),
        ):
            entries: dict[str, list] = defaultdict(list)
            for (kind, node), delta in sd_table.items():
                entries[kind].append((node, delta, float(sums @ np.array(sum_table[kind, node]))))
            for kind, targets in entries.items():
                names = [node for node, _, _ in targets]
                self.tables[kind, role] = (
                    names,
                    {node: i for i, node in enumerate(names)},
                    np.array([delta for _, delta, _ in targets], dtype=float),
                    np.array([s for _, _, s in targets], dtype=float),
                )
                self.rows[kind, role] = (
                    np.array([self.row.get(n, 0) for n in names]),
                    np.array([n in self.row for n in names])[:, None],
                )

    def has(self, kind: str, role: str, node: str) -> bool:
        return (kind, role) in self.tables and node in self.tables[kind, role][1]

    def apply(self, kind: str, role: str, node: str, sign: int) -> None:
        names, index, sd, lin = self.tables[kind, role]
        i = index[node]
        self.linear += sign * float(lin[i])
        if node in self.row:
            self.values[self.row[node]] += sign * sd[i]

    def rank(self, s1: Array, s2: Array, linear: Array | float) -> Array:
        """Σ_k w_k·sd_k + the summed metrics, from Σ v and Σ v² per metric (rows: plans)."""
        var = np.maximum(s2 / self.size - (s1 / self.size) ** 2, 0.0)
        return np.sqrt(var) @ self.weights + linear

    def totals(self) -> tuple[Array, Array, float]:
        """Σ v and Σ v² per metric at the current plan, and its rank."""
        v = self.values
        s1, s2 = v.sum(axis=0), (v * v).sum(axis=0)
        return s1, s2, float(self.rank(s1, s2, self.linear))

    def now(self) -> float:
        return self.totals()[2]

    def gains(
        self, kind: str, role: str, at: str, totals: tuple[Array, Array, float]
    ) -> tuple[list[str], Array]:
        """Every target of this kind's `role` placement now on `at`, and the rank change of
        moving it there (its own node and nodes outside the score change nothing), from the
        current plan's `totals`."""
        names, index, sd, lin = self.tables[kind, role]
        v = self.values
        s1, s2, now = totals
        i = index[at]
        if at in self.row:  # off its node
            before = v[self.row[at]]
            s2 = s2 - before * before + (before - sd[i]) ** 2
            s1 = s1 - sd[i]
        rows, scored = self.rows[kind, role]
        there = np.where(scored, v[rows], 0.0)
        added = np.where(scored, sd, 0.0)
        ranks = self.rank(
            s1 + added, s2 + (there + added) ** 2 - there**2, self.linear - lin[i] + lin
        )
        return names, ranks - now


class _Reserves:
    """Every scored node's N+1 reserve share p_rem = r / t_mem at the current plan, exact:
    r is the most failover memory any one primary node sends the node (htools' rMem), now or
    with the new drbd instances it is secondary of. The score holds p_rem in a standard
    deviation and a sum."""

    def __init__(self, problem: PlacementProblem, plan: Plan, kind_of: Mapping[str, str]) -> None:
        self.batch = problem.batch
        self.total_mib = problem.total_memory_mib
        inst = problem.batch.instance
        self.failover = {  # instance -> MiB its secondary keeps
            name: max(inst[kind].failover_mib, 0)
            for name, kind in kind_of.items()
            if inst[kind].drbd and not inst[kind].forthcoming
        }
        self.row = {n: i for i, n in enumerate(problem.reserved_base)}
        self.share = np.array(list(problem.reserved_base.values()), dtype=float)
        self.new: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))  # s -> p -> MiB
        for name, pair in plan.items():
            self.apply(name, (pair[0], None), pair)

    def _share(self, n: str, new: Mapping[str, int]) -> float:
        node = self.batch.node[n]
        most = max(
            [node.reserve_mib, *(node.peers_mib.get(p, 0) + mib for p, mib in new.items() if mib)]
        )
        return most / self.total_mib[n]

    def terms(self, share: Array) -> float:
        return RESERVED_WEIGHT * float(share.std()) + RESERVED_TOTAL_WEIGHT * float(share.sum())

    def _after(self, name: str, old: Pair, new: Pair) -> dict[int, float]:
        """The shares that change when `name` moves from `old` to `new` (row -> share)."""
        mib = self.failover.get(name, 0)
        out: dict[int, float] = {}
        if not mib or old == new:
            return out
        for s in {old[1], new[1]} - {None}:
            if s not in self.row or s not in self.batch.node:
                continue
            peers = dict(self.new[s])
            if old[1] == s:
                peers[old[0]] = peers.get(old[0], 0) - mib
            if new[1] == s:
                peers[new[0]] = peers.get(new[0], 0) + mib
            out[self.row[s]] = self._share(s, peers)
        return out

    def gain(self, name: str, old: Pair, new: Pair) -> float:
        after = self._after(name, old, new)
        if not after:
            return 0.0
        share = self.share.copy()
        for i, value in after.items():
            share[i] = value
        return self.terms(share) - self.terms(self.share)

    def apply(self, name: str, old: Pair, new: Pair) -> None:
        mib = self.failover.get(name, 0)
        if not mib:
            return
        for i, value in self._after(name, old, new).items():
            self.share[i] = value
        if old[1] is not None:
            self.new[old[1]][old[0]] -= mib
        if new[1] is not None:
            self.new[new[1]][new[0]] += mib


def _over(count: int) -> int:
    return max(count - 1, 0)


class _Tags:
    """The tag terms at the current plan: per (tag, node) the primaries carrying an exclusion
    tag (pri_tags_score), and per (location tag, exclusion tag) the count pooled over the
    scored nodes (location_exclusion_score), each scoring max(0, count − 1); and the location
    tags a drbd instance's primary shares with its secondary (location_score, on a scored
    primary)."""

    def __init__(self, problem: PlacementProblem, plan: Plan, kind_of: Mapping[str, str]) -> None:
        self.kind_of = kind_of
        self.location = problem.location_tags
        self.scored = set(problem.scored)
        self.tags = {i.name: i.exclusion_tags for i in problem.batch.instances}
        # a forthcoming instance scores no location (htools' addPri changes only its counters)
        self.forthcoming = {i.name for i in problem.batch.instances if i.forthcoming}
        self.keys = problem.location_keys
        self.count = dict(problem.tag_counts)
        self.pool = dict(problem.location_pool)
        self.total = 0.0  # the terms' change since now
        for name, pair in plan.items():
            self.apply(name, (None, None), pair)

    def _changes(self, name: str, old: str | None, new: str | None) -> tuple[dict, dict]:
        kind = self.kind_of[name]
        count: dict[tuple[str, str], int] = defaultdict(int)
        pool: dict[tuple[str, str], int] = defaultdict(int)
        for node, step in ((old, -1), (new, 1)):
            for t in self.tags[kind]:
                if (t, node) in self.count:
                    count[t, node] += step
            for key in self.keys.get((kind, node), ()) if node is not None else ():
                pool[key] += step
        return count, pool

    def _shared(self, pair: Pair) -> int:
        p, s = pair
        if s is None or p not in self.scored:
            return 0
        return len(self.location.get(p, frozenset()) & self.location.get(s, frozenset()))

    def gain(self, name: str, old: Pair, new: Pair) -> float:
        shared = 0.0
        if self.kind_of[name] not in self.forthcoming:
            shared = LOCATION_SCORE_WEIGHT * (self._shared(new) - self._shared(old))
        if old[0] == new[0]:
            return shared
        count, pool = self._changes(name, old[0], new[0])
        return (
            shared
            + TAGS_WEIGHT
            * sum(_over(self.count[k] + d) - _over(self.count[k]) for k, d in count.items())
            + LOCATION_WEIGHT
            * sum(_over(self.pool[k] + d) - _over(self.pool[k]) for k, d in pool.items())
        )

    def apply(self, name: str, old: Pair, new: Pair) -> None:
        self.total += self.gain(name, old, new)
        if old[0] == new[0]:
            return
        count, pool = self._changes(name, old[0], new[0])
        for k, d in count.items():
            self.count[k] += d
        for k, d in pool.items():
            self.pool[k] += d


class _Search:
    """A plan and its rank, moved one instance at a time."""

    def __init__(
        self,
        problem: PlacementProblem,
        plan: Plan,
        kind_of: Mapping[str, str],
        spreads: _Spreads | None = None,
    ) -> None:
        self.kind_of = kind_of
        self.spreads = spreads or _Spreads(problem)
        self.reserves = _Reserves(problem, plan, kind_of)
        self.tags = _Tags(problem, plan, kind_of)
        self.plan: Plan = dict(plan)
        for name, pair in plan.items():
            self._place(name, pair, 1)

    def _place(self, name: str, pair: Pair, sign: int) -> None:
        kind = self.kind_of[name]
        self.spreads.apply(kind, "p", pair[0], sign)
        if pair[1] is not None:
            self.spreads.apply(kind, "s", pair[1], sign)

    def rank(self) -> float:
        return self.spreads.now() + self.reserves.terms(self.reserves.share) + self.tags.total

    def move(self, name: str, pair: Pair) -> None:
        old = self.plan[name]
        self._place(name, old, -1)
        self._place(name, pair, 1)
        self.reserves.apply(name, old, pair)
        self.tags.apply(name, old, pair)
        self.plan[name] = pair

    def reset(self, plan: Plan) -> None:
        for name, pair in plan.items():
            if self.plan[name] != pair:
                self.move(name, pair)

    def targets(self, name: str, role: str) -> list[str]:
        key = (self.kind_of[name], role)
        return self.spreads.tables[key][0] if key in self.spreads.tables else []

    def offers(self) -> list[_Move]:
        """The moves that lower the rank, best first: each instance's primary or secondary to
        any other target, or its drbd pair's roles swapped."""
        ranked: list[_Move] = []
        totals = self.spreads.totals()
        for name, (p, s) in self.plan.items():
            kind = self.kind_of[name]
            for role, at, other in (("p", p, s), ("s", s, p)):
                if at is None or (kind, role) not in self.spreads.tables:
                    continue
                names, gains = self.spreads.gains(kind, role, at, totals)
                for i in np.argsort(gains, kind="stable")[:TARGETS_RANKED]:
                    target = names[i]
                    if target not in (at, other):
                        pair = (target, s) if role == "p" else (p, target)
                        ranked.append(_Move(float(gains[i]), name, pair))
            if s is not None and self._swappable(kind, p, s):
                ranked.append(_Move(self._swap_gain(name, (s, p)), name, (s, p)))
        ranked.sort(key=lambda mv: mv.gain)
        exact = [
            _Move(mv.gain + self._apart(mv.name, self.plan[mv.name], mv.pair), mv.name, mv.pair)
            for mv in ranked[:RESERVE_RANKED]
        ]
        exact = [mv for mv in exact if mv.gain < -MIN_GAIN]
        exact.sort(key=lambda mv: (mv.gain, mv.name, mv.pair[0], mv.pair[1] or ""))
        return exact

    def _apart(self, name: str, old: Pair, new: Pair) -> float:
        """The change of the terms ranked apart: the N+1 reserve and the exclusion tags."""
        return self.reserves.gain(name, old, new) + self.tags.gain(name, old, new)

    def _swappable(self, kind: str, p: str, s: str) -> bool:
        tables = self.spreads.tables
        return (kind, "s") in tables and s in tables[kind, "p"][1] and p in tables[kind, "s"][1]

    def _swap_gain(self, name: str, pair: Pair) -> float:
        """The rank change of the swap without the reserve (added with the others')."""
        before = self.spreads.now()
        old = self.plan[name]
        self._place(name, old, -1)
        self._place(name, pair, 1)
        gain = self.spreads.now() - before
        self._place(name, pair, -1)
        self._place(name, old, 1)
        return gain


def _descend_checked(
    search: _Search, score: float, verdict: Verdict, going: Callable[[], bool]
) -> tuple[float, int, int]:
    """Single moves while `going()`: each step offers its best ranked moves to `verdict`
    and keeps the first that is valid and lower; a step that keeps none ends it. Returns the
    score reached, the moves kept and the plans judged."""
    kept = judged = 0
    while going():
        taken = None
        for move in search.offers()[:TRIES_PER_STEP]:
            if not going():
                break
            judged += 1
            new_score, bad = verdict({**search.plan, move.name: move.pair})
            if not bad and new_score is not None and new_score < score - MIN_GAIN:
                taken, score = move, new_score
                break
        if taken is None:
            break
        search.move(taken.name, taken.pair)
        kept += 1
    return score, kept, judged


def improve(
    problem: PlacementProblem,
    plan: Plan,
    score: float,
    kind_of: Mapping[str, str],
    verdict: Verdict,
    seconds: float,
    *,
    iterate: bool = True,
    seed: int = 0,
    stop: Callable[[], bool] = lambda: False,
) -> Improved:
    """`plan` (valid, scoring `score`) improved while `seconds` last: by single moves the
    checker passes, then, if `iterate`, by an iterated search: from the best plan, move
    PERTURBED instances to random targets, descend by the ranking alone, and keep the plan
    when it ranks lower and the checker passes it lower. `stop()` true ends it early."""
    began = time.perf_counter()
    spreads = _Spreads(problem)
    if not all(
        spreads.has(kind_of[name], "p", p) and (s is None or spreads.has(kind_of[name], "s", s))
        for name, (p, s) in plan.items()
    ):  # a placement the problem has no candidate for: nothing to rank it by
        return Improved(dict(plan), score, 0, 0, 0, 0, time.perf_counter() - began)
    search = _Search(problem, plan, kind_of, spreads)

    def going() -> bool:
        return time.perf_counter() - began < seconds and not stop()

    score, kept, judged = _descend_checked(search, score, verdict, going)
    best = dict(search.plan)
    best_rank = search.rank()
    rng = random.Random(seed)
    names = sorted(best)
    restarts = better = 0
    while iterate and going():
        restarts += 1
        search.reset(best)
        for name in rng.sample(names, min(PERTURBED, len(names))):
            p, s = search.plan[name]
            primary = rng.choice(search.targets(name, "p"))
            secondary = s
            if s is not None:
                choices = [n for n in search.targets(name, "s") if n != primary]
                if not choices:
                    continue
                secondary = rng.choice(choices)
            search.move(name, (primary, secondary))
        while going():
            offers = search.offers()
            if not offers:
                break
            search.move(offers[0].name, offers[0].pair)
        rank = search.rank()
        if rank >= best_rank - MIN_GAIN:
            continue
        judged += 1
        new_score, bad = verdict(dict(search.plan))
        if not bad and new_score is not None and new_score < score - MIN_GAIN:
            best, score, best_rank = dict(search.plan), new_score, rank
            better += 1
    return Improved(best, score, kept, restarts, better, judged, time.perf_counter() - began)
