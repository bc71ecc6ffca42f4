"""bareon-allocator inputs (dynamic schema, hardware info, fixture files) as frozen dataclasses.

Reading follows bareon-allocator's formats (docs/partition.md, "bareon-allocator, the
original") with these deliberate
differences, each reported as a note: ``partition`` and ``partitions`` are both elastic
spaces; ``size: 0`` means zero (the original ignored it); a non-integer size from yaql is
rounded to whole MiB in the direction that keeps the requirement (min and size up, max
down); ``best_with_disks`` may also list disk ids, and an empty list means no preference;
spaces with ``min_size == max_size`` are not tied by fairness (their size is fixed).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import yaml

from model.bareon.yaql_sandbox import YaqlError, YaqlSandbox, yaql_expression
from model.errors import InputError
from model.validate import (
    MAX_MIB,
    MAX_QUANTITY,
    NESTING_MESSAGE,
    deep_nesting_line,
    quantity_message,
    quantity_problem,
    shown,
)

ELASTIC_TYPES = {"lv": "lv", "partition": "partition", "partitions": "partition"}
CONTAINER_TYPES = {"vg"}
SOLVER_KEYS = {"id", "type", "min_size", "max_size", "size", "weight", "best_with_disks"}
KNOWN_KEYS = SOLVER_KEYS | {"none_order", "contains", "mount", "fs_type", "label", "fs_label"}


@dataclass(frozen=True)
class Disk:
    """A disk from the hardware info; sizes are whole MiB."""

    disk_id: str
    size_mib: int
    size_given: int | float
    path: str | None = None
    dev: str | None = None
    disk_type: str | None = None


@dataclass(frozen=True)
class Space:
    """An elastic space (LV or partition); min/max are whole MiB totals over all disks."""

    space_id: str
    kind: str  # "lv" or "partition"
    min_mib: int
    max_mib: int | None
    weight: Fraction
    best_disks: frozenset[str]  # empty: no preference
    none_order: bool = False
    mount: str | None = None
    fs_type: str | None = None
    # The values as written (after yaql), for the LP-floor baseline that mimics the original.
    min_given: float = 0.0
    max_given: float | None = None

    @property
    def has_preference(self) -> bool:
        return bool(self.best_disks)

    @property
    def fixed(self) -> bool:
        return self.max_mib is not None and self.min_mib == self.max_mib


@dataclass(frozen=True)
class VolumeGroup:
    """A VG container; its LVs may be placed only in its physical volumes."""

    vg_id: str
    lv_ids: tuple[str, ...]


@dataclass(frozen=True)
class PartitionProblem:
    """Everything the formulation, checker and writers need, read from the input alone."""

    disks: tuple[Disk, ...]
    spaces: tuple[Space, ...]
    vgs: tuple[VolumeGroup, ...]
    notes: tuple[str, ...] = ()
    source: str = ""
    name: str = ""
    expected: tuple[Mapping[str, Any], ...] | None = field(default=None, compare=False)

    def vg_of(self, space_id: str) -> str | None:
        """The VG containing an LV, or None."""
        for vg in self.vgs:
            if space_id in vg.lv_ids:
                return vg.vg_id
        return None

    @property
    def preferred_disks(self) -> frozenset[str]:
        """Disks some space prefers (bareon-allocator's set B)."""
        out: set[str] = set()
        for space in self.spaces:
            out |= space.best_disks
        return frozenset(out)

    def right_disks(self, space: Space) -> frozenset[str]:
        """A space's preferred disks, or for a space without preference the disks nobody prefers."""
        if space.has_preference:
            return space.best_disks
        return frozenset(d.disk_id for d in self.disks) - self.preferred_disks


# --------------------------------------------------------------------------- YAML


#: libyaml's loader where PyYAML was built with it (50 times faster: 8 MB in 0.26 s, not 14 s).
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
#: Values a document may expand to through aliases (a "billion laughs" document is a few lines
#: that expand to 10^9; every real schema or hardware file has a few hundred).
MAX_YAML_VALUES = 100_000


def _too_big(data: Any) -> str | None:
    """Why the document, aliases expanded, cannot be walked (a cycle, too many values)."""
    count = 0
    stack: list[tuple[Any, frozenset[int]]] = [(data, frozenset())]
    while stack:
        value, above = stack.pop()
        count += 1
        if count > MAX_YAML_VALUES:
            return f"the document expands to more than {MAX_YAML_VALUES} values through aliases"
        if isinstance(value, dict | list):
            if id(value) in above:
                return "an alias refers to a collection that contains the alias"
            inner = above | {id(value)}
            items = value.values() if isinstance(value, dict) else value
            stack.extend((item, inner) for item in items)
    return None


def load_yaml(path: str) -> tuple[Any, yaml.Node | None]:
    """Data and node tree (for line numbers), parsed once; InputError with the file and line
    on bad YAML, a document nested too deeply, or one that expands too far."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise InputError(f"cannot read: {err.strerror}", source=path) from None
    except UnicodeDecodeError:
        raise InputError("not UTF-8 text", source=path) from None
    loader = _LOADER(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = err.problem or err.context or "invalid YAML"
        raise InputError(f"invalid YAML: {problem}", source=path, line=line) from None
    except yaml.YAMLError as err:
        raise InputError(f"invalid YAML: {' '.join(str(err).split())}", source=path) from None
    except RecursionError:  # the pure-Python loader recurses once per level
        line = deep_nesting_line(text, quotes="\"'")
        raise InputError(NESTING_MESSAGE, source=path, line=line) from None
    finally:
        loader.dispose()
    problem = _too_big(data)
    if problem is not None:
        raise InputError(problem, source=path)
    return data, node


def _key_line(node: yaml.Node | None, key: str) -> int | None:
    child = _mapping_child(node, key)
    return None if child is None else child.start_mark.line + 1


def _mapping_child(node: yaml.Node | None, key: str) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        for knode, vnode in node.value:
            if isinstance(knode, yaml.ScalarNode) and knode.value == key:
                return vnode
    return None


def _item_lines(seq_node: yaml.Node | None) -> list[tuple[int | None, dict[str, int]]]:
    """For each item of a YAML sequence: its line and the line of each of its keys."""
    out: list[tuple[int | None, dict[str, int]]] = []
    if isinstance(seq_node, yaml.SequenceNode):
        for item in seq_node.value:
            keys: dict[str, int] = {}
            if isinstance(item, yaml.MappingNode):
                for knode, vnode in item.value:
                    if isinstance(knode, yaml.ScalarNode):
                        keys[knode.value] = vnode.start_mark.line + 1
            out.append((item.start_mark.line + 1, keys))
    return out


# --------------------------------------------------------------------------- reading


def read_problem(
    schema_path: str, hw_path: str | None = None, sandbox: YaqlSandbox | None = None
) -> PartitionProblem:
    """Read a dynamic schema (+ hardware info) or a fixture file into a PartitionProblem."""
    data, node = load_yaml(schema_path)
    name = ""
    expected = None
    hw: Any = None
    hw_source = hw_path or schema_path
    hw_node: yaml.Node | None = None
    if isinstance(data, dict) and "dynamic_schema" in data:
        schema = data["dynamic_schema"]
        schema_node = _mapping_child(node, "dynamic_schema")
        name = str(data.get("name", "") or "")
        if data.get("expected") is not None:
            if not isinstance(data["expected"], list):
                raise InputError(
                    "'expected' must be a list of disks",
                    source=schema_path,
                    line=_key_line(node, "expected"),
                )
            expected = tuple(data["expected"])
        hw = data.get("hw_info")
        hw_node = _mapping_child(node, "hw_info")
    else:
        schema, schema_node = data, node
    if hw_path is not None:
        hw, hw_node = load_yaml(hw_path)
    elif hw is None:
        raise InputError(
            "no hardware info: pass --hw-info, or a fixture file with dynamic_schema and hw_info",
            source=schema_path,
        )
    disks = _read_disks(hw, hw_source, hw_node)
    if not isinstance(schema, list):
        raise InputError(
            "the dynamic schema must be a YAML list of spaces", source=schema_path, line=1
        )
    parts = _read_schema(
        schema, _item_lines(schema_node), hw, disks, schema_path, sandbox or YaqlSandbox()
    )
    return PartitionProblem(**parts, name=name, expected=expected)


def exact_weight(value: int | float) -> Fraction:
    """The weight as the user wrote it: the simplest fraction that reads back as the float.

    Fraction(0.1) is the binary double 3602879701896397/2^55; the schema said 1/10, and a
    yaql 1/3 means 1/3. A simpler fraction is taken only when it is the same float: an earlier
    limit_denominator(10^6) turned 1e-9 into 0 and dropped the space from its fairness group
    (issue 40, item 1).
    """
    if isinstance(value, int):
        return Fraction(value)
    written = Fraction(repr(float(value)))
    simpler = written.limit_denominator(1_000_000)
    return simpler if float(simpler) == value else written


def _number(value: Any, what: str, source: str, line: int | None, limit: int = MAX_MIB) -> float:
    """Every size (MiB, up to 2^40) and weight (up to 2^53, their products checked apart),
    held to exalloc's rule for numbers (model.validate)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(
            f"{what} must be a number, got {shown(repr(value))}", source=source, line=line
        )
    problem = quantity_problem(value, limit=limit)
    if problem is not None:
        message = quantity_message(what, value, problem, limit=limit)
        raise InputError(message, source=source, line=line)
    return value


