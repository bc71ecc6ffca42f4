"""`exalloc generate`: write seeded synthetic snapshots, IAllocator requests and Bareon pairs.

File names say what each file is, so `exalloc batch DIR` can classify them: `snap-NNNN.data`
(squeeze), `snap-NNNN.allocate.json` / `snap-NNNN.multi-allocate.json` (hail requests on the same
cluster), `bareon-NNNN.yaml` (a fixture-format schema + hardware pair, for partition), or with
`--bareon-split` a folder `bareon-NNNN/` with bareon-allocator's `schema.yaml` and `hw.yaml`.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from model.errors import InputError
from model.files import write_file
from model.generate import (
    DEDICATED_IPOLICY,
    GENERATED_IPOLICY,
    NODE_TYPES,
    TEMPLATES,
    ClusterSpec,
    generate_bareon,
    generate_cluster,
    generate_request,
)

REQUEST_KINDS = ("allocate", "multi-allocate")


@dataclass(frozen=True)
class GenerateReport:
    """What was written, one path a line (the paths are what `batch` takes next)."""

    out: str
    files: tuple[str, ...]
    counts: dict[str, int] = field(default_factory=dict)

    def text(self) -> str:
        summary = ", ".join(f"{n} {kind}" for kind, n in self.counts.items() if n)
        return f"wrote {len(self.files)} files to {self.out} ({summary or 'nothing'})\n"

    def to_json(self) -> dict[str, Any]:
        return {"out": self.out, "files": list(self.files), "counts": dict(self.counts)}


def parse_range(text: str, what: str) -> tuple[int, int]:
    """`8` or `4-16` (inclusive), so one run can cover several cluster sizes."""
    try:
        lo, _, hi = text.partition("-")
        low, high = int(lo), int(hi or lo)
    except ValueError:
        raise InputError(f"{what} must be N or LOW-HIGH, not {text!r}") from None
    if low < 1 or high < low:
        raise InputError(f"{what} range {text!r} is empty or below 1")
    return low, high


def parse_node_types(text: str) -> tuple[tuple[int, int, int], ...]:
    """`MEM:DISK:CPUS[,...]` in MiB, MiB and CPUs: the node sizes to draw from."""
    types = []
    for item in (t for t in text.split(",") if t):
        try:
            mem, dsk, cpu = (int(x) for x in item.split(":"))
        except ValueError:
            raise InputError(f"--node-types takes MEM:DISK:CPUS[,...], not {item!r}") from None
        if min(mem, dsk, cpu) < 1:
            raise InputError(f"--node-types {item!r}: sizes must be positive")
        types.append((mem, dsk, cpu))
    if not types:
        raise InputError("--node-types is empty")
    return tuple(types)


def _templates(text: str) -> tuple[str, ...]:
    names = tuple(t for t in text.split(",") if t)
    bad = [t for t in names if t not in TEMPLATES]
    if bad or not names:
        raise InputError(f"--templates takes a comma list of {','.join(TEMPLATES)}, not {text!r}")
    return names


def _write(path: Path, text: str) -> None:
    """Atomically (model.files): a batch never reads a half-written input."""
    write_file(path, text)


def run(args: Any) -> GenerateReport:
    if args.count < 0 or args.bareon < 0:
        raise InputError("--count and --bareon must not be negative")
    nodes = parse_range(args.nodes, "--nodes")
    node_types = parse_node_types(args.node_types) if args.node_types else NODE_TYPES
    templates = _templates(args.templates)
    requests = tuple(r for r in args.requests.split(",") if r) if args.requests != "none" else ()
    bad = [r for r in requests if r not in REQUEST_KINDS]
    if bad:
        raise InputError(f"--requests takes allocate,multi-allocate or none, not {args.requests!r}")
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"cannot create {out}: {err.strerror}") from None
    from model.backends.text import dump_text

    rng = random.Random(args.seed)
    files: list[str] = []
    counts = {"snapshots": 0, "requests": 0, "bareon": 0}
    for k in range(args.count):
        seed = rng.getrandbits(32)
        n = rng.randint(*nodes)
        spec = ClusterSpec(
            nodes=n,
            groups=min(args.groups, n),
            node_types=node_types,
            templates=("plain",) if args.exclusive_storage else templates,
            exclusive_storage=args.exclusive_storage,
            ipolicy=DEDICATED_IPOLICY if args.exclusive_storage else GENERATED_IPOLICY,
            fill=args.fill,
            standby=min(args.standby, n - 1),
        )
        cluster = generate_cluster(spec, seed)
        path = out / f"snap-{k:04d}.data"
        _write(path, dump_text(cluster))
        files.append(str(path))
        counts["snapshots"] += 1
        for j, kind in enumerate(requests):
            request = generate_request(cluster, seed + j + 1, kind, count=args.multi_count)
            path = out / f"snap-{k:04d}.{kind}.json"
            _write(path, json.dumps(request, indent=1) + "\n")
            files.append(str(path))
            counts["requests"] += 1
    split = args.bareon_split
    for k in range(args.bareon):
        doc = generate_bareon(rng.getrandbits(32), args.bareon_disks, args.bareon_spaces)
        if split:  # bareon-allocator's own two files, alone in a folder so they pair up
            folder = out / f"bareon-{k:04d}"
            try:
                folder.mkdir(exist_ok=True)
            except OSError as err:
                raise InputError(f"cannot create {folder}: {err.strerror}") from None
            for name, part in (("schema.yaml", doc["dynamic_schema"]), ("hw.yaml", doc["hw_info"])):
                _write(folder / name, yaml.safe_dump(part, sort_keys=False))
                files.append(str(folder / name))
        else:
            path = out / f"bareon-{k:04d}.yaml"
            _write(path, yaml.safe_dump(doc, sort_keys=False))
            files.append(str(path))
        counts["bareon"] += 1
    return GenerateReport(out=str(out), files=tuple(files), counts=counts)
