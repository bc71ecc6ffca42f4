"""exalloc balance (exact) beside the real hbal on generated heterogeneous groups
(docs/balance.md, "Figures"). Not part of the test run.

    python benchmarks/bench_balance.py --nodes 40 --fill 0.25 --steps 5 --time-limit 30 --seeds 3
    python benchmarks/bench_balance.py --nodes 200 --steps 10 --time-limit 60 --seeds 1 --start port
    python benchmarks/bench_balance.py --nodes 40 --steps 5 --seeds 4 --cli --data DIR

Each group: machine shapes of tests/htools_gen.py, drbd, ext and rbd instances filling each
node's memory to a share drawn from up to `--fill`. The real hbal runs with `-l K` (its time
and score); exalloc's model starts from hbal's steps (what `exalloc balance` takes from
hbal's port, whose own time is not counted here) and reports its status, score, bound, gap,
and build and solve times apart. `--start port` takes the start from hbal's port instead
(model/htools/hbal.py, the same steps as hbal -l K) and does not run the real hbal: on 200
nodes hbal -l 10 takes longer than the whole benchmark should (hbal_s is then the port's).

`--cli` runs the command a user runs instead, `exalloc balance -t GROUP.data -l K
--time-limit T --json`, in its own process, so that the limit holds hbal's port too (and
Python's start-up and the reading of the file, which the wall time includes). It prints the
port's length (from the proof line), the status, score, bound and gap, the wall time and
the load average before and after each run (the machine is shared). `--data DIR` keeps each
group's text file there (GROUP.data in the docs: `seed-S-N-FILL.data`).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from model.backends.iallocator import parse_request  # noqa: E402
from model.backends.text import dump_text  # noqa: E402
from model.balance import BalanceProblem, step_of_code, steps_from_hbal  # noqa: E402
from model.check import check_balance  # noqa: E402
from model.state import node_states  # noqa: E402
from solvers.options import SolverOptions  # noqa: E402
from solvers.strategies.balance import balance, hbal_start  # noqa: E402
from tests import htools_gen as gen  # noqa: E402


def group(seed: int, nodes: int, fill: float) -> dict:
    fills = tuple(round(fill * k / 5, 3) for k in range(1, 6))
    data = gen.cluster(
        random.Random(seed),
        nodes,
        templates=("drbd", "drbd", "ext", "rbd"),
        odd=False,
        tags=False,
        policies=False,
        fills=fills,
    )
    return gen.allocate(random.Random(seed), data, "drbd")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=40)
    ap.add_argument("--fill", type=float, default=0.25)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--time-limit", type=float, default=30.0)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--start", choices=("hbal", "port"), default="hbal")
    ap.add_argument(
        "--cache",
        type=Path,
        default=None,
        help="directory keeping each group's start steps (hbal's port takes 10+ minutes on "
        "200 nodes): a rerun reads them instead (hbal_s is then the first run's)",
    )
    ap.add_argument(
        "--cli",
        action="store_true",
        help="run `exalloc balance -t GROUP.data -l K --time-limit T --json` on each group "
        "(hbal's port inside the limit) instead of balance() from a start",
    )
    ap.add_argument("--data", type=Path, default=None, help="directory keeping each group's file")
    args = ap.parse_args()
    if args.cli:
        cli_runs(args)
        return
    print(
        "seed nodes instances K  hbal_score  hbal_s  status    score       bound       gap"
        "      build_s solve_s total_s"
    )
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        cluster = parse_request(gen.dumps(group(seed, args.nodes, args.fill)), "bench").cluster
        with tempfile.NamedTemporaryFile("w", suffix=".data", delete=False) as f:
            f.write(dump_text(cluster))
        state = node_states(cluster)
        problem = BalanceProblem(state, cluster.groups[0].uuid, args.steps)
        t0 = time.perf_counter()
        cached = None
        if args.cache is not None:
            name = f"{args.start}-{seed}-{args.nodes}-{args.fill}-{args.steps}.json"
            cached = args.cache / name
        if cached is not None and cached.exists():
            saved = json.loads(cached.read_text())
            start = [step_of_code(name, code) for name, code in saved["steps"]]
            hbal_s = saved["hbal_s"]
        else:
            if args.start == "hbal":
                command = ["hbal", "-t", f.name, "-l", str(args.steps)]
                out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
                start = steps_from_hbal(out)
            else:
                start = list(hbal_start(problem, args.steps).steps)
            hbal_s = time.perf_counter() - t0
            if cached is not None:
                cached.parent.mkdir(parents=True, exist_ok=True)
                steps = [[s.instance, s.code] for s in start]
                cached.write_text(json.dumps({"steps": steps, "hbal_s": hbal_s}))
        Path(f.name).unlink()
        hbal_score = check_balance(problem, start).objectives["score"]
        t0 = time.perf_counter()
        ans = balance(problem, start, options=SolverOptions(time_limit=args.time_limit))
        total = time.perf_counter() - t0
        gap = "-" if ans.gap is None else f"{100 * ans.gap:.4f}%"
        bound = "-" if ans.bound is None else f"{ans.bound:.6f}"
        print(
            f"{seed:4d} {args.nodes:5d} {len(state.locations):9d} {args.steps:2d} "
            f"{hbal_score:11.6f} "
            f"{hbal_s:7.2f}  {ans.status:9s} {ans.score:11.6f} {bound:11s} {gap:8s} "
            f"{ans.build_s:7.2f} {ans.solve_s:7.2f} {total:7.2f}",
            flush=True,
        )


def cli_runs(args: argparse.Namespace) -> None:
    """The command line's figure: each group written as htools text and balanced by `exalloc
    balance` in a process of its own, timed from outside (the wall time a user waits)."""
    folder = args.data or Path(tempfile.mkdtemp(prefix="bench_balance-"))
    folder.mkdir(parents=True, exist_ok=True)
    print(
        "seed nodes instances K  port  status      score       bound       gap      wall_s"
        "  load_before load_after"
    )
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        path = folder / f"seed-{seed}-{args.nodes}-{args.fill}.data"
        if not path.exists():
            cluster = parse_request(gen.dumps(group(seed, args.nodes, args.fill)), "bench").cluster
            path.write_text(dump_text(cluster))
        instances = sum(1 for line in path.read_text().split("\n\n")[2].splitlines() if line)
        command = [sys.executable, "-m", "cli", "balance", "-t", str(path), "-l", str(args.steps)]
        command += ["--time-limit", str(args.time_limit), "--json"]
        load_before = os.getloadavg()[0]
        t0 = time.perf_counter()
        run = subprocess.run(
            command,
            capture_output=True,
            text=True,
            check=False,
            cwd=Path(__file__).resolve().parent.parent,
        )
        wall = time.perf_counter() - t0
        load_after = os.getloadavg()[0]
        if run.returncode != 0:
            print(f"{seed:4d} exit {run.returncode}: {run.stderr.strip()[-300:]}", flush=True)
            continue
        data = json.loads(run.stdout)
        port = re.search(r"hbal's port: (\d+) step", run.stderr)
        gap = "-" if data["gap"] is None else f"{100 * data['gap']:.4f}%"
        bound = "-" if data["bound"] is None else f"{data['bound']:.6f}"
        print(
            f"{seed:4d} {args.nodes:5d} {instances:9d} {args.steps:2d} "
            f"{port.group(1) if port else '?':>5s}  {data['status']:11s} "
            f"{data['score_after']:11.6f} {bound:11s} {gap:8s} {wall:7.2f}"
            f"  {load_before:11.2f} {load_after:10.2f}",
            flush=True,
        )
        for note in data["notes"]:
            print(f"     note: {note}", flush=True)


if __name__ == "__main__":
    main()