def _read_disks(hw: Any, source: str, hw_node: yaml.Node | None) -> tuple[Disk, ...]:
    if not isinstance(hw, dict) or not isinstance(hw.get("disks"), list):
        raise InputError("hardware info must be a mapping with a 'disks' list", source=source)
    lines = _item_lines(_mapping_child(hw_node, "disks"))
    disks: list[Disk] = []
    seen: set[str] = set()
    for index, item in enumerate(hw["disks"]):
        line, keys = lines[index] if index < len(lines) else (None, {})
        if not isinstance(item, dict) or item.get("id") in (None, ""):
            raise InputError(f"disk #{index + 1} needs an 'id'", source=source, line=line)
        disk_id = str(item["id"])
        if disk_id in seen:
            raise InputError(f"duplicate disk id {disk_id!r}", source=source, line=line)
        seen.add(disk_id)
        size = _number(
            item.get("size", 0), f"disk {disk_id!r}: size", source, keys.get("size", line)
        )
        disks.append(
            Disk(
                disk_id=disk_id,
                size_mib=math.floor(size),
                size_given=size,
                path=_opt_str(item.get("path")),
                dev=_opt_str(item.get("dev")),
                disk_type=_opt_str(item.get("type")),
            )
        )
    if not disks:
        raise InputError("hardware info lists no disks", source=source)
    return tuple(disks)


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _render(value: Any, hw: Any, sandbox: YaqlSandbox, where: str, source: str, line: int | None):
    """Evaluate every ``yaql=`` string at any depth (bareon-allocator renders all values)."""
    expression = yaql_expression(value)
    if expression is not None:
        try:
            return sandbox.evaluate(expression, hw)
        except YaqlError as err:
            quoted = expression if len(expression) <= 80 else expression[:60] + "..."
            raise InputError(
                f"yaql error in {where}, expression {quoted!r}: {err.reason}",
                source=source,
                line=line,
            ) from None
    if isinstance(value, list):
        return [_render(v, hw, sandbox, where, source, line) for v in value]
    if isinstance(value, dict):
        return {k: _render(v, hw, sandbox, f"{where}.{k}", source, line) for k, v in value.items()}
    return value


