"""Dedicated (exclusive-storage) allocation as a lexicographic MIP (docs/hail.md).

Two models; neither calls a solver.

* the batch model of formulations/batch.py (multi-allocate, also valid for one instance):
  binaries place each new instance's primary (and drbd secondary); integer count variables
  `a[n,t]` hold how many minimally compliant test instances t still fit on node n after the
  batch, bounded by each of the node's capacity rows (`model.capacity.capacity_rows`) minus
  what the batch takes. At a lexicographic optimum every count is at its bound, so the
  lost-allocation vector is exact for any combination of placements on a node.
* `build_single` (allocate): the same question for one instance, where each candidate node's
  lost vector and remaining disk are known constants, so the model is tiny (O(nodes)) and
  carries hail's tie-break (the later node or pair in iteration order) as a last stage.

Each keeps the contract of formulations/__init__.py: `batch.build_batch(BatchProblem)`,
`batch_objectives` (here), `batch.batch_solution`; `build_single(SingleProblem)`,
`single_objectives`, `single_solution`. Objectives: [placed (batch only, max)],
lost_0 … lost_{T-1} (min), remaining disk on the nodes that received instances (min),
[tie-break (single, max)]; the single model reads the lost vector as one integer
(`lost_radix`) and, where the range allows, the lost vector and the disk as one
(`single_key`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from formulations.objective import Objective
from model.batch import BatchProblem

if TYPE_CHECKING:  # Pyomo is imported where a model is built (issue 40, item 12): the
    import pyomo.core as pyo  # exhaustive single choice reads the problem without it


@dataclass(frozen=True)
class SingleCandidate:
    """One node's constants for `build_single`: metric contribution in each role."""

    name: str
    rank: int
    group: str
    primary_lost: tuple[int, ...] | None = None  # None: cannot be primary
    primary_disk_mib: int = 0  # f_dsk after taking the primary
    secondary_lost: tuple[int, ...] | None = None  # generic (no existing peer reservation)
    secondary_disk_mib: int = 0
    # primary node -> (lost vector as secondary of that primary, or None if it fails)
    secondary_lost_with: Mapping[str, tuple[int, ...] | None] = field(default_factory=dict)


# --------------------------------------------------------------------------------------
# multi-allocate: the batch model of formulations/batch.py, with the allocation counts
# --------------------------------------------------------------------------------------


def batch_objectives(m: pyo.ConcreteModel, p: BatchProblem) -> list[Objective]:
    """placed (max), [instances on last-resort groups (min)], lost_0 … lost_{T-1} (min),
    remaining disk on the nodes used (min)."""
    objs = [Objective("placed", m.placed, "max")]
    if p.has_last_resort:
        objs.append(Objective("on_last_resort", m.on_last_resort, "min"))
    objs += [Objective(f"lost_{t}", m.lost[t], "min") for t in range(p.n_tests)]
    objs.append(Objective("remaining_disk_mib", m.remaining_disk, "min"))
    return objs


# --------------------------------------------------------------------------------------
# allocate: one instance, constant metrics per candidate
# --------------------------------------------------------------------------------------


def single_representatives(
    cands: tuple[SingleCandidate, ...], drbd: bool
) -> tuple[list[str], list[str]]:
    """The possible primaries and secondaries, interchangeable candidates left out (exact).

    Candidates of one group with the same lost vector and remaining disk in a role differ
    only in the tie-break, which prefers the later one: of each such class the latest
    candidate is enough, and for drbd the latest two (the latest may be the other end of
    the pair). Nodes in a pair with an existing failover reservation stay individually.
    On a dedicated group of identical nodes this leaves a handful of binaries.
    """
    pinned = {c.name for c in cands if drbd and c.secondary_lost_with}
    pinned.update(p for c in cands if drbd for p in c.secondary_lost_with)
    keep = 2 if drbd else 1

    def role(key: Callable[[SingleCandidate], tuple | None]) -> list[str]:
        classes: dict[tuple, list[SingleCandidate]] = {}
        chosen = []
        for c in cands:
            k = key(c)
            if k is None:
                continue
            if c.name in pinned:
                chosen.append(c)
            else:
                classes.setdefault(k, []).append(c)
        for members in classes.values():
            chosen.extend(sorted(members, key=lambda c: c.rank)[-keep:])
        return [c.name for c in sorted(chosen, key=lambda c: c.rank)]

    prim = role(
        lambda c: None if c.primary_lost is None else (c.group, c.primary_lost, c.primary_disk_mib)
    )
    sec = role(
        lambda c: (
            None
            if not drbd or c.secondary_lost is None
            else (c.group, c.secondary_lost, c.secondary_disk_mib)
        )
    )
    return prim, sec


