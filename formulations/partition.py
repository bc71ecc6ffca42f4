"""Integer Bareon disk layout: whole MiB of each space on each disk (issue 5).

Sets      D disks (hw order), S spaces (schema order), G volume groups, F fairness groups
Params    cap_d   = size_d - disk overhead (MiB)           min_s, max_s (MiB, totals)
          pv_mib  = LVM metadata per PV                      c_ds = A002620 order weight
          right_ds = 1 if d is a right disk for s            w_fs = integer weight, W_f = sum
Vars      x_ds in Z>=0   MiB of space s on disk d
          pv_gd in {0,1} VG g has a physical volume on disk d (only when pv_mib > 0)
Stages    1 min off_preferred   2 max right_disk   3 max allocated (or min wrong_disk)
          4 max order_score  -- solved lexicographically by the program, never here.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyomo.environ as pyo

from model.bareon import Overheads, PartitionProblem, fairness_groups, order_coefficients


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
    Stage("order_score", "max", "seed's order preference (A002620, disk-major)"),
)
# With --leave-preferred-empty stage 3 keeps spaces without preference off preferred disks.
STAGES_LEAVE_PREFERRED_EMPTY = (
    STAGES[0],
    STAGES[1],
    Stage("wrong_disk_mib", "min", "MiB of spaces without preference on preferred disks"),
    STAGES[3],
)


def build_partition_model(
    problem: PartitionProblem, overheads: Overheads, *, leave_preferred_empty: bool = False
) -> pyo.ConcreteModel:
    """The MIP with one Expression per stage (see STAGES); it has no active objective."""
    m = pyo.ConcreteModel(name="bareon_partition")
    disks = [d.disk_id for d in problem.disks]
    spaces = [s.space_id for s in problem.spaces]
    space_of = {s.space_id: s for s in problem.spaces}
    order = order_coefficients(problem)
    preferred = problem.preferred_disks

    m.D = pyo.Set(initialize=disks, ordered=True)
    m.S = pyo.Set(initialize=spaces, ordered=True)
    m.cap_mib = pyo.Param(
        m.D,
        initialize={d.disk_id: max(0, d.size_mib - overheads.disk_mib) for d in problem.disks},
    )
    m.min_mib = pyo.Param(m.S, initialize={s.space_id: s.min_mib for s in problem.spaces})
    m.order_weight = pyo.Param(
        m.D,
        m.S,
        initialize={(d, s): order[i][j] for i, d in enumerate(disks) for j, s in enumerate(spaces)},
    )

    def x_bounds(_m, d, s):
        top = _m.cap_mib[d]
        limit = space_of[s].max_mib
        return (0, top if limit is None else min(top, limit))

    m.x = pyo.Var(m.D, m.S, domain=pyo.NonNegativeIntegers, bounds=x_bounds)
    m.total_mib = pyo.Expression(m.S, rule=lambda _m, s: sum(_m.x[d, s] for d in _m.D))

    # --- volume groups: an LV lives only in a PV of its VG; each PV costs pv_mib on its disk
    vg_lvs = {vg.vg_id: vg.lv_ids for vg in problem.vgs if vg.lv_ids}
    m.G = pyo.Set(initialize=list(vg_lvs) if overheads.pv_mib > 0 else [], ordered=True)
    m.pv = pyo.Var(m.G, m.D, domain=pyo.Binary)

    # sum_s x_ds + pv_mib * sum_g pv_gd <= cap_d
    @m.Constraint(m.D)
    def disk_capacity(_m, d):
        return (
            sum(_m.x[d, s] for s in _m.S) + overheads.pv_mib * sum(_m.pv[g, d] for g in _m.G)
            <= _m.cap_mib[d]
        )

    # sum_{s in g} x_ds <= cap_d * pv_gd
    @m.Constraint(m.G, m.D)
    def lv_inside_pv(_m, g, d):
        return sum(_m.x[d, s] for s in vg_lvs[g]) <= _m.cap_mib[d] * _m.pv[g, d]

    # sum_d x_ds >= min_s
    @m.Constraint(m.S)
    def space_min(_m, s):
        if _m.min_mib[s] == 0:
            return pyo.Constraint.Skip
        return _m.total_mib[s] >= _m.min_mib[s]

    # sum_d x_ds <= max_s
    @m.Constraint(m.S)
    def space_max(_m, s):
        limit = space_of[s].max_mib
        if limit is None:
            return pyo.Constraint.Skip
        return _m.total_mib[s] <= limit

    # --- fairness: |W_f * T_s - w_s * sum_{t in f} T_t| <= W_f - 1, i.e. within 1 MiB of the share
    groups = fairness_groups(problem)
    members = [
        (f, spaces[i], w)
        for f, g in enumerate(groups)
        for i, w in zip(g.space_indexes, g.weights, strict=True)
    ]
    m.F = pyo.Set(initialize=[(f, s) for f, s, _ in members], dimen=2, ordered=True)
    weight = {(f, s): w for f, s, w in members}

    def _deviation(_m, f, s):
        group = groups[f]
        group_total = sum(_m.total_mib[spaces[i]] for i in group.space_indexes)
        return group.weight_sum * _m.total_mib[s] - weight[f, s] * group_total

    # W_f * T_s - w_s * T_f <= W_f - 1
    @m.Constraint(m.F)
    def fair_upper(_m, f, s):
        return _deviation(_m, f, s) <= groups[f].weight_sum - 1

    # W_f * T_s - w_s * T_f >= -(W_f - 1)
    @m.Constraint(m.F)
    def fair_lower(_m, f, s):
        return _deviation(_m, f, s) >= -(groups[f].weight_sum - 1)

    # --- stage expressions
    def right(d: str, s: str) -> bool:
        space = space_of[s]
        return d in space.best_disks if space.has_preference else d not in preferred

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
    # stage 2: sum over (d, s) with d a right disk of s of x_ds
    m.right_disk_mib = pyo.Expression(expr=sum(m.x[d, s] for d in m.D for s in m.S if right(d, s)))
    # stage 3: sum_ds x_ds
    m.allocated_mib = pyo.Expression(expr=sum(m.x[d, s] for d in m.D for s in m.S))
    # stage 3 (leave preferred empty): sum over s without preference, d in B of x_ds
    m.wrong_disk_mib = pyo.Expression(
        expr=sum(
            m.x[d, s] for s in m.S if not space_of[s].has_preference for d in m.D if d in preferred
        )
    )
    # stage 4: sum_ds c_ds x_ds
    m.order_score = pyo.Expression(
        expr=sum(m.order_weight[d, s] * m.x[d, s] for d in m.D for s in m.S)
    )
    m.leave_preferred_empty = leave_preferred_empty
    return m


def stages(leave_preferred_empty: bool) -> tuple[Stage, ...]:
    """The lexicographic stages in order."""
    return STAGES_LEAVE_PREFERRED_EMPTY if leave_preferred_empty else STAGES


def build_lp_floor_model(problem: PartitionProblem) -> pyo.ConcreteModel:
    """bareon-allocator's LP (specs/bareon.md §3): continuous x plus 'unallocated', one objective.

    Exact fairness equalities over the original's groups (fixed-size spaces included), the
    objective 2 + 1/A002620(k+3) on right disks, 1/A002620(k+3) elsewhere, 1 for unallocated.
    """
    m = pyo.ConcreteModel(name="bareon_allocator_lp")
    disks = [d.disk_id for d in problem.disks]
    spaces = [s.space_id for s in problem.spaces] + ["unallocated"]
    n = len(spaces)
    space_of = {s.space_id: s for s in problem.spaces}
    preferred = problem.preferred_disks
    m.D = pyo.Set(initialize=disks, ordered=True)
    m.S = pyo.Set(initialize=spaces, ordered=True)
    m.x = pyo.Var(m.D, m.S, domain=pyo.NonNegativeReals)
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

    # sum_d x_df / w_f - sum_d x_ds / w_s = 0 for s in the group of first member f
    groups: dict[tuple, list[str]] = {}
    for s in problem.spaces:
        key = (s.min_given, s.max_given, s.best_disks)
        groups.setdefault(key, []).append(s.space_id)
    ties = []
    for group in groups.values():
        weighted = [s for s in group if space_of[s].weight != 0]
        ties += [(weighted[0], s) for s in weighted[1:]]

    @m.Constraint(range(len(ties)))
    def fairness(_m, k):
        f, s = ties[k]
        return sum(_m.x[d, f] for d in _m.D) / float(space_of[f].weight) == sum(
            _m.x[d, s] for d in _m.D
        ) / float(space_of[s].weight)

    def coefficient(i: int, d: str, j: int, s: str) -> float:
        if s == "unallocated" or space_of[s].none_order:
            return 1.0
        order = 1.0 / a002620_shifted(i * n + j)
        space = space_of[s]
        on_right = d in space.best_disks if space.has_preference else d not in preferred
        return 2.0 + order if on_right else order

    m.objective = pyo.Objective(
        expr=sum(
            coefficient(i, d, j, s) * m.x[d, s]
            for i, d in enumerate(disks)
            for j, s in enumerate(spaces)
        ),
        sense=pyo.maximize,
    )
    return m


def a002620_shifted(k: int) -> int:
    """bareon-allocator's denominator for slot k: floor((k+3)^2/4) = 2, 4, 6, 9, 12, ..."""
    return (k + 3) * (k + 3) // 4