def _read_schema(
    schema: list,
    lines: list[tuple[int | None, dict[str, int]]],
    hw: Any,
    disks: tuple[Disk, ...],
    source: str,
    sandbox: YaqlSandbox,
) -> dict[str, Any]:
    """The keyword arguments of PartitionProblem read from the schema list."""
    disk_ids = {d.disk_id for d in disks}
    notes: list[str] = []
    spaces: list[Space] = []
    containers: list[tuple[str, list[str], int | None]] = []
    seen: set[str] = set()
    for index, raw in enumerate(schema):
        line, key_lines = lines[index] if index < len(lines) else (None, {})
        if not isinstance(raw, dict):
            raise InputError(f"space #{index + 1} must be a mapping", source=source, line=line)
        raw_id = raw.get("id")
        label = (
            f"space {raw_id!r}"
            if raw_id is not None and yaql_expression(raw_id) is None
            else (f"space #{index + 1}")
        )
        try:
            item = {
                key: _render(
                    value, hw, sandbox, f"{label}, key {key!r}", source, key_lines.get(key, line)
                )
                for key, value in raw.items()
            }
        except RecursionError:  # a value nested almost as deep as the YAML reader allows
            raise InputError(f"{label}: {NESTING_MESSAGE}", source=source, line=line) from None
        if item.get("id") in (None, ""):
            raise InputError(f"space #{index + 1} needs an 'id'", source=source, line=line)
        space_id = str(item["id"])
        if space_id == "unallocated":
            raise InputError("the space id 'unallocated' is reserved", source=source, line=line)
        if space_id in seen:
            raise InputError(f"duplicate space id {space_id!r}", source=source, line=line)
        seen.add(space_id)
        if "type" not in item:
            raise InputError(f"space {space_id!r} needs a 'type'", source=source, line=line)
        kind = str(item["type"])
        for key in item:
            if key not in KNOWN_KEYS:
                notes.append(f"space {space_id!r}: key {key!r} is not used for sizing")
        if kind in CONTAINER_TYPES:
            members = _contains(
                item.get("contains"), space_id, source, key_lines.get("contains", line)
            )
            containers.append((space_id, members, line))
            continue
        if kind not in ELASTIC_TYPES:
            notes.append(f"space {space_id!r} of type {kind!r} ignored (only lv, partition, vg)")
            continue

        size, min_size, max_size = (
            _optional_number(item, key, space_id, source, key_lines.get(key, line))
            for key in ("size", "min_size", "max_size")
        )
        if size is not None:
            min_size = max_size = size
        min_size = min_size or 0.0
        min_mib = math.ceil(min_size)
        max_mib = None if max_size is None else math.floor(max_size)
        if size is not None and size != math.floor(size):
            min_mib = max_mib = math.ceil(size)
            notes.append(f"space {space_id!r}: size {size:g} rounded up to {min_mib} MiB")
        elif min_mib != min_size:
            notes.append(f"space {space_id!r}: min_size {min_size:g} rounded up to {min_mib} MiB")
        if max_size is not None and max_mib != max_size and size is None:
            notes.append(f"space {space_id!r}: max_size {max_size:g} rounded down to {max_mib} MiB")
        if max_mib is not None and min_mib > max_mib:
            raise InputError(
                f"space {space_id!r}: min_size {min_mib} exceeds max_size {max_mib}",
                source=source,
                line=line,
            )
        weight_raw = item.get("weight", 1)
        weight_raw = 1 if weight_raw is None else weight_raw
        weight = exact_weight(
            _number(
                weight_raw,
                f"space {space_id!r}: weight",
                source,
                key_lines.get("weight", line),
                MAX_QUANTITY,
            )
        )
        best = _best_disks(
            item.get("best_with_disks"),
            disk_ids,
            space_id,
            source,
            key_lines.get("best_with_disks", line),
        )
        spaces.append(
            Space(
                space_id=space_id,
                kind=ELASTIC_TYPES[kind],
                min_mib=min_mib,
                max_mib=max_mib,
                weight=weight,
                best_disks=best,
                none_order=bool(item.get("none_order", False)),
                mount=_opt_str(item.get("mount")),
                fs_type=_opt_str(item.get("fs_type")),
                min_given=float(min_size),
                max_given=None if max_size is None else float(max_size),
            )
        )
    vgs = _volume_groups(containers, spaces, source, notes)
    _weights_representable(tuple(spaces), disks, source)
    return {
        "disks": disks,
        "spaces": tuple(spaces),
        "vgs": vgs,
        "notes": tuple(notes),
        "source": source,
    }


