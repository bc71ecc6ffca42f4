"""What every reader accepts: one rule for the numbers and the names of all input formats.

htools reads numbers with Haskell's `read` and accepts what it gets: `1e400` becomes Infinity,
a 300-digit hexadecimal Int wraps modulo 2^64, a negative free memory is taken as it is, and
two instances may share a name (docs/reliability.md, "What htools accepts"). Such values make
no sense for a cluster, and they turn exact models into ones no solver can answer (a node with
`total_cpus = 1e308` kept HiGHS busy for minutes). So exalloc is stricter, in one place:

- every quantity is a finite number from 0 to its kind's limit: sizes in MiB (memory, disk)
  up to 2^40 MiB (1 EiB), counts and ratios (CPUs, spindles, an ispec's counts, vcpu and
  spindle ratios, CPU speed) up to 2^20, Bareon weights up to 2^53 (their products with the
  disks' sizes are checked apart, model.bareon.schema). Free amounts (free memory, disk,
  spindles) may be negative down to minus the limit: Ganeti reports an overcommitted node's
  free memory below 0 (lib/masterd/iallocator.py subtracts what instances may still claim
  from what the hypervisor reports free). The limits are what every model answers exactly
  with both solvers (issue 40, item 2; benchmarks/large_numbers.py sweeps 2^k through every
  problem): HiGHS's tolerances are relative, and past them it called a joint node-evacuate
  with one node's memory at 2^50 MiB, or an instance of 2^40 vCPUs, "unbounded" (the cluster
  score squares such ratios), and claimed a dedicated placement's lost vector (0, 0, 0) the
  checker computed as (1, 2, 3) at 2^50 MiB of disk; CP-SAT refuses bounds past 2^53;
- group uuids, node names and instance names are unique (htools accepts two instances of one
  name, as in two of Ganeti's test snapshots; exalloc's answers name instances, so it cannot),
  and each instance's secondary node agrees with its disk template (DRBD has one, other
  templates none, never the primary itself). Group names may repeat, as in Ganeti's test
  request hail-alloc-secondary.json: groups are found by uuid, and a lookup by an ambiguous
  name fails where it is made, as in htools.

Readers call `quantity_problem` at the point where they read a number, and `cluster_problem`
once the cluster is assembled, then word the answer with their file, line or key.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal

from model.cluster import MIRRORED_TEMPLATES, OCCURRENCE_MARK, Cluster, read_name
from model.errors import InputError

#: The largest size in MiB (memory, disk) a reader accepts: 2^40 MiB, 1 EiB (see above).
MAX_MIB = 2**40
#: The largest count or ratio a reader accepts (CPUs, spindles, ispec counts, ratios).
MAX_COUNT = 2**20
#: The largest quantity accepted anywhere (Bareon weights): 2^53, floats hold every integer
#: up to it.
MAX_QUANTITY = 2**53
_MAX_SHOWN = 24  # characters of a rejected literal quoted in a message


def quantity_problem(value: object, *, limit: int, signed: bool = False) -> str | None:
    """Why `value` is not an acceptable quantity, or None when it is: 0 <= value <= limit
    (MAX_MIB, MAX_COUNT or MAX_QUANTITY), or with `signed` (a free amount, which Ganeti
    reports below 0 when a node is overcommitted) -limit <= value <= limit."""
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        return "not a number"
    if isinstance(value, float | Decimal) and not math.isfinite(value):
        return "not a finite number"
    if value > limit:
        return f"larger than {power(limit)}"
    if value < 0 and not signed:
        return "negative"
    if value < -limit:
        return f"smaller than -{power(limit)}"
    return None


def power(limit: int) -> str:
    """A limit as messages write it: 2^40."""
    return f"2^{limit.bit_length() - 1}"


def shown(text: object) -> str:
    """A literal as a message quotes it: at most a couple dozen characters."""
    text = str(text)
    if len(text) <= _MAX_SHOWN:
        return text
    return f"{text[: _MAX_SHOWN - 6]}... ({len(text)} characters)"


def quantity_message(
    what: str, literal: object, problem: str, *, limit: int, signed: bool = False
) -> str:
    """`what LITERAL is PROBLEM` with the accepted range, the words every reader uses."""
    low = f"-{power(limit)}" if signed else "0"
    return f"{what} {shown(literal)} is {problem} (it must be from {low} to {power(limit)})"


#: Nesting of [ and { that the error path reports (Python's readers recurse once per level and
#: stop near 1,000, the recursion limit; nothing exalloc reads nests more than a few levels).
MAX_NESTING = 500
NESTING_MESSAGE = f"nested too deeply (more than {MAX_NESTING} levels of [ and {{)"


def deep_nesting_line(text: str, quotes: str = '"', limit: int = MAX_NESTING) -> int | None:
    """The 1-based line where brackets outside strings (opened by one of `quotes`) first nest
    deeper than `limit`: the error path of a reader that ran out of recursion."""
    depth = 0
    quote = ""
    escaped = False
    line = 1
    for char in text:
        if char == "\n":
            line += 1
        if quote:
            if escaped:
                escaped = False
            elif char == "\\" and quote == '"':
                escaped = True
            elif char == quote:
                quote = ""
        elif char in quotes:
            quote = char
        elif char in "[{":
            depth += 1
            if depth > limit:
                return line
        elif char in "]}":
            depth -= 1
    return None


@dataclass(frozen=True)
class ClusterProblem:
    """An inconsistency of an assembled cluster: which entity (its kind and position in the
    reader's order) and what is wrong with it."""

    kind: str  # "group", "node" or "instance"
    index: int
    message: str


def _first_duplicate(names: Iterable[str]) -> tuple[int, str] | None:
    seen: set[str] = set()
    for index, name in enumerate(names):
        if name in seen:
            return index, name
        seen.add(name)
    return None


def cluster_problem(cluster: Cluster) -> ClusterProblem | None:
    """The first duplicate name or inconsistent cross-reference in `cluster`, or None."""
    for kind, key, items in (
        ("group", "uuid", [g.uuid for g in cluster.groups]),
        ("node", "name", [n.name for n in cluster.nodes]),
        ("instance", "name", [i.name for i in cluster.instances]),
    ):
        duplicate = _first_duplicate(items)
        if duplicate is not None:
            index, name = duplicate
            return ClusterProblem(kind, index, f"duplicate {kind} {key} '{name}'")
    for index, inst in enumerate(cluster.instances):
        mirrored = inst.disk_template in MIRRORED_TEMPLATES
        if mirrored and not inst.secondary:
            message = f"instance {inst.name} uses {inst.disk_template} but has no secondary node"
            return ClusterProblem("instance", index, message)
        if inst.secondary and not mirrored:
            message = (
                f"instance {inst.name} uses {inst.disk_template}, which has no secondary node, "
                f"but names {inst.secondary} as its secondary"
            )
            return ClusterProblem("instance", index, message)
        if inst.secondary and inst.secondary == inst.primary:
            message = f"instance {inst.name} has the same primary and secondary node {inst.primary}"
            return ClusterProblem("instance", index, message)
    return None


def keyed_occurrences(names: Iterable[str]) -> tuple[list[str], tuple[str, ...]]:
    """Instance keys for names as read (a repeated name's second occurrence `NAME|2`, ...),
    and the repeated names, in reading order: htools keeps every instance of a name."""
    seen: dict[str, int] = {}
    keys = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        keys.append(name if seen[name] == 1 else f"{name}{OCCURRENCE_MARK}{seen[name]}")
    return keys, tuple(name for name, count in seen.items() if count > 1)


def refuse_ambiguous(ambiguous: Iterable[str], instances: Iterable[str], what: str) -> None:
    """InputError when `instances` (keys, as answers name them) holds one whose name the input
    gave to several instances: an answer naming it could not say which."""
    shared = set(ambiguous)
    if not shared:
        return
    for key in instances:
        name = read_name(key)
        if name in shared:
            raise InputError(
                f"the input names several instances '{name}': {what} would have to name one of "
                "them, and could not say which"
            )
