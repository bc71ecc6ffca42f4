"""`exalloc generate`: write seeded synthetic snapshots, IAllocator requests and Bareon pairs.

File names say what each file is, so `exalloc batch DIR` can classify them: `snap-NNNN.data`
(squeeze), `snap-NNNN.allocate.json` / `snap-NNNN.multi-allocate.json` (hail requests on the same
cluster), `bareon-NNNN.yaml` (a fixture-format schema + hardware pair, for partition), or with
`--bareon-split` a folder `bareon-NNNN/` with bareon-allocator's `schema.yaml` and `hw.yaml`.
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from model.errors import InputError, UsageError
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
        raise UsageError(f"{what} must be N or LOW-HIGH, not {text!r}") from None
    if low < 1 or high < low:
        raise UsageError(f"{what} range {text!r} is empty or below 1")
    return low, high


def parse_node_types(text: str) -> tuple[tuple[int, int, int], ...]:
    """`MEM:DISK:CPUS[,...]` in MiB, MiB and CPUs: the node sizes to draw from."""
    types = []
    for item in (t for t in text.split(",") if t):
        try:
            mem, dsk, cpu = (int(x) for x in item.split(":"))
        except ValueError:
            raise UsageError(f"--node-types takes MEM:DISK:CPUS[,...], not {item!r}") from None
        if min(mem, dsk, cpu) < 1:
            raise UsageError(f"--node-types {item!r}: sizes must be positive")
        types.append((mem, dsk, cpu))
    if not types:
        raise UsageError("--node-types is empty")
    return tuple(types)


def _templates(text: str) -> tuple[str, ...]:
    names = tuple(t for t in text.split(",") if t)
    bad = [t for t in names if t not in TEMPLATES]
    if bad or not names:
        raise UsageError(f"--templates takes a comma list of {','.join(TEMPLATES)}, not {text!r}")
    return names


def _write(path: Path, text: str) -> None:
    """Atomically (model.files): a batch never reads a half-written input."""
    write_file(path, text)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, metavar="DIR", help="folder to write into")
    parser.add_argument("--count", type=int, default=10, help="snapshots to write (default 10)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument(
        "--nodes", default="8", metavar="N|LOW-HIGH", help="nodes per snapshot (default 8)"
    )
    parser.add_argument("--groups", type=int, default=1, help="node groups (default 1)")
    parser.add_argument(
        "--node-types",
        dest="node_types",
        metavar="MEM:DISK:CPUS,...",
        help="node sizes to draw from, MiB:MiB:CPUs (default 32768:512000:8,"
        "65536:1048576:16,131072:2097152:32)",
    )
    parser.add_argument(
        "--templates",
        default="ext,plain,drbd",
        metavar="LIST",
        help="disk templates of the instances (default ext,plain,drbd)",
    )
    parser.add_argument(
        "--exclusive-storage",
        dest="exclusive_storage",
        action="store_true",
        help="dedicated nodes (exclusive storage, plain instances with spindles)",
    )
    parser.add_argument(
        "--fill", type=float, default=0.5, help="share of node memory in use, 0..1 (default 0.5)"
    )
    parser.add_argument(
        "--standby",
        type=int,
        default=0,
        metavar="N",
        help="offline nodes tagged htools:standby:auto (default 0)",
    )
    parser.add_argument(
        "--requests",
        default="allocate,multi-allocate",
        metavar="LIST",
        help="IAllocator requests per snapshot: allocate,multi-allocate or none "
        "(default allocate,multi-allocate)",
    )
    parser.add_argument(
        "--multi-count",
        dest="multi_count",
        type=int,
        default=3,
        metavar="N",
        help="instances per multi-allocate request (default 3)",
    )
    parser.add_argument(
        "--bareon", type=int, default=0, metavar="N", help="Bareon pairs to write (default 0)"
    )
    parser.add_argument(
        "--bareon-disks",
        dest="bareon_disks",
        type=int,
        default=3,
        metavar="N",
        help="disks of each generated Bareon machine (default 3)",
    )
    parser.add_argument(
        "--bareon-spaces",
        dest="bareon_spaces",
        type=int,
        default=5,
        metavar="N",
        help="spaces of each generated Bareon schema (default 5)",
    )
    parser.add_argument(
        "--bareon-split",
        dest="bareon_split",
        action="store_true",
        help="write each Bareon pair as schema.yaml + hw.yaml in its own folder",
    )


def run(args: Any) -> GenerateReport:
    if args.count < 0 or args.bareon < 0:
        raise UsageError("--count and --bareon must not be negative")
    nodes = parse_range(args.nodes, "--nodes")
    node_types = parse_node_types(args.node_types) if args.node_types else NODE_TYPES
    templates = _templates(args.templates)
    requests = tuple(r for r in args.requests.split(",") if r) if args.requests != "none" else ()
    bad = [r for r in requests if r not in REQUEST_KINDS]
    if bad:
        raise UsageError(f"--requests takes allocate,multi-allocate or none, not {args.requests!r}")
    try:  # every option is checked before the folder exists (issue 40, item 9)
        ClusterSpec(
            nodes=nodes[0],
            groups=min(args.groups, nodes[0]) if args.groups >= 1 else args.groups,
            node_types=node_types,
            templates=templates,
            fill=args.fill,
            standby=min(args.standby, nodes[0] - 1) if args.standby >= 0 else args.standby,
        ).validate()
    except InputError as err:
        raise UsageError(err.message) from None
    if args.multi_count < 1 or args.bareon_disks < 1 or args.bareon_spaces < 1:
        raise UsageError("--multi-count, --bareon-disks and --bareon-spaces must be at least 1")
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