def _optional_number(
    item: Mapping[str, Any], key: str, space_id: str, source: str, line: int | None
) -> float | None:
    value = item.get(key)
    if value is None:
        return None
    return _number(value, f"space {space_id!r}: {key}", source, line)


def _contains(value: Any, vg_id: str, source: str, line: int | None) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InputError(f"vg {vg_id!r}: 'contains' must be a list", source=source, line=line)
    out = []
    for member in value:
        if isinstance(member, dict) and "id" in member:
            out.append(str(member["id"]))
        elif isinstance(member, str | int):
            out.append(str(member))
        else:
            raise InputError(
                f"vg {vg_id!r}: 'contains' items must be ids or {{id: ...}}, got {member!r}",
                source=source,
                line=line,
            )
    return out


def _volume_groups(
    containers: list[tuple[str, list[str], int | None]],
    spaces: list[Space],
    source: str,
    notes: list[str],
) -> tuple[VolumeGroup, ...]:
    by_id = {s.space_id: s for s in spaces}
    owner: dict[str, str] = {}
    vgs = []
    for vg_id, members, line in containers:
        lvs = []
        for member in members:
            space = by_id.get(member)
            if space is None:
                notes.append(
                    f"vg {vg_id!r} contains {member!r}, which is not an lv space (ignored)"
                )
                continue
            if space.kind != "lv":
                raise InputError(
                    f"vg {vg_id!r} contains {member!r}, which is a partition, not an lv",
                    source=source,
                    line=line,
                )
            if member in owner:
                raise InputError(
                    f"lv {member!r} is in two volume groups ({owner[member]!r}, {vg_id!r})",
                    source=source,
                    line=line,
                )
            owner[member] = vg_id
            lvs.append(member)
        vgs.append(VolumeGroup(vg_id=vg_id, lv_ids=tuple(lvs)))
    return tuple(vgs)