@dataclass(frozen=True)
class SingleProblem:
    """hail's dedicated allocate of one instance: the candidates' constant metrics."""

    candidates: tuple[SingleCandidate, ...]
    n_tests: int
    drbd: bool

    @cached_property
    def candidate(self) -> dict[str, SingleCandidate]:
        return {c.name: c for c in self.candidates}

    @cached_property
    def representatives(self) -> tuple[list[str], list[str]]:
        return single_representatives(self.candidates, self.drbd)

    @cached_property
    def pairs(self) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        """(p, s) pairs where s reserves failover memory for p already: those that fail,
        and those whose secondary loses a different vector."""
        prim, sec = self.representatives
        in_p = set(prim)
        by = self.candidate
        special = [(p, s) for s in sec for p in by[s].secondary_lost_with if p in in_p and p != s]
        bad = [(p, s) for p, s in special if by[s].secondary_lost_with[p] is None]
        good = [(p, s) for p, s in special if by[s].secondary_lost_with[p] is not None]
        return bad, good

    @property
    def needs_tie_break(self) -> bool:
        """The tie-break stage matters only if two choices can share lost vector and disk."""
        prim, _ = self.representatives
        by = self.candidate
        metrics = {(by[p].primary_lost, by[p].primary_disk_mib) for p in prim}
        return self.drbd or len(metrics) < len(prim)

    @cached_property
    def blend_key(self) -> tuple[int, int] | None:
        """`single_key`, asked by the objectives and again when the value is read back."""
        return single_key(self)

    @cached_property
    def lost_radix(self) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        """Each lost_t lies in [lo_t, hi_t]: the primary's value plus any secondary's."""
        prim, sec = self.representatives
        by = self.candidate
        secondary_values = [
            v
            for s in sec
            for v in (by[s].secondary_lost, *by[s].secondary_lost_with.values())
            if v is not None
        ]
        return lost_radix(
            [by[p].primary_lost for p in prim],
            secondary_values if self.drbd else [],
            self.n_tests,
        )


def define_single_choice(m: pyo.ConcreteModel, p: SingleProblem) -> None:
    """One primary; for drbd one secondary in its group, on another node, and w[p,s] = x·y
    for the pairs whose secondary already reserves memory for the primary."""
    import pyomo.core as pyo

    prim, sec = p.representatives
    by = p.candidate
    m.P = pyo.Set(initialize=prim, ordered=True, doc="possible primaries")
    m.S = pyo.Set(initialize=sec, ordered=True, doc="possible secondaries (generic)")
    m.T = pyo.RangeSet(0, p.n_tests - 1) if p.n_tests else pyo.Set(initialize=[])
    m.x = pyo.Var(m.P, domain=pyo.Binary, doc="x[p] = 1: primary is p")
    m.y = pyo.Var(m.S, domain=pyo.Binary, doc="y[s] = 1: secondary is s")
    # one_primary: Σ_p x[p] = 1
    m.one_primary = pyo.Constraint(expr=sum(m.x[n] for n in m.P) == 1)
    if not p.drbd:
        return
    groups = sorted({by[n].group for n in prim + sec})
    # same_group: Σ_{s in g} y[s] = Σ_{p in g} x[p]  (one secondary, in the primary's group)
    m.same_group = pyo.Constraint(
        groups,
        rule=lambda _m, g: (
            sum(m.y[s] for s in m.S if by[s].group == g)
            == sum(m.x[n] for n in m.P if by[n].group == g)
        ),
    )
    # distinct: x[n] + y[n] <= 1
    both = [n for n in prim if n in set(sec)]
    m.distinct = pyo.Constraint(both, rule=lambda _m, n: m.x[n] + m.y[n] <= 1)
    bad, good = p.pairs
    # forbidden: x[p] + y[s] <= 1  (s cannot reserve failover memory for p)
    m.forbidden = pyo.Constraint(bad, rule=lambda _m, a, s: m.x[a] + m.y[s] <= 1)
    m.w = pyo.Var(good, domain=pyo.Binary, doc="w[p,s] = 1 when the pair is (p, s)")
    # pair_and: w[p,s] >= x[p] + y[s] - 1
    m.pair_and = pyo.Constraint(good, rule=lambda _m, a, s: m.w[a, s] >= m.x[a] + m.y[s] - 1)
    # pair_p, pair_s: w[p,s] <= x[p], w[p,s] <= y[s]  (so w = x·y whatever the signs)
    m.pair_p = pyo.Constraint(good, rule=lambda _m, a, s: m.w[a, s] <= m.x[a])
    m.pair_s = pyo.Constraint(good, rule=lambda _m, a, s: m.w[a, s] <= m.y[s])


