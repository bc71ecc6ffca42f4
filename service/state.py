"""The live allocation service's data: creation requests, committed creations, the live cluster.

Pure and immutable (docs/locking.md, "The live allocation service"):

* `CreateSpec`: what `exalloc create` asks for, validated the way Ganeti's opcode and
  iallocator request builder see it (`required_nodes` 2 for drbd, `disk_space_total` with
  128 MiB of drbd metadata per disk); `parse_create` turns a request object into one or
  raises BadRequestError naming the key and what is wrong.
* `Creation`: one committed creation as the journal stores it (its request id makes a
  resubmission after a lost answer idempotent).
* `LiveCluster`: the loaded snapshot plus the committed creations, in commit order; the
  current `Cluster` is what `-S` writes and what the allocator sees.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from itertools import zip_longest
from typing import Any

from model.backends.iallocator import AllocateRequest, new_instance
from model.check import CheckReport, check_allocation
from model.cluster import DISK_TEMPLATES, MIRRORED_TEMPLATES, Cluster, Disk, Instance
from model.dedicated import allocation_vector
from model.errors import BadRequestError, InputError
from model.resources import FailMode
from model.score import cluster_score
from model.state import node_states, unique_instance_names

#: Ganeti's DRBD metadata per disk (Constants.hs drbdMetaSize), counted in disk_space_total.
DRBD_META_MIB = 128
#: Ganeti's maximum number of disks of an instance (constants.MAX_DISKS).
MAX_DISKS = 16
#: Longest wait a request may ask for (holds and lock timeouts), one hour.
MAX_WAIT_S = 3600.0
#: Instance names: host-name characters only (the text format separates fields with `|`).
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}")
#: Templates that keep no disk on the nodes (Ganeti's ComputeDiskSize counts 0 for them).
NO_DISK_SPACE_TEMPLATES = frozenset({"diskless", "blockdev"})


@dataclass(frozen=True)
class CreateSpec:
    """One instance to create, as Ganeti's OpInstanceCreate with an iallocator asks it."""

    name: str
    template: str
    memory_mib: int
    disks_mib: tuple[int, ...]
    disk_spindles: tuple[int, ...]
    vcpus: int
    spindle_use: int = 1

    @property
    def required_nodes(self) -> int:
        """2 for internally mirrored templates (drbd), else 1 (IAReqInstanceAlloc)."""
        return 2 if self.template in MIRRORED_TEMPLATES else 1

    @property
    def disk_space_total_mib(self) -> int:
        """Ganeti's ComputeDiskSize: the disks, plus DRBD metadata per disk for drbd."""
        if self.template in NO_DISK_SPACE_TEMPLATES:
            return 0
        extra = DRBD_META_MIB if self.template in MIRRORED_TEMPLATES else 0
        return sum(size + extra for size in self.disks_mib)

    def allocate_request(self, restrict_to_nodes: tuple[str, ...] | None) -> AllocateRequest:
        """The IAllocator allocate request; `restrict_to_nodes` as Ganeti 2.16+ sends the
        locked nodes (the others stay online, so global N+1 still sees them)."""
        return AllocateRequest(
            name=self.name,
            required_nodes=self.required_nodes,
            memory=self.memory_mib,
            disk_space_total=self.disk_space_total_mib,
            disks=tuple(
                Disk(size, spindles)
                for size, spindles in zip(self.disks_mib, self.disk_spindles, strict=True)
            ),
            disk_template=self.template,
            vcpus=self.vcpus,
            spindle_use=self.spindle_use,
            restrict_to_nodes=restrict_to_nodes,
        )

    def instance(self, primary: str = "", secondary: str | None = None) -> Instance:
        return new_instance(self.allocate_request(None), primary, secondary)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "template": self.template,
            "memory": self.memory_mib,
            "disks": list(self.disks_mib),
            "spindles": list(self.disk_spindles),
            "vcpus": self.vcpus,
            "spindle_use": self.spindle_use,
        }


