"""Integer Bareon disk layout: whole MiB of each space on each disk (docs/partition.md).

Sets      D disks (hw order), S spaces (schema order), G volume groups, F fairness groups;
          with aggregate=True, D is the classes of identical disks (disk_classes)
Params    cap_d   = size_d - disk overhead (MiB)           min_s, max_s (MiB, totals)
          n_d     = disks in d (1, or a class's size)       c_ds = A002620 order weight
          pv_mib  = LVM metadata per PV                      w_fs = integer weight, W_f = sum
          R_s     = right disks of s                         a_s = |S| - position of s
Vars      x_ds in Z>=0   MiB of space s on disk d            T_s in Z>=0 total of s
          pv_gd in 0..n_d  disks of d with a physical volume of VG g (only when pv_mib > 0)
          k_f, r_f, y_fs in Z>=0  fairness: T_f = W_f k_f + r_f, T_s = w_s k_f + y_fs
Stages    1 min off_preferred   2 max right_disk   3 max allocated (or min wrong_disk)
          4 max space_order (sum a_s T_s)   5 max order_score (sum c_ds x_ds)

The contract of formulations/__init__.py: `build(problem)` from a `LayoutProblem`,
`objectives(m, problem)` (stages 1-4), `solution(m, problem)` (the variables as plain
numbers). Two steps change a solved model in place: `add_polish_rows` (stage 4 once more as
an LP with the integers fixed; `remove_polish_rows` undoes it) and `add_placement_rows`
(stage 5 with every T_s, every earlier stage and the PVs fixed: a transportation problem,
whose LP optimum is integral, so the huge A002620 objective needs no branching). The order
in which they run, the disk classes and the fallbacks are the solve strategy's
(solvers/strategies/partition.py).

The LP-floor baseline, bareon-allocator's own LP: `build_lp_floor`, `lp_floor_objectives`,
`lp_floor_solution`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from itertools import pairwise

import pyomo.core as pyo
from pyomo.core.expr.numvalue import is_constant

from formulations.objective import Objective
from model.bareon.schema import (
    FairGroup,
    Overheads,
    PartitionProblem,
    Space,
    fairness_groups,
    order_coefficients,
    space_order_weights,
)

# At most this many VGs take part in the lexicographic order of identical disks' PV flags
# (2^K stays exact in floating point; ordering on a prefix of the VGs is still valid).
LEX_VGS = 16


@dataclass(frozen=True)
class Stage:
    """One lexicographic stage: a named expression on the model and its sense."""

    name: str
    sense: str  # "min" or "max"
    why: str


STAGES = (
    Stage("off_preferred_mib", "min", "MiB of preferring spaces off their preferred disks"),
    Stage("right_disk_mib", "max", "MiB of every space on its right disks"),
    Stage("allocated_mib", "max", "MiB allocated in total"),
    Stage("space_order", "max", "MiB of earlier spaces first (schema order)"),
    Stage("order_score", "max", "the original's order preference (A002620, disk-major)"),
)
# With --leave-preferred-empty stage 3 keeps spaces without preference off preferred disks.
STAGES_LEAVE_PREFERRED_EMPTY = (
    STAGES[0],
    STAGES[1],
    Stage("wrong_disk_mib", "min", "MiB of spaces without preference on preferred disks"),
    STAGES[3],
    STAGES[4],
)


def stages(leave_preferred_empty: bool) -> tuple[Stage, ...]:
    """The lexicographic stages in order."""
    return STAGES_LEAVE_PREFERRED_EMPTY if leave_preferred_empty else STAGES


def disk_classes(problem: PartitionProblem, overheads: Overheads) -> tuple[tuple[str, ...], ...]:
    """Disks that stages 1-4 cannot tell apart: same capacity, preferred by the same spaces.

    Each class lists its disks in hardware order; classes are ordered by their first disk.
    """
    classes: dict[tuple, list[str]] = {}
    for disk in problem.disks:
        preferring = frozenset(s.space_id for s in problem.spaces if disk.disk_id in s.best_disks)
        key = (max(0, disk.size_mib - overheads.disk_mib), preferring)
        classes.setdefault(key, []).append(disk.disk_id)
    return tuple(tuple(ds) for ds in classes.values())


@dataclass(frozen=True)
class LayoutProblem:
    """What the layout model is built from: the schema and hardware as read, the overheads
    of the output format, and which stage 3 applies. Derived data are properties."""

    problem: PartitionProblem
    overheads: Overheads
    leave_preferred_empty: bool = False

    @property
    def stages(self) -> tuple[Stage, ...]:
        return stages(self.leave_preferred_empty)

    @cached_property
    def space_ids(self) -> tuple[str, ...]:
        return tuple(s.space_id for s in self.problem.spaces)

    @cached_property
    def space_of(self) -> dict[str, Space]:
        return {s.space_id: s for s in self.problem.spaces}

    @cached_property
    def disk_capacity_mib(self) -> dict[str, int]:
        """cap_d: MiB of each disk after its per-disk overhead."""
        return {d.disk_id: max(0, d.size_mib - self.overheads.disk_mib) for d in self.problem.disks}

    @cached_property
    def capacity_mib(self) -> int:
        """MiB of every disk after the per-disk overheads."""
        return sum(self.disk_capacity_mib.values())

    @cached_property
    def classes(self) -> tuple[tuple[str, ...], ...]:
        return disk_classes(self.problem, self.overheads)

    def units(self, aggregate: bool) -> dict[str, tuple[str, ...]]:
        """The model's D: each disk on its own, or each class named by its first disk."""
        if aggregate:
            return {ds[0]: ds for ds in self.classes}
        return {d.disk_id: (d.disk_id,) for d in self.problem.disks}

    @cached_property
    def vg_lvs(self) -> dict[str, tuple[str, ...]]:
        """The LVs of each VG that has some."""
        return {vg.vg_id: vg.lv_ids for vg in self.problem.vgs if vg.lv_ids}

    @cached_property
    def fair_groups(self) -> tuple[FairGroup, ...]:
        return fairness_groups(self.problem)

    @cached_property
    def fair_members(self) -> tuple[tuple[int, str, int], ...]:
        """(group f, space s, integer weight w_fs) of every fairness member."""
        return tuple(
            (f, self.space_ids[i], w)
            for f, g in enumerate(self.fair_groups)
            for i, w in zip(g.space_indexes, g.weights, strict=True)
        )

    @cached_property
    def preferred_disks(self) -> frozenset[str]:
        """B: the disks some space prefers."""
        return self.problem.preferred_disks

    def right_disk(self, d: str, s: str) -> bool:
        """d is in R_s: a preferred disk of s, or for s without preference one nobody prefers."""
        space = self.space_of[s]
        if space.has_preference:
            return d in space.best_disks
        return d not in self.preferred_disks


