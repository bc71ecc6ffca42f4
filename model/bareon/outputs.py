"""Documents written from an integer layout: bareon-allocator's list, Bareon's PartitionScheme
dict, the Ironic driver's partitions JSON and an SVG picture (docs/partition.md, "Outputs").

Conventions of the Bareon forms: every disk gets a GPT with a bios_grub partition first; an
LV's MiB on a disk go into one PV of its VG there, sized LVs + LVM metadata; a partition
space split over several disks becomes one partition per disk (only the first is mounted);
an LV that no VG contains is written as a plain partition.
"""

from __future__ import annotations

from typing import Any
from xml.sax.saxutils import escape

from model.bareon.check import pv_count
from model.bareon.schema import Layout, Overheads, PartitionProblem

PARTITION_TABLE_START_MIB = 1  # bareon's first partition begins at 1 MiB


def _plain_number(value: int | float) -> int | float:
    return int(value) if float(value).is_integer() else value


def allocator_document(
    problem: PartitionProblem,
    layout: Layout,
    overheads: Overheads,
    unallocated_mib: tuple[int, ...] | None = None,
) -> list[dict[str, Any]]:
    """bareon-allocator's list: every disk, every space (zeros too), then 'unallocated'."""
    out = []
    for d, disk in enumerate(problem.disks):
        row = layout.sizes_mib[d]
        if unallocated_mib is None:
            used = sum(row) + overheads.disk_mib + overheads.pv_mib * pv_count(problem, layout, d)
            free = disk.size_mib - used
        else:
            free = unallocated_mib[d]
        spaces = [
            {"space_id": s.space_id, "size": row[i]} for i, s in enumerate(problem.spaces)
        ] + [{"space_id": "unallocated", "size": free}]
        out.append(
            {"disk_id": disk.disk_id, "size": _plain_number(disk.size_given), "spaces": spaces}
        )
    return out


def _device_name(disk) -> str:
    return disk.path or disk.dev or disk.disk_id


def _partition_name(device: str, count: int) -> str:
    if "/by-" in device:
        return f"{device}-part{count}"
    return f"{device}p{count}" if device[-1:].isdigit() else f"{device}{count}"


def _pieces(problem: PartitionProblem, layout: Layout, d: int):
    """(kind, id, MiB) on disk d in writing order: plain partitions, then one PV per VG."""
    index = {s.space_id: i for i, s in enumerate(problem.spaces)}
    row = layout.sizes_mib[d]
    pieces = []
    for i, space in enumerate(problem.spaces):
        if row[i] > 0 and (space.kind == "partition" or problem.vg_of(space.space_id) is None):
            pieces.append(("partition", space.space_id, row[i]))
    for vg in problem.vgs:
        lv_mib = sum(row[index[lv]] for lv in vg.lv_ids)
        if lv_mib > 0:
            pieces.append(("pv", vg.vg_id, lv_mib))
    return pieces


