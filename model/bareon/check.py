"""Independent checker for integer layouts: recompute every requirement from the input alone.

It never looks at solver variables: only the problem (schema + disks), the overheads of the
chosen output and the per-disk MiB of each space.  It also recomputes the stage values, the
unallocated MiB per disk and the reason they stay unallocated.
"""

from __future__ import annotations

from dataclasses import dataclass

from model.bareon.schema import (
    Layout,
    Overheads,
    PartitionProblem,
    fairness_groups,
    order_coefficients,
    space_order_weights,
)


@dataclass(frozen=True)
class CheckReport:
    """What the checker found: violations (empty = valid), stage values, unallocated MiB."""

    violations: tuple[str, ...]
    stage_values: dict[str, int]
    unallocated_mib: int
    unallocated_by_disk: tuple[tuple[str, int, str], ...]  # (disk_id, MiB, why)

    @property
    def ok(self) -> bool:
        return not self.violations


def pv_count(problem: PartitionProblem, layout: Layout, disk_index: int) -> int:
    """VGs with at least one MiB of their LVs on the disk: each needs one PV there."""
    index = {s.space_id: i for i, s in enumerate(problem.spaces)}
    row = layout.sizes_mib[disk_index]
    return sum(1 for vg in problem.vgs if any(row[index[lv]] > 0 for lv in vg.lv_ids))


def check_layout(
    problem: PartitionProblem,
    layout: Layout,
    overheads: Overheads,
    *,
    leave_preferred_empty: bool = False,
) -> CheckReport:
    """Check sizes, capacity (with overheads), min/max, fairness and preferences."""
    bad: list[str] = []
    disks, spaces = problem.disks, problem.spaces
    if len(layout.sizes_mib) != len(disks) or any(len(r) != len(spaces) for r in layout.sizes_mib):
        return CheckReport(("layout shape does not match the disks and spaces",), {}, 0, ())
    for d, disk in enumerate(disks):
        for s, space in enumerate(spaces):
            v = layout.sizes_mib[d][s]
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                bad.append(f"{space.space_id} on {disk.disk_id}: {v!r} is not a whole MiB >= 0")
    if bad:
        return CheckReport(tuple(bad), {}, 0, ())

    free: list[int] = []
    for d, disk in enumerate(disks):
        content = sum(layout.sizes_mib[d]) + overheads.pv_mib * pv_count(problem, layout, d)
        if content == 0 and disk.size_mib < overheads.disk_mib:
            used = disk.size_mib  # too small for its GPT and bios_grub: unusable, left out
        else:
            used = content + overheads.disk_mib
        if used > disk.size_mib:
            bad.append(f"disk {disk.disk_id}: {used} MiB used > {disk.size_mib} MiB")
        free.append(max(0, disk.size_mib - used))

    totals = [layout.total_mib(s) for s in range(len(spaces))]
    for s, space in enumerate(spaces):
        if totals[s] < space.min_mib:
            bad.append(f"space {space.space_id}: {totals[s]} MiB < min {space.min_given:g} MiB")
        if space.max_mib is not None and totals[s] > space.max_mib:
            bad.append(f"space {space.space_id}: {totals[s]} MiB > max {space.max_given:g} MiB")

    for group in fairness_groups(problem):
        group_total = sum(totals[i] for i in group.space_indexes)
        for i, w in zip(group.space_indexes, group.weights, strict=True):
            # |T_s - share| < 1  <=>  |W * T_s - w * T_group| < W
            if abs(group.weight_sum * totals[i] - w * group_total) >= group.weight_sum:
                share = w * group_total / group.weight_sum
                bad.append(
                    f"space {spaces[i].space_id}: {totals[i]} MiB is not within 1 MiB of its "
                    f"weighted share {share:.2f}"
                )

    preferred = problem.preferred_disks
    for s, space in enumerate(spaces):
        if space.has_preference:
            off = sum(
                layout.sizes_mib[d][s]
                for d, disk in enumerate(disks)
                if disk.disk_id not in space.best_disks
            )
            if off > 0 and totals[s] != space.min_mib:
                bad.append(
                    f"space {space.space_id}: {off} MiB off its preferred disks beyond its minimum"
                )
        elif leave_preferred_empty:
            wrong = sum(
                layout.sizes_mib[d][s] for d, disk in enumerate(disks) if disk.disk_id in preferred
            )
            if wrong > 0 and totals[s] != space.min_mib:
                bad.append(
                    f"space {space.space_id}: {wrong} MiB on preferred disks beyond its minimum"
                )

    reasons = tuple(
        (
            disk.disk_id,
            free[d],
            _why_free(problem, layout, overheads, d, totals, leave_preferred_empty),
        )
        for d, disk in enumerate(disks)
        if free[d] > 0
    )
    return CheckReport(
        violations=tuple(bad),
        stage_values=stage_values(problem, layout),
        unallocated_mib=sum(free),
        unallocated_by_disk=reasons,
    )


def stage_values(problem: PartitionProblem, layout: Layout) -> dict[str, int]:
    """Every stage objective recomputed from the layout (see formulations.partition.STAGES)."""
    preferred = problem.preferred_disks
    order = order_coefficients(problem)
    names = (
        "off_preferred_mib",
        "right_disk_mib",
        "allocated_mib",
        "wrong_disk_mib",
        "space_order",
        "order_score",
    )
    values = dict.fromkeys(names, 0)
    space_weights = space_order_weights(problem)
    for d, disk in enumerate(problem.disks):
        for s, space in enumerate(problem.spaces):
            v = layout.sizes_mib[d][s]
            values["allocated_mib"] += v
            values["space_order"] += space_weights[s] * v
            values["order_score"] += order[d][s] * v
            if space.has_preference:
                if disk.disk_id in space.best_disks:
                    values["right_disk_mib"] += v
                else:
                    values["off_preferred_mib"] += v
            elif disk.disk_id in preferred:
                values["wrong_disk_mib"] += v
            else:
                values["right_disk_mib"] += v
    return values