# --------------------------------------------------------------------------- the layout model


def define_placement(
    m: pyo.ConcreteModel,
    p: LayoutProblem,
    units: dict[str, tuple[str, ...]],
    integer_placement: bool,
    integer_totals: bool,
) -> None:
    """x_ds >= 0 and the totals: sum_d x_ds = T_s with min_s <= T_s <= max_s.

    x_ds <= min(n_d cap_d, max_s) as a bound. T_s is integer, except (integer_totals=False)
    for spaces outside every fairness group, which `add_polish_rows` makes whole.
    """
    space_of = p.space_of
    m.D = pyo.Set(initialize=list(units), ordered=True)
    m.S = pyo.Set(initialize=list(p.space_ids), ordered=True)
    # n_d: disks in unit d (1 without aggregation)
    m.n_disks = pyo.Param(m.D, initialize={u: len(ds) for u, ds in units.items()})
    # cap_d: MiB of one disk of unit d after the per-disk overhead
    m.cap_mib = pyo.Param(
        m.D, initialize={u: p.disk_capacity_mib[ds[0]] for u, ds in units.items()}
    )

    def x_bounds(_m, d, s):
        top = _m.n_disks[d] * _m.cap_mib[d]
        limit = space_of[s].max_mib
        return (0, top if limit is None else min(top, limit))

    x_domain = pyo.NonNegativeIntegers if integer_placement else pyo.NonNegativeReals
    m.x = pyo.Var(m.D, m.S, domain=x_domain, bounds=x_bounds)
    capacity = p.capacity_mib

    def total_bounds(_m, s):
        limit = space_of[s].max_mib
        return (space_of[s].min_mib, capacity if limit is None else min(capacity, limit))

    # T_s: total MiB of space s; its bounds are min_s <= T_s <= max_s
    m.total_mib = pyo.Var(m.S, domain=pyo.NonNegativeIntegers, bounds=total_bounds)
    if not integer_totals:
        fair = {s for _, s, _ in p.fair_members}
        for s in p.space_ids:
            if s not in fair:
                m.total_mib[s].domain = pyo.NonNegativeReals

    # sum_d x_ds = T_s
    @m.Constraint(m.S)
    def space_total(_m, s):
        return sum(_m.x[d, s] for d in _m.D) == _m.total_mib[s]