@dataclass(frozen=True)
class AllocatorAnswer:
    """An iallocator's answer to one allocate request: success, the chosen nodes (primary
    first) and its info text (hail's `{"success", "result", "info"}`)."""

    success: bool
    nodes: tuple[str, ...]
    info: str


@dataclass(frozen=True)
class Limits:
    """What a request may ask for at most: no more than the whole cluster has."""

    memory_mib: int
    disk_mib: int
    vcpus: int
    spindles: int

    @classmethod
    def of(cls, cluster: Cluster) -> Limits:
        ratio = max((g.ipolicy.vcpu_ratio for g in cluster.groups), default=1.0)
        return cls(
            memory_mib=int(sum(n.total_memory_mib for n in cluster.nodes)),
            disk_mib=int(sum(n.total_disk_mib for n in cluster.nodes)),
            vcpus=max(1, math.floor(sum(n.total_cpus for n in cluster.nodes) * ratio)),
            spindles=max(1, sum(n.spindles for n in cluster.nodes)),
        )


def _bad(key: str, what: str) -> BadRequestError:
    return BadRequestError(f"{key}: {what}")


def _integer(obj: Mapping[str, Any], key: str, low: int, high: int, unit: str = "") -> int:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(key, f"must be an integer, not {_show(value)}")
    if value < low:
        raise _bad(key, f"must be at least {low}{unit}, not {value}{unit}")
    if value > high:
        raise _bad(key, f"{value}{unit} is more than the whole cluster has ({high}{unit})")
    return value


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def seconds(obj: Mapping[str, Any], key: str, default: float | None) -> float | None:
    """A duration in seconds, 0..MAX_WAIT_S (None allowed only where the default is None)."""
    if key not in obj:
        return default
    value = obj[key]
    if value is None and default is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _bad(key, f"must be a number of seconds, not {_show(value)}")
    if not 0 <= value <= MAX_WAIT_S:
        raise _bad(key, f"must be within 0..{MAX_WAIT_S:g} s, not {value}")
    return float(value)


CREATE_KEYS = frozenset({"name", "template", "memory", "disks", "spindles", "vcpus", "spindle_use"})


def parse_create(obj: Mapping[str, Any], limits: Limits) -> CreateSpec:
    """A CreateSpec from a request object's instance keys; BadRequestError otherwise."""
    name = obj.get("name")
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise _bad(
            "name",
            f"{_show(name)} is not an instance name (letters, digits, '.', '-', '_'; "
            f"at most 255 characters, starting with a letter or digit)",
        )
    template = obj.get("template")
    if template not in DISK_TEMPLATES:
        known = ", ".join(DISK_TEMPLATES)
        raise _bad("template", f"unknown disk template {_show(template)} ({known})")
    memory = _integer(obj, "memory", 1, limits.memory_mib, " MiB")
    disks_value = obj.get("disks", [])
    if not isinstance(disks_value, list):
        raise _bad("disks", f"must be a list of sizes in MiB, not {_show(disks_value)}")
    if template == "diskless":
        if disks_value:
            raise _bad("disks", "a diskless instance has no disks")
    elif not 1 <= len(disks_value) <= MAX_DISKS:
        count = len(disks_value)
        raise _bad("disks", f"a {template} instance needs 1..{MAX_DISKS} disks, not {count}")
    disks = tuple(
        _integer({f"disks[{k}]": v}, f"disks[{k}]", 1, limits.disk_mib, " MiB")
        for k, v in enumerate(disks_value)
    )
    spindles_value = obj.get("spindles", [1] * len(disks))
    if not isinstance(spindles_value, list) or len(spindles_value) != len(disks):
        raise _bad("spindles", f"must list one spindle count per disk ({len(disks)})")
    spindles = tuple(
        _integer({f"spindles[{k}]": v}, f"spindles[{k}]", 1, limits.spindles)
        for k, v in enumerate(spindles_value)
    )
    vcpus = _integer(obj, "vcpus", 1, limits.vcpus)
    spindle_use = _integer(obj, "spindle_use", 0, limits.spindles) if "spindle_use" in obj else 1
    return CreateSpec(name, template, memory, disks, spindles, vcpus, spindle_use)