def _why_free(
    problem: PartitionProblem,
    layout: Layout,
    overheads: Overheads,
    d: int,
    totals: list[int],
    leave_preferred_empty: bool,
) -> str:
    """One line: why no space takes more of this disk."""
    disk = problem.disks[d]
    preferred = problem.preferred_disks
    may_use = []
    for s, space in enumerate(problem.spaces):
        if space.has_preference and disk.disk_id not in space.best_disks:
            continue
        if not space.has_preference and leave_preferred_empty and disk.disk_id in preferred:
            continue
        may_use.append(s)
    if not may_use:
        if leave_preferred_empty and disk.disk_id in preferred:
            return (
                "preferred by some space; spaces without preference leave it empty "
                "(--leave-preferred-empty)"
            )
        return "no space may be placed on it"
    growing = [
        s
        for s in may_use
        if problem.spaces[s].max_mib is None or totals[s] < problem.spaces[s].max_mib
    ]
    names = ", ".join(problem.spaces[s].space_id for s in may_use)
    if growing:
        grow = ", ".join(problem.spaces[s].space_id for s in growing)
        if overheads.pv_mib:
            why = f"spaces that could grow ({grow}) are tied by fairness or need a new PV here"
        else:
            why = f"spaces that could grow ({grow}) are held by fairness to spaces at max_size"
    else:
        why = f"every space allowed on it ({names}) is at its max_size"
    kept_off = [
        s.space_id
        for s in problem.spaces
        if not s.has_preference and (s.max_mib is None or s.min_mib < s.max_mib)
    ]
    if leave_preferred_empty and disk.disk_id in preferred and kept_off:
        why += (
            f"; spaces without preference ({', '.join(kept_off)}) leave preferred disks empty "
            "(--leave-preferred-empty)"
        )
    return why


def _group_total_feasible(
    min_mib: int, max_mib: int | None, weights: tuple[int, ...], total: int
) -> bool:
    """Whole-MiB totals within 1 MiB of their shares of ``total`` exist inside [min, max]."""
    big = sum(weights)
    low_sum = high_sum = 0
    for w in weights:
        low = max(min_mib, -((big - 1 - w * total) // big))  # ceil((w*T - W + 1) / W)
        high = (w * total + big - 1) // big
        if max_mib is not None:
            high = min(high, max_mib)
        if low > high:
            return False
        low_sum, high_sum = low_sum + low, high_sum + high
    return low_sum <= total <= high_sum


def group_minimum_mib(problem: PartitionProblem, space_indexes, weights) -> int | None:
    """Smallest feasible total of a fairness group, None if its weights cannot fit min/max."""
    space = problem.spaces[space_indexes[0]]
    big = sum(weights)
    start = len(weights) * space.min_mib
    if space.min_mib > 0:
        start = max(start, max((space.min_mib - 1) * big // w + 1 for w in weights))
    end = start + 2 * big + len(weights)
    if space.max_mib is not None:
        end = min(end, len(weights) * space.max_mib)
    for total in range(start, end + 1):
        if _group_total_feasible(space.min_mib, space.max_mib, weights, total):
            return total
    return None


def diagnose_infeasible(problem: PartitionProblem, overheads: Overheads) -> str | None:
    """One line naming the requirements that cannot hold together, computed from the data."""
    grouped: set[int] = set()
    minimum = 0
    raised: list[str] = []  # groups whose weights need more than their members' min_size
    for group in fairness_groups(problem):
        grouped |= set(group.space_indexes)
        need = group_minimum_mib(problem, group.space_indexes, group.weights)
        names = ", ".join(problem.spaces[i].space_id for i in group.space_indexes)
        if need is None:
            shown = ", ".join(str(w) for w in group.weights)
            return (
                f"the weights ({shown}) of spaces {names} cannot be honoured within 1 MiB "
                "inside their common min_size/max_size"
            )
        plain = sum(problem.spaces[i].min_mib for i in group.space_indexes)
        if need > plain:
            given = ", ".join(f"{float(problem.spaces[i].weight):g}" for i in group.space_indexes)
            raised.append(
                f"the weights ({given}) of spaces {names} ask {need} MiB of them where "
                f"their min_size asks {plain} MiB"
            )
        minimum += need
    minimum += sum(s.min_mib for i, s in enumerate(problem.spaces) if i not in grouped)
    needing = [s.space_id for s in problem.spaces if s.min_mib > 0]
    lvs_needed = {s.space_id for s in problem.spaces if s.min_mib > 0}
    pvs = sum(1 for vg in problem.vgs if lvs_needed & set(vg.lv_ids))
    overhead = overheads.pv_mib * pvs
    capacity = sum(max(0, d.size_mib - overheads.disk_mib) for d in problem.disks)
    if minimum + overhead > capacity:
        extra = ""
        if overheads.disk_mib or overheads.pv_mib:
            extra = (
                f" (after {overheads.disk_mib} MiB per disk, and with {overheads.pv_mib} MiB "
                "per LVM physical volume)"
            )
        names = ", ".join(needing) if len(needing) <= 8 else ", ".join(needing[:8]) + ", ..."
        what = f"the minimum sizes of spaces {names} ({minimum} MiB)"
        if raised:
            what = (
                f"the minimum sizes and weights of spaces {names} ({minimum} MiB: "
                + "; ".join(raised)
                + ")"
            )
        return (
            f"{what} exceed the disks' capacity "
            f"({capacity} MiB) by {minimum + overhead - capacity} MiB{extra}"
        )
    return None