def define_physical_volumes(m: pyo.ConcreteModel, p: LayoutProblem) -> None:
    """0 <= pv_gd <= n_d: how many disks of d hold a PV of VG g (no G without a PV overhead)."""
    m.G = pyo.Set(initialize=list(p.vg_lvs) if p.overheads.pv_mib > 0 else [], ordered=True)
    m.pv = pyo.Var(
        m.G, m.D, domain=pyo.NonNegativeIntegers, bounds=lambda _m, g, d: (0, _m.n_disks[d])
    )


def define_disk_capacity(m: pyo.ConcreteModel, p: LayoutProblem) -> None:
    """sum_s x_ds + pv_mib sum_g pv_gd <= n_d cap_d: spaces and PV metadata fit the disks."""
    pv_mib = p.overheads.pv_mib

    # sum_s x_ds + pv_mib * sum_g pv_gd <= n_d cap_d
    @m.Constraint(m.D)
    def disk_capacity(_m, d):
        if not len(_m.S):  # no space: nothing to place
            return pyo.Constraint.Skip
        return (
            sum(_m.x[d, s] for s in _m.S) + pv_mib * sum(_m.pv[g, d] for g in _m.G)
            <= _m.n_disks[d] * _m.cap_mib[d]
        )


def define_volume_groups(m: pyo.ConcreteModel, p: LayoutProblem) -> None:
    """sum_{s in g} x_ds <= M_gd pv_gd, and x_ds <= M_sd pv_gd for each LV s of g: an LV lives
    only in a PV of its VG (M: the disk's room after one PV's metadata, or the LVs' max)."""
    pv_mib = p.overheads.pv_mib
    space_of, vg_lvs = p.space_of, p.vg_lvs

    def vg_room(g: str, d: str) -> int:
        """Big-M of the PV row: the disk's room, or less when the VG's LVs are all bounded."""
        room = pyo.value(m.cap_mib[d]) - pv_mib
        limits = [space_of[s].max_mib for s in vg_lvs[g]]
        if all(limit is not None for limit in limits):
            room = min(room, sum(limits))
        return max(0, room)

    # sum_{s in g} x_ds <= M_gd * pv_gd,  M_gd = min(cap_d - pv_mib, sum_{s in g} max_s)
    @m.Constraint(m.G, m.D)
    def lv_inside_pv(_m, g, d):
        return sum(_m.x[d, s] for s in vg_lvs[g]) <= vg_room(g, d) * _m.pv[g, d]

    m.GLV = pyo.Set(initialize=[(g, s) for g in m.G for s in vg_lvs[g]], dimen=2, ordered=True)

    # x_ds <= min(cap_d - pv_mib, max_s) * pv_gd for each LV s of g (a tighter LP relaxation)
    @m.Constraint(m.GLV, m.D)
    def lv_inside_pv_each(_m, g, s, d):
        room = pyo.value(_m.cap_mib[d]) - pv_mib
        limit = space_of[s].max_mib
        return _m.x[d, s] <= max(0, room if limit is None else min(room, limit)) * _m.pv[g, d]


