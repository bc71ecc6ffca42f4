"""Write the snapshots of data/space/, data/balance/ and data/roll/ (docs/batch.md), seeded,
so that the same command writes the same bytes:

    python benchmarks/batch_data.py [DATA_DIR]

- space: DRBD groups of 5-8 nodes of four sizes (16-128 GiB), half their memory in use; the
  cluster policy is the group's with a 4 GiB / 40 GiB std spec and drbd first, so that
  hspace's defaults ask a real question (the generated files otherwise carry htools'
  built-in cluster policy: diskless, 128 MiB). exalloc places 2 more than hspace on each;
  seeds where hspace, which always runs its tiered phase too, answers in 1-3 s.
- balance: DRBD groups of 3-4 nodes, 15-20 % of memory in use, where hbal takes 1-2 steps;
  small enough that the least score within hbal's length is proven in seconds (docs/balance.md:
  from 10 nodes at K = 5 it is not, in 30 s). On one of them the exact 2 steps beat hbal's.
- roll: tests/roll_gen.py clusters of 10-12 nodes whose DRBD secondaries gather on one or
  two storage nodes, and one with secondaries at random. Under hroller's rules (the batch's
  question) hroller's count is the optimum on all three, as on the 86 other generated
  clusters tried while choosing them (6 gathered, 80 at random): exalloc's side is the proof.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from roll_gen import RollSpec, generate  # noqa: E402

from model.backends.text import dump_text  # noqa: E402
from model.cluster import ISpec  # noqa: E402
from model.generate import GENERATED_IPOLICY, ClusterSpec, generate_cluster  # noqa: E402

SPACE_TYPES = ((32768, 512000, 8), (65536, 1048576, 16), (131072, 2097152, 32), (16384, 204800, 4))
SPACE_POLICY = dataclasses.replace(
    GENERATED_IPOLICY,
    std=ISpec(4096, 1, 40960, 1, 1, 1),
    disk_templates=("drbd", "plain", "ext", "diskless"),
)
SPACE_SEEDS = (3, 4, 10)
BALANCE_SEEDS = (10, 16, 18)
ROLL_CASES = (
    ("gathered-1", RollSpec(nodes=10, instances=24, concentrated=1, tags=False, seed=0)),
    ("gathered-2", RollSpec(nodes=10, instances=24, concentrated=2, tags=False, seed=3)),
    ("random", RollSpec(nodes=12, instances=30, drbd_share=1.0, tags=False, seed=5)),
)


def main(data: Path) -> None:
    for seed in SPACE_SEEDS:
        spec = ClusterSpec(
            nodes=5 + seed % 4,
            templates=("drbd", "plain"),
            fill=0.5,
            node_types=SPACE_TYPES,
            ipolicy=SPACE_POLICY,
        )
        cluster = dataclasses.replace(generate_cluster(spec, seed), cluster_policy=SPACE_POLICY)
        _write(data / "space" / f"drbd-{len(cluster.nodes)}-nodes-{seed}.data", dump_text(cluster))
    for seed in BALANCE_SEEDS:
        spec = ClusterSpec(nodes=3 + seed % 3, templates=("drbd",), fill=0.15 + 0.05 * (seed % 3))
        cluster = generate_cluster(spec, seed)
        _write(
            data / "balance" / f"drbd-{len(cluster.nodes)}-nodes-{seed}.data", dump_text(cluster)
        )
    for name, spec in ROLL_CASES:
        _write(data / "roll" / f"{name}-{spec.nodes}-nodes.data", dump_text(generate(spec)))


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(path)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "data")
