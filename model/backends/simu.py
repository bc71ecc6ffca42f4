"""htools' simulation backend (`--simulate SPEC`, Backend/Simu.hs in Ganeti 3.0): empty groups
of identical nodes, one group per SPEC, in place of the cluster a request or snapshot holds.

SPEC is `policy,count,disk,memory,cpus[,spindles[,exclusive_storage]]`: the policy by name
or as p/a/u, sizes with htools' units (`parseUnit`: MiB by default, m/g/t and MiB/GiB/TiB
binary, M/G/T and MB/GB/TB decimal, truncated to whole MiB). Group k is `group-0k`
(`fake-uuid-0k`); its nodes `node-0k-001`...; the first node of the first group is the master.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

from model.backends.text import read_int, reads_int
from model.cluster import ALLOC_POLICIES, DEFAULT_IPOLICY, Cluster, Node, NodeGroup
from model.errors import InputError

_ABBREVIATIONS = {"p": "preferred", "a": "last_resort", "u": "unallocable"}

#: Utils.parseUnitValue (not "assume binary"): MiB per unit
_BINARY = {"": Fraction(1), "MIB": Fraction(1), "GIB": Fraction(1024), "TIB": Fraction(1024**2)}
_DECIMAL_MB = Fraction(1000, 1024) ** 2


def parse_unit(text: str) -> int:
    """Utils.parseUnit: a whole number as Haskell reads an Int, optional spaces, an optional
    unit; MiB, truncated."""
    parsed = reads_int(text)
    if parsed is None:
        raise ValueError(f"Can't parse string '{text}'")
    value, unit = parsed[0], parsed[1].lstrip(" ")
    upper = unit.upper()
    if unit in ("m", "g", "t") or upper in _BINARY:
        scale = _BINARY[{"m": "MIB", "g": "GIB", "t": "TIB"}.get(unit, upper)]
    elif unit in ("M", "G", "T") or upper in ("MB", "GB", "TB"):
        scale = _DECIMAL_MB * 1000 ** ("MGT".index(upper[0]))
    else:
        raise ValueError(f"Unknown unit '{unit}'")
    return int(value * scale)  # truncate, as Haskell's `truncate`


def _group(index: int, spec: str) -> tuple[NodeGroup, list[Node]]:
    """Simu.createGroup: one group of `count` identical, empty nodes."""
    fields = spec.split(",")
    if len(fields) == 5:
        fields.append("1")
    if len(fields) == 6:
        fields.append("False")
    if len(fields) != 7:
        raise InputError(
            "--simulate: invalid cluster specification, expected 6 comma-separated sections"
            " (allocation policy, node count, disk size, memory size, number of CPUs, spindles)"
            f" but got {len(fields)}: '{spec}'"
        )
    policy_text, count_text, disk_text, memory_text, cpus_text, spindles_text, excl = fields
    policy = _ABBREVIATIONS.get(policy_text, policy_text)
    if policy not in ALLOC_POLICIES:
        raise InputError(f"--simulate {spec}: cannot parse the allocation policy '{policy_text}'")
    try:
        disk, memory = parse_unit(disk_text), parse_unit(memory_text)
    except ValueError as err:
        raise InputError(f"--simulate {spec}: disk or memory size: {err}") from None
    count, cpus, spindles = (
        _number(spec, what, text)
        for what, text in (
            ("node count", count_text),
            ("cpu count", cpus_text),
            ("spindles", spindles_text),
        )
    )
    if excl not in ("True", "False"):  # Haskell's `read :: Bool`
        raise InputError(
            f"--simulate {spec}: exclusive storage must be True or False, not '{excl}'"
        )
    uuid = f"fake-uuid-{index:02d}"
    group = NodeGroup(f"group-{index:02d}", uuid, policy, (), (), DEFAULT_IPOLICY)
    nodes = [
        Node(
            name=f"node-{index:02d}-{k:03d}",
            total_memory_mib=float(memory),
            node_memory_mib=0,
            free_memory_mib=memory,
            total_disk_mib=float(disk),
            free_disk_mib=disk,
            total_cpus=float(cpus),
            group_uuid=uuid,
            master=index == 1 and k == 1,
            spindles=spindles,
            exclusive_storage=excl == "True",
            free_spindles=0,
            reserved_cpus=1,
        )
        for k in range(1, count + 1)
    ]
    return group, nodes


def _number(spec: str, what: str, text: str) -> int:
    try:
        return read_int(text, what)
    except ValueError:
        raise InputError(f"--simulate {spec}: cannot parse the {what} '{text}'") from None


def simulated_cluster(specs: Sequence[str]) -> Cluster:
    """Simu.parseData: the groups of `specs`, no instances, htools' default policy."""
    groups, nodes = [], []
    for index, spec in enumerate(specs, start=1):
        group, members = _group(index, spec)
        groups.append(group)
        nodes.extend(members)
    return Cluster(tuple(groups), tuple(nodes), ())
