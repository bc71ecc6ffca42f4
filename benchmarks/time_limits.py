"""--time-limit against wall time on the largest benchmark inputs (issue 40, item 4).

    python benchmarks/time_limits.py [--limits 10,30] [--nodes 200] [--instances 50]
                                     [--only hail,space,balance,roll,normal] [--margin 5]

Each input is run as a user runs it, `python -m cli --json COMMAND --time-limit T` in a fresh
process, and the wall time is set beside the limit (`within`: at most the limit plus
`--margin` seconds, for Python's start-up and imports, 0.6 s idle, 3-5 s loaded), the
in-process answer time and the stages hail's --json reports (timing.stages). The inputs: the
drbd multi-allocate of docs/scale.md (50 instances on 200 dedicated nodes, tests/dedicated_gen.py,
seed of benchmarks/bench_hail.py), the heterogeneous 1,000-node allocate (drbd), a normal-group
multi-allocate of 50 mixed instances on 200 heterogeneous nodes (benchmarks/bench_joint.py),
`space` on bench_space's 1,000-node cluster, `balance` on bench_balance's 200-node group
(K = 5) and `roll --memory-aware` on bench_roll's 2,000-node cluster. A figure measured on a
loaded machine says so.
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
from roll_gen import RollSpec, generate  # noqa: E402

from benchmarks import bench_balance, bench_joint, bench_space  # noqa: E402
from benchmarks.bench_hail import heterogeneous  # noqa: E402
from model.backends.iallocator import parse_request  # noqa: E402
from model.backends.text import dump_text  # noqa: E402


def inputs(tmp: Path, n_nodes: int, n_instances: int) -> dict[str, tuple[list[str], Path]]:
    """label -> (the command before the file, the file)."""
    rng = random.Random(9000 + n_instances + 1)
    multi = gen.multi_allocate(
        rng, n_nodes, n_instances, template="drbd", odd_nodes=False, fits=True
    )
    rng = random.Random(1000 * 7 + 1 + 1000)
    hetero = heterogeneous(gen.allocate(rng, 1000, template="drbd", fits=True), rng)
    normal = bench_joint.multi(n_nodes, n_instances, 0)
    out: dict[str, tuple[list[str], Path]] = {}
    for name, doc in (
        (f"multi-allocate {n_instances} drbd on {n_nodes} dedicated nodes", multi),
        ("allocate drbd, heterogeneous 1,000 nodes", hetero),
        (f"multi-allocate {n_instances} mixed on {n_nodes} normal nodes", normal),
    ):
        path = tmp / f"request-{len(out)}.json"
        path.write_text(json.dumps(doc))
        out[name] = (["hail"], path)
    texts = {
        "space: 1,000 nodes (bench_space seed 0)": (
            ["space"],
            dump_text(bench_space.cluster_of(0, 1000)),
        ),
        "balance: 200 nodes, K = 5 (bench_balance seed 0)": (
            ["balance", "-l", "5"],
            dump_text(
                parse_request(json.dumps(bench_balance.group(0, 200, 0.25)), "bench").cluster
            ),
        ),
        "roll --memory-aware: 2,000 nodes (bench_roll seed 0)": (
            ["roll", "--memory-aware"],
            dump_text(
                generate(RollSpec(nodes=2000, instances=6000, drbd_share=0.8, offline=2, fill=0.7))
            ),
        ),
    }
    for name, (command, text) in texts.items():
        path = tmp / f"snapshot-{len(out)}.data"
        path.write_text(text)
        out[name] = ([*command, "-t"], path)
    return out


def run(command: list[str], path: Path, limit: float, margin: float) -> dict:
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "cli", "--json", *command, str(path), "--time-limit", str(limit)],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    wall = time.perf_counter() - start
    row = {
        "limit_s": limit,
        "wall_s": round(wall, 2),
        "within": wall <= limit + margin,
        "exit": done.returncode,
    }
    if done.returncode == 0 and command[0] == "hail":
        doc = json.loads(done.stdout)
        row["answer_s"] = round(doc["timing"]["answer_s"], 2)
        row["stages"] = {k: round(v, 2) for k, v in doc["timing"].get("stages", {}).items()}
        row["info"] = doc["response"]["info"][:90]
        row["solver_note"] = doc.get("solver_note", "")[:200]
    elif done.returncode == 0:
        row["note"] = (done.stderr.strip().splitlines() or [""])[-1][:140]
    else:
        row["error"] = (done.stderr.strip().splitlines() or [""])[-1][:140]
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--limits", default="10,30")
    p.add_argument("--nodes", type=int, default=200)
    p.add_argument("--instances", type=int, default=50)
    p.add_argument(
        "--only",
        default="",
        help="commands (hail,space,balance,roll) or words of the inputs' labels (normal) to run",
    )
    p.add_argument("--margin", type=float, default=5.0)
    args = p.parse_args()
    only = set(args.only.split(",")) - {""}
    with tempfile.TemporaryDirectory() as name:
        for label, (command, path) in inputs(Path(name), args.nodes, args.instances).items():
            if only and command[0] not in only and not any(w in label for w in only):
                continue
            for limit in (float(x) for x in args.limits.split(",") if x):
                row = run(command, path, limit, args.margin)
                print(json.dumps({"input": label, **row}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