def _best_disks(
    value: Any, disk_ids: set[str], space_id: str, source: str, line: int | None
) -> frozenset[str]:
    """Disk dicts (the original's form, from yaql) or disk ids; an empty list is no preference."""
    if value is None:
        return frozenset()
    if isinstance(value, dict | str):
        value = [value]
    if not isinstance(value, list):
        raise InputError(
            f"space {space_id!r}: best_with_disks must be a list of disks, got {value!r}",
            source=source,
            line=line,
        )
    out = set()
    for disk in value:
        disk_id = str(disk.get("id")) if isinstance(disk, dict) else str(disk)
        if disk_id not in disk_ids:
            raise InputError(
                f"space {space_id!r}: best_with_disks names unknown disk {disk_id!r}",
                source=source,
                line=line,
            )
        out.add(disk_id)
    return frozenset(out)


def problem_from_data(
    schema: Sequence[Any], hw: Mapping[str, Any], sandbox: YaqlSandbox | None = None
) -> PartitionProblem:
    """Build a problem from already-loaded data (tests, benchmarks)."""
    disks = _read_disks(dict(hw), "<hw_info>", None)
    parts = _read_schema(list(schema), [], dict(hw), disks, "<schema>", sandbox or YaqlSandbox())
    return PartitionProblem(**parts)


@dataclass(frozen=True)
class Overheads:
    """Fixed MiB a real install adds: LVM metadata per PV, and per disk (bios_grub, GPT lead)."""

    pv_mib: int = 0
    disk_mib: int = 0


# bareon-allocator models no overheads, so its fixtures reproduce only with zeros.
ALLOCATOR_OVERHEADS = Overheads(pv_mib=0, disk_mib=0)
# Bareon: 64 MiB lvm_meta_size per PV; a 24 MiB bios_grub partition per disk, which the
# PartitionScheme starts at 1 MiB (GPT header), so that form needs 1 MiB more.
BAREON_OVERHEADS = Overheads(pv_mib=64, disk_mib=25)
IRONIC_OVERHEADS = Overheads(pv_mib=64, disk_mib=24)
OVERHEADS_BY_FORMAT = {
    "allocator": ALLOCATOR_OVERHEADS,
    "bareon": BAREON_OVERHEADS,
    "ironic": IRONIC_OVERHEADS,
}


@dataclass(frozen=True)
class Layout:
    """Whole MiB of each space on each disk: sizes_mib[disk index][space index]."""

    sizes_mib: tuple[tuple[int, ...], ...]

    def total_mib(self, space_index: int) -> int:
        return sum(row[space_index] for row in self.sizes_mib)

    def pvs(self, problem: PartitionProblem) -> tuple[tuple[str, str], ...]:
        """(vg_id, disk_id) for every disk holding some MiB of one of the VG's LVs."""
        index = {s.space_id: i for i, s in enumerate(problem.spaces)}
        out = []
        for vg in problem.vgs:
            for d, disk in enumerate(problem.disks):
                if any(self.sizes_mib[d][index[lv]] > 0 for lv in vg.lv_ids):
                    out.append((vg.vg_id, disk.disk_id))
        return tuple(out)