def define_single_metric(m: pyo.ConcreteModel, p: SingleProblem) -> None:
    """lost[t] = primary's loss + secondary's (corrected by w on reserving pairs), the
    remaining disk of both nodes, and hail's tie-break (the later candidate wins)."""
    import pyomo.core as pyo

    by = p.candidate
    lost_expr: list = [sum(by[n].primary_lost[t] * m.x[n] for n in m.P) for t in range(p.n_tests)]
    disk_expr = sum(by[n].primary_disk_mib * m.x[n] for n in m.P)
    tie = sum(by[n].rank * m.x[n] for n in m.P)
    if p.drbd:
        _, good = p.pairs
        for t in range(p.n_tests):
            lost_expr[t] = (
                lost_expr[t]
                + sum(by[s].secondary_lost[t] * m.y[s] for s in m.S)
                + sum(
                    (by[s].secondary_lost_with[a][t] - by[s].secondary_lost[t]) * m.w[a, s]
                    for a, s in good
                )
            )
        disk_expr = disk_expr + sum(by[s].secondary_disk_mib * m.y[s] for s in m.S)
        width = max((c.rank for c in p.candidates), default=0) + 1
        tie = width * tie + sum(by[s].rank * m.y[s] for s in m.S)
    m.lost = pyo.Expression(range(p.n_tests), rule=lambda _m, t: lost_expr[t])
    m.remaining_disk = pyo.Expression(expr=disk_expr)
    m.tie = pyo.Expression(expr=tie, doc="hail's iteration order: the later candidate wins")


def build_single(p: SingleProblem) -> pyo.ConcreteModel:
    """hail's dedicated allocate: pick the candidate (pair) with the least metric, last wins.

    For drbd the metric of (p, s) is primary_lost[p] + secondary_lost(s | p) and the disk is
    primary_disk[p] + secondary_disk[s]; the secondary's loss depends on p only when s
    already reserves failover memory for p, which `w[p,s]` switches on.
    """
    import pyomo.core as pyo

    m = pyo.ConcreteModel(name="dedicated_single")
    define_single_choice(m, p)
    define_single_metric(m, p)
    return m


#: Largest value of the lost vector read as one integer that is still exact for the solver.
MAX_LOST_RANK = 2**40