def define_identical_disks(m: pyo.ConcreteModel, p: LayoutProblem, aggregate: bool) -> None:
    """sum_g 2^(K-1-k_g) pv_ga >= sum_g 2^(K-1-k_g) pv_gb for consecutive disks a, b of a class.

    Identical disks (disk_classes) are interchangeable in stages 1-4, so on the disk model
    their PV flags are ordered lexicographically, the first K <= LEX_VGS VGs weighing most.
    The class model has no such symmetry: no rows.
    """
    pairs = [] if aggregate else [pair for ds in p.classes for pair in pairwise(ds)]
    m.DD = pyo.Set(initialize=pairs, dimen=2, ordered=True)
    lex_weight = {g: 2 ** (LEX_VGS - 1 - k) for k, g in enumerate(m.G) if k < LEX_VGS}

    # sum_g 2^(K-1-k_g) pv_ga >= sum_g 2^(K-1-k_g) pv_gb for consecutive a, b of one class
    @m.Constraint(m.DD)
    def identical_disks_ordered(_m, a, b):
        if not lex_weight:
            return pyo.Constraint.Skip
        return sum(w * _m.pv[g, a] for g, w in lex_weight.items()) >= sum(
            w * _m.pv[g, b] for g, w in lex_weight.items()
        )


def define_fairness(m: pyo.ConcreteModel, p: LayoutProblem) -> None:
    """|W_f T_s - w_s T_f| <= W_f - 1: each member within 1 MiB of its weighted share.

    Written exactly as T_f = W_f k_f + r_f, T_s = w_s k_f + y_s (0 <= r_f < W_f,
    0 <= y_s <= w_s) so that the solver branches on a few small integers, not on x. r_f and
    y_s are also at most the capacity C (they are parts of totals), so no row's terms pass
    W_f C, which the reader keeps within 2^53 (model.bareon.schema.FAIR_PRODUCT_LIMIT).
    """
    groups = p.fair_groups
    weight = {(f, s): w for f, s, w in p.fair_members}
    m.F = pyo.Set(initialize=range(len(groups)), ordered=True)
    m.FS = pyo.Set(initialize=[(f, s) for f, s, _ in p.fair_members], dimen=2, ordered=True)
    m.share_unit = pyo.Var(
        m.F,
        domain=pyo.NonNegativeIntegers,
        bounds=(0, p.capacity_mib // min(min(g.weights) for g in groups) if groups else 0),
    )
    m.group_rest = pyo.Var(
        m.F,
        domain=pyo.NonNegativeIntegers,
        bounds=lambda _m, f: (0, min(groups[f].weight_sum - 1, p.capacity_mib)),
    )
    m.member_rest = pyo.Var(
        m.FS,
        domain=pyo.NonNegativeIntegers,
        bounds=lambda _m, f, s: (0, min(weight[f, s], p.capacity_mib)),
    )

    # T_s = w_s k_f + y_s
    @m.Constraint(m.FS)
    def fair_share(_m, f, s):
        return _m.total_mib[s] == weight[f, s] * _m.share_unit[f] + _m.member_rest[f, s]

    # sum_{s in f} y_s = r_f
    @m.Constraint(m.F)
    def fair_rest(_m, f):
        return sum(_m.member_rest[g, s] for g, s in _m.FS if g == f) == _m.group_rest[f]

    # W_f y_s - w_s r_f <= W_f - 1
    @m.Constraint(m.FS)
    def fair_upper(_m, f, s):
        W = groups[f].weight_sum
        return W * _m.member_rest[f, s] - weight[f, s] * _m.group_rest[f] <= W - 1

    # W_f y_s - w_s r_f >= -(W_f - 1)
    @m.Constraint(m.FS)
    def fair_lower(_m, f, s):
        W = groups[f].weight_sum
        return W * _m.member_rest[f, s] - weight[f, s] * _m.group_rest[f] >= -(W - 1)


def define_stages(m: pyo.ConcreteModel, p: LayoutProblem, aggregate: bool) -> None:
    """One Expression per stage (see STAGES), named after it; no active objective.

    order_score weighs 0 on classes: stage 5 needs the disk model.
    """
    space_of = p.space_of
    preferred = p.preferred_disks
    # stage 1: sum over preferring s, d not in best_s of x_ds
    m.off_preferred_mib = pyo.Expression(
        expr=sum(
            m.x[d, s]
            for s in m.S
            if space_of[s].has_preference
            for d in m.D
            if d not in space_of[s].best_disks
        )
    )
    # stage 2: sum over (d, s) with d in R_s of x_ds
    m.right_disk_mib = pyo.Expression(
        expr=sum(m.x[d, s] for d in m.D for s in m.S if p.right_disk(d, s))
    )
    # stage 3: sum_ds x_ds
    m.allocated_mib = pyo.Expression(expr=sum(m.x[d, s] for d in m.D for s in m.S))
    # stage 3 (leave preferred empty): sum over s without preference, d in B of x_ds
    m.wrong_disk_mib = pyo.Expression(
        expr=sum(
            m.x[d, s] for s in m.S if not space_of[s].has_preference for d in m.D if d in preferred
        )
    )
    # stage 5: sum_ds c_ds x_ds
    order = order_coefficients(p.problem)
    index = {d.disk_id: i for i, d in enumerate(p.problem.disks)}
    # c_ds: A002620 order weight of (disk, space); 0 on classes (stage 5 needs disks)
    m.order_weight = pyo.Param(
        m.D,
        m.S,
        initialize={
            (d, s): 0 if aggregate else order[index[d]][j]
            for d in m.D
            for j, s in enumerate(p.space_ids)
        },
    )
    m.order_score = pyo.Expression(
        expr=sum(m.order_weight[d, s] * m.x[d, s] for d in m.D for s in m.S)
    )
    # stage 4: sum_s a_s T_s
    weights = space_order_weights(p.problem)
    m.space_order = pyo.Expression(
        expr=sum(weights[j] * m.total_mib[s] for j, s in enumerate(p.space_ids))
    )


def build(
    p: LayoutProblem,
    *,
    integer_placement: bool = True,
    aggregate: bool = False,
    integer_totals: bool = True,
) -> pyo.ConcreteModel:
    """The MIP with one Expression per stage (see STAGES); it has no active objective.

    integer_placement=False makes x continuous for stages 1-4 (HiGHS): for integer totals
    T_s every stage's optimum over x is a face of a transportation polytope, so only the
    totals, fairness and PV variables need branching.  CP-SAT needs integer x.

    aggregate=True places spaces on classes of identical disks (disk_classes) instead of
    disks: D is then the classes (named by their first disk), n_d their number of disks,
    x_ds the MiB of s on the whole class and pv_gd in 0..n_d the number of the class's
    disks holding a PV of g.  Stages 1-4 depend only on these sums, so this model has the
    same stage 1-4 optimum whenever its answer can be spread over the disks, and none of
    the symmetry between identical disks; order_score (stage 5) needs the disk model.

    integer_totals=False (with continuous x) makes T_s continuous for spaces outside every
    fairness group: for fixed PV and fairness integers the stage optima are integral (see
    add_polish_rows), whose LP then gives whole-MiB totals; HiGHS branches on fewer columns.
    """
    m = pyo.ConcreteModel(name="bareon_partition")
    define_placement(m, p, p.units(aggregate), integer_placement, integer_totals)
    define_physical_volumes(m, p)
    define_disk_capacity(m, p)
    define_volume_groups(m, p)
    define_identical_disks(m, p, aggregate)
    define_fairness(m, p)
    define_stages(m, p, aggregate)
    return m


def objectives(m: pyo.ConcreteModel, p: LayoutProblem) -> list[Objective]:
    """Stages 1-4, the lexicographic part, in order; a stage without a variable (e.g. no
    space has a preference) needs no solve and is left out."""
    return [
        Objective(st.name, m.component(st.name).expr, st.sense)
        for st in p.stages[:-1]
        if not is_constant(m.component(st.name).expr)
    ]


@dataclass(frozen=True)
class LayoutValues:
    """A solved model's variables as the solver left them (None: no value), unrounded:
    on classes, or with continuous x and T, they need not be whole."""

    mib: dict[tuple[str, str], float | None]  # x_ds, d a disk or a class (D order, then S)
    total_mib: dict[str, float | None]  # T_s (S order)
    pv_count: dict[tuple[str, str], float | None]  # pv_gd (G order, then D)


def solution(m: pyo.ConcreteModel, p: LayoutProblem) -> LayoutValues:
    """x, T and pv read back as plain numbers."""
    return LayoutValues(
        mib={(d, s): m.x[d, s].value for d in m.D for s in m.S},
        total_mib={s: m.total_mib[s].value for s in m.S},
        pv_count={(g, d): m.pv[g, d].value for g in m.G for d in m.D},
    )


def spread_pvs(
    problem: PartitionProblem,
    overheads: Overheads,
    pv_count: dict[tuple[str, str], int],
    vg_mib: dict[tuple[str, str], float],
) -> dict[tuple[str, str], int]:
    """PV flags pv_gd per disk from the aggregated counts (class named by its first disk).

    In each class, the VGs whose PVs are fullest (vg_mib / count) are placed first, each on
    the disks with the most room left (hardware order on ties), counting pv_mib plus an
    even share of the VG's MiB per PV; so a VG that fills its PVs gets disks of its own.
    The disk model then checks that the result is feasible.
    """
    flags: dict[tuple[str, str], int] = {}
    size = {d.disk_id: max(0, d.size_mib - overheads.disk_mib) for d in problem.disks}
    for disks in disk_classes(problem, overheads):
        unit = disks[0]
        room = {d: float(size[d]) for d in disks}
        wanted = [(g, n) for (g, u), n in pv_count.items() if u == unit and n > 0]
        wanted.sort(key=lambda gn: -vg_mib.get((gn[0], unit), 0.0) / gn[1])
        for g, n in wanted:
            per_pv = overheads.pv_mib + vg_mib.get((g, unit), 0.0) / n
            for d in sorted(disks, key=lambda d: -room[d])[:n]:
                room[d] -= per_pv
                flags[g, d] = 1
    return flags


def add_placement_rows(
    m: pyo.ConcreteModel,
    fixed: list[tuple[Stage, int]],
    totals_mib: dict[str, int],
    pv_flags: dict[tuple[str, str], int] | None = None,
) -> None:
    """Fix what stages 1-4 decided, leaving only where each space's MiB sit (stage 5).

    T_s and pv_gd are fixed (to pv_flags, or else to their current values) and x becomes
    integer again. With T fixed, the x polytope is a transportation polytope (integral),
    and each earlier stage's row keeps its optimal face, which is integral too; so the LP
    optimum of stage 5 is integral and needs no branching. The model's one objective is
    then stage 5, for `solvers.solve`.
    """
    for s in m.S:
        m.total_mib[s].fix(totals_mib[s])
    for g in m.G:
        for d in m.D:
            flag = pv_flags.get((g, d), 0) if pv_flags is not None else m.pv[g, d].value
            m.pv[g, d].fix(round(flag or 0))
    m.identical_disks_ordered.deactivate()  # the PVs are fixed: nothing left to order
    for var in m.x.values():
        var.domain = pyo.NonNegativeIntegers
    m.stage_rows = pyo.ConstraintList()
    for stage, value in fixed:
        expr = m.component(stage.name).expr
        # stage_expr <= value (min) or stage_expr >= value (max)
        m.stage_rows.add(expr <= value if stage.sense == "min" else expr >= value)

    # maximise sum_ds c_ds x_ds
    m.placement_objective = pyo.Objective(expr=m.order_score.expr, sense=pyo.maximize)


def add_polish_rows(m: pyo.ConcreteModel, fixed: list[tuple[Stage, int]]) -> None:
    """Stage 4 once more as an LP: the integers as found, the totals T_s continuous.

    With pv and the fairness integers fixed, the rows of x are a network matrix (the space
    rows, and per disk or class the laminar VG and capacity rows) and each stage row keeps
    an optimal face, so the LP's optimal vertices have whole-MiB totals. The strategy uses
    it to make continuous totals whole and to repair a stage 4 that HiGHS closed short of
    the optimum in floating point (seen: 1 MiB). The model's one objective is then stage 4,
    for `solvers.solve`; remove_polish_rows undoes every change.
    """
    for var in (*m.pv.values(), *m.share_unit.values(), *m.group_rest.values()):
        var.fix(round(var.value or 0))
    for var in m.member_rest.values():
        var.fix(round(var.value or 0))
    # the totals that are integer in the model, to restore
    m.polish_integer_totals = pyo.Set(
        initialize=[s for s in m.S if m.total_mib[s].is_integer()], ordered=True
    )
    for var in m.total_mib.values():
        var.domain = pyo.NonNegativeReals
    m.polish_rows = pyo.ConstraintList()
    for stage, value in fixed:
        expr = m.component(stage.name).expr
        # stage_expr <= value (min) or stage_expr >= value (max)
        m.polish_rows.add(expr <= value if stage.sense == "min" else expr >= value)
    # maximise sum_s a_s T_s
    m.polish_objective = pyo.Objective(expr=m.space_order.expr, sense=pyo.maximize)


def remove_polish_rows(m: pyo.ConcreteModel) -> None:
    """Undo add_polish_rows: integers free again, totals as before, rows and objective gone."""
    for var in (*m.pv.values(), *m.share_unit.values(), *m.group_rest.values()):
        var.unfix()
    for var in m.member_rest.values():
        var.unfix()
    for s in m.polish_integer_totals:
        m.total_mib[s].domain = pyo.NonNegativeIntegers
    m.del_component(m.polish_integer_totals)
    m.del_component(m.polish_objective)
    m.del_component(m.polish_rows)


def set_values(m: pyo.ConcreteModel, values: LayoutValues) -> None:
    """Put x and T back as `solution` read them (after a polish LP that is not used)."""
    for (d, s), value in values.mib.items():
        m.x[d, s].set_value(value, skip_validation=True)
    for s, value in values.total_mib.items():
        m.total_mib[s].set_value(value, skip_validation=True)


# --------------------------------------------------------------------------- LP-floor baseline

UNALLOCATED = "unallocated"


def define_lp_floor_rows(m: pyo.ConcreteModel, problem: PartitionProblem) -> None:
    """sum_s x_ds <= size_d and min_s <= sum_d x_ds <= max_s, with the sizes as given
    (fractions included) and 'unallocated' taking the rest of each disk."""
    space_of = {s.space_id: s for s in problem.spaces}
    size = {d.disk_id: d.size_given for d in problem.disks}

    # sum_s x_ds <= size_d
    @m.Constraint(m.D)
    def disk_capacity(_m, d):
        return sum(_m.x[d, s] for s in _m.S) <= size[d]

    # sum_d x_ds <= max_s
    @m.Constraint(list(space_of))
    def space_max(_m, s):
        if space_of[s].max_given is None:
            return pyo.Constraint.Skip
        return sum(_m.x[d, s] for d in _m.D) <= space_of[s].max_given

    # sum_d x_ds >= min_s
    @m.Constraint(list(space_of))
    def space_min(_m, s):
        return sum(_m.x[d, s] for d in _m.D) >= space_of[s].min_given


def define_lp_floor_fairness(m: pyo.ConcreteModel, problem: PartitionProblem) -> None:
    """sum_d x_df / w_f = sum_d x_ds / w_s: exact equalities over the original's groups
    (equal min, max and preferred disks, fixed sizes included; weight 0 left out), each
    member s tied to its group's first member f."""
    space_of = {s.space_id: s for s in problem.spaces}
    groups: dict[tuple, list[str]] = {}
    for s in problem.spaces:
        key = (s.min_given, s.max_given, s.best_disks)
        groups.setdefault(key, []).append(s.space_id)
    ties = []
    for group in groups.values():
        weighted = [s for s in group if space_of[s].weight != 0]
        ties += [(weighted[0], s) for s in weighted[1:]]

    # sum_d x_df / w_f - sum_d x_ds / w_s = 0 for s in the group of first member f
    @m.Constraint(range(len(ties)))
    def fairness(_m, k):
        f, s = ties[k]
        return sum(_m.x[d, f] for d in _m.D) / float(space_of[f].weight) == sum(
            _m.x[d, s] for d in _m.D
        ) / float(space_of[s].weight)


def build_lp_floor(problem: PartitionProblem) -> pyo.ConcreteModel:
    """bareon-allocator's LP (docs/partition.md, "bareon-allocator, the original"): continuous
    x over the spaces plus 'unallocated', no overheads, no VGs."""
    m = pyo.ConcreteModel(name="bareon_allocator_lp")
    m.D = pyo.Set(initialize=[d.disk_id for d in problem.disks], ordered=True)
    m.S = pyo.Set(initialize=[s.space_id for s in problem.spaces] + [UNALLOCATED], ordered=True)
    m.x = pyo.Var(m.D, m.S, domain=pyo.NonNegativeReals)
    define_lp_floor_rows(m, problem)
    define_lp_floor_fairness(m, problem)
    return m


def lp_floor_objectives(m: pyo.ConcreteModel, problem: PartitionProblem) -> list[Objective]:
    """max sum_ds c_ds x_ds, with c_ds = 2 + 1/A002620(k+3) on a right disk of s,
    1/A002620(k+3) elsewhere, and 1 for 'unallocated' and none_order spaces (k = d|S| + s,
    'unallocated' counted in |S|)."""
    disks = list(m.D)
    spaces = list(m.S)
    n = len(spaces)
    space_of = {s.space_id: s for s in problem.spaces}
    preferred = problem.preferred_disks

    def coefficient(i: int, d: str, j: int, s: str) -> float:
        if s == UNALLOCATED or space_of[s].none_order:
            return 1.0
        order = 1.0 / a002620_shifted(i * n + j)
        space = space_of[s]
        on_right = d in space.best_disks if space.has_preference else d not in preferred
        return 2.0 + order if on_right else order

    score = sum(
        coefficient(i, d, j, s) * m.x[d, s]
        for i, d in enumerate(disks)
        for j, s in enumerate(spaces)
    )
    return [Objective("allocator_score", score, "max", integral=False)]


def lp_floor_solution(
    m: pyo.ConcreteModel, problem: PartitionProblem
) -> tuple[tuple[float, ...], ...]:
    """Per disk (hw order): the MiB of each space (schema order), then of 'unallocated', as
    the LP left them (fractions included; no value reads 0)."""
    return tuple(tuple(m.x[d, s].value or 0.0 for s in m.S) for d in m.D)


def a002620_shifted(k: int) -> int:
    """bareon-allocator's denominator for slot k: floor((k+3)^2/4) = 2, 4, 6, 9, 12, ..."""
    return (k + 3) * (k + 3) // 4