@dataclass(frozen=True)
class FairGroup:
    """Spaces with equal (min, max, preferred disks): totals follow integer weights within 1 MiB."""

    space_indexes: tuple[int, ...]
    weights: tuple[int, ...]  # the spaces' weights scaled to coprime integers

    @property
    def weight_sum(self) -> int:
        return sum(self.weights)


def fairness_groups(problem: PartitionProblem) -> tuple[FairGroup, ...]:
    """bareon-allocator's grouping, minus fixed-size spaces (nothing to share) and weight 0."""
    return _fair_groups(problem.spaces)


def _fair_groups(spaces: Sequence[Space]) -> tuple[FairGroup, ...]:
    groups: dict[tuple, list[int]] = {}
    for index, space in enumerate(spaces):
        if space.fixed or space.weight == 0:
            continue
        key = (space.min_mib, space.max_mib, space.best_disks)
        groups.setdefault(key, []).append(index)
    out = []
    for members in groups.values():
        if len(members) < 2:
            continue
        fractions = [spaces[i].weight for i in members]
        scale = math.lcm(*(f.denominator for f in fractions))
        ints = [int(f * scale) for f in fractions]
        common = math.gcd(*ints)
        out.append(FairGroup(tuple(members), tuple(w // common for w in ints)))
    return tuple(out)


#: The fairness rows multiply a group's integer weight sum W by MiB totals up to the disks'
#: capacity C (docs/partition.md, "Fairness"): HiGHS computes in doubles and CP-SAT refuses a
#: row that may overflow, so W * C must stay within 2^53, where every integer is exact.
FAIR_PRODUCT_LIMIT = 2**53


def _weights_representable(spaces: Sequence[Space], disks: Sequence[Disk], source: str) -> None:
    """Refuse at reading the weights no solver can honour exactly (issue 40, item 1)."""
    capacity = max(1, sum(d.size_mib for d in disks))
    for group in _fair_groups(spaces):
        if group.weight_sum * capacity <= FAIR_PRODUCT_LIMIT:
            continue
        names = ", ".join(spaces[i].space_id for i in group.space_indexes)
        given = ", ".join(f"{float(spaces[i].weight):g}" for i in group.space_indexes)
        raise InputError(
            f"the weights ({given}) of spaces {names} scale to whole numbers summing to "
            f"{group.weight_sum}; that sum times the disks' {capacity} MiB passes 2^53, the "
            "largest the solvers compute exactly: give weights of a smaller ratio",
            source=source,
        )


def a002620(n: int) -> int:
    """Quarter-squares floor(n^2/4): 0, 0, 1, 2, 4, 6, 9, 12, ... (OEIS A002620)."""
    return n * n // 4


def space_order_weights(problem: PartitionProblem) -> tuple[int, ...]:
    """|S| - position: earlier spaces grow first; ``none_order`` spaces weigh 0."""
    n = len(problem.spaces)
    return tuple(0 if s.none_order else n - j for j, s in enumerate(problem.spaces))


def order_coefficients(problem: PartitionProblem) -> tuple[tuple[int, ...], ...]:
    """The original's order preference as integer weights, disk-major: the first (disk, space)
    pair weighs most.

    Slot k = d*|S| + s of K slots weighs A002620(K + 1 - k), a decreasing sequence whose
    steps shrink, so filling one space on one disk beats spreading (docs/partition.md, stage 5).
    ``none_order`` spaces weigh 0, like bareon-allocator's constant coefficient.
    """
    n_spaces = len(problem.spaces)
    slots = len(problem.disks) * n_spaces
    return tuple(
        tuple(
            0 if space.none_order else a002620(slots + 1 - (d * n_spaces + s))
            for s, space in enumerate(problem.spaces)
        )
        for d in range(len(problem.disks))
    )