def lost_radix(
    primary: list[tuple[int, ...]], secondary: list[tuple[int, ...]], n_tests: int
) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(lowest values, weights) to read a lost vector as one integer, or None if too large.

    With every lost_t in [lo_t, hi_t], Σ_t w_t·(lost_t − lo_t), where w_{T−1} = 1 and
    w_t = w_{t+1}·(hi_{t+1} − lo_{t+1} + 1), orders lost vectors exactly as the
    lexicographic order does: one stage instead of T.
    """
    if not primary:
        return None
    lo, hi = [], []
    for t in range(n_tests):
        p_vals = [v[t] for v in primary]
        s_vals = [v[t] for v in secondary] or [0]
        lo.append(min(p_vals) + min(s_vals))
        hi.append(max(p_vals) + max(s_vals))
    weights = [1] * n_tests
    for t in range(n_tests - 2, -1, -1):
        weights[t] = weights[t + 1] * (hi[t + 1] - lo[t + 1] + 1)
    if n_tests and weights[0] * (hi[0] - lo[0] + 1) > MAX_LOST_RANK:
        return None
    return tuple(lo), tuple(weights)


#: The stage that reads the lost vector and the remaining disk as one integer (`single_key`).
LOST_AND_DISK = "lost_vector_and_disk"


def single_key(p: SingleProblem) -> tuple[int, int] | None:
    """(R, lowest disk) to read (lost vector, remaining disk) as one integer R·L + disk, with
    L the lost vector's radix rank (`lost_radix`) and R above the disk's range, so that the
    integer orders choices as the two stages do; None when it could exceed MAX_LOST_RANK.
    One stage fewer: a third of the solve of a 1,000-node drbd allocate (docs/hail.md)."""
    if p.lost_radix is None or p.n_tests == 0:
        return None
    _, weights = p.lost_radix
    prim, sec = p.representatives
    by = p.candidate

    def rank(v: tuple[int, ...]) -> int:
        return sum(w * x for w, x in zip(weights, v, strict=True))

    p_ranks = [rank(by[n].primary_lost) for n in prim]
    p_disks = [by[n].primary_disk_mib for n in prim]
    s_ranks, s_disks = [0], [0]
    if p.drbd:
        s_ranks = [
            rank(v)
            for n in sec
            for v in (by[n].secondary_lost, *by[n].secondary_lost_with.values())
            if v is not None
        ] or [0]
        s_disks = [by[n].secondary_disk_mib for n in sec] or [0]
    lost_lo, lost_hi = min(p_ranks) + min(s_ranks), max(p_ranks) + max(s_ranks)
    disk_lo, disk_hi = min(p_disks) + min(s_disks), max(p_disks) + max(s_disks)
    width = disk_hi - disk_lo + 1
    largest = max(abs(width * lost_lo + disk_lo), abs(width * lost_hi + disk_hi))
    return (width, disk_lo) if largest <= MAX_LOST_RANK else None


def single_objectives(
    m: pyo.ConcreteModel, p: SingleProblem, *, blend: bool = True
) -> list[Objective]:
    """The lost vector (min; one stage when `lost_radix` allows, else lost_0 … lost_{T-1}),
    remaining disk (min), tie-break (max; left out when the stages before it already have a
    single optimum). With `blend`, the lost vector and the disk are one stage when
    `single_key` allows (`single_lost_claim` and `split_lost_and_disk` read it back)."""
    key = p.blend_key if blend else None
    if key is not None:
        width, _ = key
        _, weights = p.lost_radix  # type: ignore[misc]
        rank = sum(w * m.lost[t] for t, w in enumerate(weights))
        objs = [Objective(LOST_AND_DISK, width * rank + m.remaining_disk, "min")]
    elif p.lost_radix is not None and p.n_tests > 1:
        _, weights = p.lost_radix
        rank = sum(w * m.lost[t] for t, w in enumerate(weights))
        objs = [Objective("lost_vector", rank, "min")]
    else:
        objs = [Objective(f"lost_{t}", m.lost[t], "min") for t in range(p.n_tests)]
    if key is None:
        objs.append(Objective("remaining_disk_mib", m.remaining_disk, "min"))
    if p.needs_tie_break:
        objs.append(Objective("tie_break", m.tie, "max"))
    return objs


def split_lost_and_disk(p: SingleProblem, value: float) -> tuple[int, int]:
    """(lost rank L, remaining disk) of the blended stage's value R·L + disk."""
    key = p.blend_key
    assert key is not None, "the stage was blended"
    width, disk_lo = key
    lost = (round(value) - disk_lo) // width
    return lost, round(value) - width * lost


def single_lost_claim(p: SingleProblem, objective: tuple[float, ...]) -> tuple[int, ...]:
    """The lost vector the solver's stage values claim (decoding the one-stage form; a
    blended stage is split first)."""
    if p.lost_radix is None or p.n_tests <= 1:
        return tuple(int(round(v)) for v in objective[: p.n_tests])
    lo, weights = p.lost_radix
    rest = int(round(objective[0])) - sum(w * low for w, low in zip(weights, lo, strict=True))
    claim = []
    for low, w in zip(lo, weights, strict=True):
        digit, rest = divmod(rest, w)
        claim.append(low + digit)
    return tuple(claim)


def single_solution(m: pyo.ConcreteModel, p: SingleProblem) -> tuple[str, str | None]:
    """The chosen (primary, secondary)."""
    import pyomo.core as pyo

    primary = next(n for n in m.P if pyo.value(m.x[n]) > 0.5)
    secondary = next((s for s in m.S if pyo.value(m.y[s]) > 0.5), None) if p.drbd else None
    return primary, secondary