@dataclass(frozen=True)
class Creation:
    """A committed creation, one journal record."""

    seq: int  # 1, 2, ... in commit order
    request_id: str
    spec: CreateSpec
    primary: str
    secondary: str | None
    committed_at: float  # seconds since the epoch

    @property
    def nodes(self) -> tuple[str, ...]:
        return (self.primary,) if self.secondary is None else (self.primary, self.secondary)

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "request_id": self.request_id,
            **self.spec.to_json(),
            "primary": self.primary,
            "secondary": self.secondary,
            "committed_at": self.committed_at,
        }

    @classmethod
    def from_json(cls, obj: Any) -> Creation:
        """The record back; InputError naming the first key that is wrong."""
        if not isinstance(obj, dict):
            raise InputError("a journal record must be a JSON object")
        try:
            spec = CreateSpec(
                name=obj["name"],
                template=obj["template"],
                memory_mib=obj["memory"],
                disks_mib=tuple(obj["disks"]),
                disk_spindles=tuple(obj["spindles"]),
                vcpus=obj["vcpus"],
                spindle_use=obj["spindle_use"],
            )
            record = cls(
                seq=obj["seq"],
                request_id=obj["request_id"],
                spec=spec,
                primary=obj["primary"],
                secondary=obj["secondary"],
                committed_at=obj["committed_at"],
            )
        except (KeyError, TypeError) as exc:
            raise InputError(f"journal record without a valid {exc}") from None
        return record


@dataclass(frozen=True)
class LiveCluster:
    """The snapshot the service started from and every creation committed since."""

    base: Cluster
    cluster: Cluster  # the current state (base + creations)
    creations: tuple[Creation, ...] = ()
    by_name: Mapping[str, Creation] = field(default_factory=dict)

    @classmethod
    def start(cls, base: Cluster) -> LiveCluster:
        unique_instance_names(base, "the allocation service")
        return cls(base, base)

    @property
    def seq(self) -> int:
        return len(self.creations)

    def with_creation(self, creation: Creation) -> LiveCluster:
        """The creation added with htools' strict node checks; InputError if it does not fit
        (a journal that does not match its snapshot) or its name or sequence is wrong."""
        name = creation.spec.name
        if name in self.cluster.instance_index:
            raise InputError(f"instance {name} exists already")
        if creation.seq != self.seq + 1:
            raise InputError(f"creation {name} has sequence {creation.seq}, not {self.seq + 1}")
        for node in creation.nodes:
            if node not in self.cluster.node_index:
                raise InputError(f"creation {name}: unknown node {node}")
        placed = node_states(self.cluster).place(
            creation.spec.instance(), creation.primary, creation.secondary
        )
        if isinstance(placed, FailMode):
            raise InputError(
                f"creation {name} does not fit on {'/'.join(creation.nodes)} ({placed.value})"
            )
        return replace(
            self,
            cluster=placed.snapshot(),
            creations=(*self.creations, creation),
            by_name={**self.by_name, name: creation},
        )

    def placements(self) -> list[tuple[Instance, str, str | None]]:
        return [(c.spec.instance(), c.primary, c.secondary) for c in self.creations]

    def check(self) -> CheckReport:
        """The independent checker on every creation, from the loaded snapshot alone."""
        return check_allocation(self.base, self.placements())

    @cached_property
    def dedicated(self) -> bool:
        """Every group with nodes is dedicated (exclusive storage): the lost-allocations
        vector is then the measure of what the creations cost."""
        used = {n.group_uuid for n in self.base.nodes}
        return all(self.base.is_dedicated(g) for g in self.base.groups if g.uuid in used)

    def allocation_vector(self) -> tuple[int, ...]:
        """The dedicated allocation vector summed over the online nodes (docs/hail.md)."""
        states = node_states(self.cluster)
        total: tuple[int, ...] = ()
        for name, st in states.nodes.items():
            if st.offline:
                continue
            vector = allocation_vector(st, states.ipolicy_of(name))
            total = tuple(a + b for a, b in zip_longest(total, vector, fillvalue=0))
        return total

    def score(self) -> float:
        return cluster_score(self.cluster)