def bareon_document(
    problem: PartitionProblem, layout: Layout, overheads: Overheads
) -> dict[str, Any]:
    """Bareon's PartitionScheme.to_dict() form (parteds, pvs, vgs, lvs, fss, mds), MiB."""
    space_of = {s.space_id: s for s in problem.spaces}
    bios_grub_mib = overheads.disk_mib - PARTITION_TABLE_START_MIB
    parteds, pvs, fss = [], [], []
    pvnames: dict[str, list[str]] = {vg.vg_id: [] for vg in problem.vgs}
    mounted: set[str] = set()
    for d, disk in enumerate(problem.disks):
        if disk.size_mib < overheads.disk_mib:  # too small even for its GPT and bios_grub
            continue
        device = _device_name(disk)
        begin = PARTITION_TABLE_START_MIB
        partitions = []

        def add(size_mib: int, flags: list[str], _device=device, _parts=partitions) -> str:
            nonlocal begin
            count = len(_parts) + 1
            name = _partition_name(_device, count)
            _parts.append(
                {
                    "name": name,
                    "count": count,
                    "device": _device,
                    "begin": begin,
                    "end": begin + size_mib,
                    "flags": flags,
                    "guid": None,
                    "configdrive": False,
                    "partition_type": "primary",
                }
            )
            begin += size_mib
            return name

        add(bios_grub_mib, ["bios_grub"])
        for kind, ident, mib in _pieces(problem, layout, d):
            if kind == "pv":
                name = add(mib + overheads.pv_mib, [])
                pvs.append(
                    {
                        "name": name,
                        "metadatasize": max(0, (overheads.pv_mib - 8) // 2),
                        "metadatacopies": 2,
                    }
                )
                pvnames[ident].append(name)
                continue
            name = add(mib, [])
            space = space_of[ident]
            if (space.mount or space.fs_type) and ident not in mounted:
                mounted.add(ident)
                fss.append(_fs(name, space))
        parteds.append({"name": device, "label": "gpt", "partitions": partitions})
    totals = {s.space_id: layout.total_mib(i) for i, s in enumerate(problem.spaces)}
    lvs = []
    for vg in problem.vgs:
        for lv in vg.lv_ids:
            if totals[lv] > 0:
                lvs.append({"name": lv, "vgname": vg.vg_id, "size": totals[lv]})
                if space_of[lv].mount or space_of[lv].fs_type:
                    fss.append(_fs(f"/dev/mapper/{vg.vg_id}-{lv}", space_of[lv]))
    vgs = [{"name": vg, "pvnames": names} for vg, names in pvnames.items() if names]
    return {"parteds": parteds, "pvs": pvs, "vgs": vgs, "lvs": lvs, "fss": fss, "mds": []}


def _fs(device: str, space) -> dict[str, Any]:
    return {
        "device": device,
        "mount": space.mount or "none",
        "fs_type": space.fs_type or "",
        "fs_label": "",
        "fs_options": "",
    }


def _mib(value: int) -> str:
    return f"{value} MiB"


def ironic_document(
    problem: PartitionProblem, layout: Layout, overheads: Overheads
) -> dict[str, Any]:
    """bareon-ironic's deploy_config: disks with partitions and PVs, then VGs with LVs."""
    space_of = {s.space_id: s for s in problem.spaces}
    entries: list[dict[str, Any]] = []
    for d, disk in enumerate(problem.disks):
        if disk.size_mib < overheads.disk_mib:  # too small even for the 24 MiB reserved
            continue
        if disk.dev:
            ident = {"type": "name", "value": disk.dev.rsplit("/", 1)[-1]}
        elif disk.path:
            ident = {"type": "path", "value": disk.path}
        else:
            ident = {"type": "name", "value": disk.disk_id.rsplit("/", 1)[-1]}
        volumes = []
        for kind, ident_, mib in _pieces(problem, layout, d):
            if kind == "pv":
                volumes.append(
                    {
                        "type": "pv",
                        "vg": ident_,
                        "size": _mib(mib + overheads.pv_mib),
                        "lvm_meta_size": _mib(overheads.pv_mib),
                    }
                )
                continue
            volume = {"type": "partition", "size": _mib(mib)}
            space = space_of[ident_]
            if space.mount:
                volume["mount"] = space.mount
            if space.fs_type:
                volume["file_system"] = space.fs_type
            volumes.append(volume)
        entries.append(
            {"type": "disk", "id": ident, "size": _mib(disk.size_mib), "volumes": volumes}
        )
    for vg in problem.vgs:
        lvs = []
        for lv in vg.lv_ids:
            total = layout.total_mib(
                next(i for i, s in enumerate(problem.spaces) if s.space_id == lv)
            )
            if total > 0:
                volume = {"type": "lv", "name": lv, "size": _mib(total)}
                if space_of[lv].mount:
                    volume["mount"] = space_of[lv].mount
                if space_of[lv].fs_type:
                    volume["file_system"] = space_of[lv].fs_type
                lvs.append(volume)
        if lvs:
            entries.append({"type": "vg", "id": vg.vg_id, "volumes": lvs})
    return {"partitions_policy": "clean", "partitions": entries}


PALETTE = (
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
    "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac",
)  # fmt: skip


def layout_svg(problem: PartitionProblem, layout: Layout, overheads: Overheads) -> str:
    """Each disk a bar scaled to 450 px for the largest disk, its spaces in schema order."""
    width, bar_h, gap, left = 450, 28, 34, 10
    largest = max(d.size_mib for d in problem.disks) or 1
    rows = []
    y = 10
    for d, disk in enumerate(problem.disks):
        scale = width / largest
        rows.append(
            f'<text x="{left}" y="{y + 12}" font-size="12">{escape(disk.disk_id)} '
            f"size={disk.size_mib}</text>"
        )
        y += 16
        rows.append(
            f'<rect x="{left}" y="{y}" width="{disk.size_mib * scale:.2f}" height="{bar_h}" '
            'rx="4" fill="#dddddd" stroke="#888888"/>'
        )
        x = float(left)
        overhead = min(
            disk.size_mib, overheads.disk_mib + overheads.pv_mib * pv_count(problem, layout, d)
        )
        pieces = [("overhead", overhead, "#777777")] if overhead else []
        pieces += [
            (s.space_id, layout.sizes_mib[d][i], PALETTE[i % len(PALETTE)])
            for i, s in enumerate(problem.spaces)
            if layout.sizes_mib[d][i] > 0
        ]
        for label, mib, colour in pieces:
            w = mib * scale
            rows.append(
                f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{bar_h}" fill="{colour}">'
                f"<title>{escape(label)} size={mib}</title></rect>"
            )
            if w > 40:
                rows.append(
                    f'<text x="{x + 3:.2f}" y="{y + 18}" font-size="10" fill="#ffffff">'
                    f"{escape(label)} size={mib}</text>"
                )
            x += w
        y += bar_h + gap - 16
    height = y + 10
    body = "\n".join(rows)
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width + 2 * left}" '
        f'height="{height}" viewBox="0 0 {width + 2 * left} {height}">\n{body}\n</svg>\n'
    )
