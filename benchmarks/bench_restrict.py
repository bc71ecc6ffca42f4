"""How the locked nodes reach the real hail: `restrict-to-nodes` (Ganeti 2.16+) or `offline`.

    python benchmarks/bench_restrict.py [--count 40] [--fills 0.4,0.5] [--seed 11]

For generated clusters (`exalloc generate`, normal groups, ext/plain/drbd instances, 8-40
nodes) and one allocate request each, half the nodes at random count as locked. The real hail
3.0.2 answers three times: with every node, with `restrict-to-nodes` = the locked nodes, and
with the unlocked nodes marked `offline: true` (Ganeti 2.7-2.15). Prints how many requests
each way places; docs/locking.md explains why the offline way fails (global N+1).
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HAIL = "/usr/lib/ganeti/iallocators/hail"


def hail(request: dict, scratch: Path) -> dict:
    path = scratch / "request.json"
    path.write_text(json.dumps(request))
    out = subprocess.run([HAIL, str(path)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=40)
    parser.add_argument("--fills", default="0.4,0.5")
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    print("| fill | requests | placed with every node | restrict-to-nodes | unlocked offline |")
    print("|---|---|---|---|---|")
    for fill in args.fills.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            scratch = Path(tmp)
            command = [
                "generate",
                "--out",
                str(scratch / "gen"),
                "--count",
                str(args.count),
                "--seed",
                str(args.seed),
                "--nodes",
                "8-40",
                "--fill",
                fill,
                "--requests",
                "allocate",
            ]
            subprocess.run(
                [sys.executable, "-m", "cli", *command], cwd=REPO, check=True, capture_output=True
            )
            rng = random.Random(1)
            placed = {"full": 0, "restrict": 0, "offline": 0}
            for path in sorted((scratch / "gen").glob("*.allocate.json")):
                request = json.loads(path.read_text())
                nodes = sorted(request["nodes"])
                locked = sorted(rng.sample(nodes, len(nodes) // 2))
                restricted = copy.deepcopy(request)
                restricted["request"]["restrict-to-nodes"] = locked
                offline = copy.deepcopy(request)
                for name in set(nodes) - set(locked):
                    offline["nodes"][name]["offline"] = True
                placed["full"] += hail(request, scratch)["success"]
                placed["restrict"] += hail(restricted, scratch)["success"]
                placed["offline"] += hail(offline, scratch)["success"]
        print(
            f"| {fill} | {args.count} | {placed['full']} | {placed['restrict']} | "
            f"{placed['offline']} |"
        )


if __name__ == "__main__":
    main()
