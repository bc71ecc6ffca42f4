"""--time-limit against wall time on the largest benchmark inputs (issue 40, item 4).

    python benchmarks/time_limits.py [--limits 10,30] [--nodes 200] [--instances 50]

Each input is run as a user runs it, `python -m cli --json hail --time-limit T` in a fresh
process, and the wall time is set beside the limit, the in-process answer time and the
stages --json reports (timing.stages). The inputs: the drbd multi-allocate of docs/scale.md
(50 instances on 200 dedicated nodes, tests/dedicated_gen.py, seed of benchmarks/bench_hail.py)
and the heterogeneous 1,000-node allocate (drbd). A figure measured on a loaded machine says so.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import dedicated_gen as gen  # noqa: E402

from benchmarks.bench_hail import heterogeneous  # noqa: E402


def inputs(tmp: Path, n_nodes: int, n_instances: int) -> dict[str, Path]:
    rng = random.Random(9000 + n_instances + 1)
    multi = gen.multi_allocate(
        rng, n_nodes, n_instances, template="drbd", odd_nodes=False, fits=True
    )
    rng = random.Random(1000 * 7 + 1 + 1000)
    hetero = heterogeneous(gen.allocate(rng, 1000, template="drbd", fits=True), rng)
    out = {}
    for name, doc in (
        (f"multi-allocate {n_instances} drbd on {n_nodes} nodes", multi),
        ("allocate drbd, heterogeneous 1,000 nodes", hetero),
    ):
        path = tmp / (name.split()[0] + f"-{len(out)}.json")
        path.write_text(json.dumps(doc))
        out[name] = path
    return out


def run(path: Path, limit: float) -> dict:
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "cli", "--json", "hail", "--time-limit", str(limit), str(path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    wall = time.perf_counter() - start
    row = {"limit_s": limit, "wall_s": round(wall, 2), "exit": done.returncode}
    if done.returncode == 0:
        doc = json.loads(done.stdout)
        row["answer_s"] = round(doc["timing"]["answer_s"], 2)
        row["stages"] = {k: round(v, 2) for k, v in doc["timing"].get("stages", {}).items()}
        row["info"] = doc["response"]["info"][:90]
    else:
        row["error"] = done.stderr.strip().splitlines()[-1][:120]
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--limits", default="10,30")
    p.add_argument("--nodes", type=int, default=200)
    p.add_argument("--instances", type=int, default=50)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as name:
        for label, path in inputs(Path(name), args.nodes, args.instances).items():
            for limit in (float(x) for x in args.limits.split(",") if x):
                print(json.dumps({"input": label, **run(path, limit)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
