"""Benchmark `exalloc partition`: disks x spaces, Pyomo build and solve timed separately.

build_s and solve_s are wall-clock seconds; cpu_s is the process's CPU seconds for the whole
answer (build, HiGHS with one thread, check), which a busy shared machine inflates far less.

    python -m benchmarks.bench_partition --repeat 3     # 4, 24, 100 disks x 10, 40 spaces,
                                                        # formats allocator, bareon, ironic
    python -m benchmarks.bench_partition --solver cpsat --format bareon --disks 4

Instances are generated from a seed: a quarter of the disks are SSDs (457,862 MiB), the
rest HDDs (3,815,447 MiB); spaces are LVs in four VGs and partitions, a third with min/max
sizes, every fifth preferring SSDs, some with weights, so fairness groups and preferences
are exercised.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time

from model.bareon.schema import OVERHEADS_BY_FORMAT, PartitionProblem, problem_from_data
from solvers.options import SolverOptions
from solvers.strategies.partition import solve_layout


def instance(n_disks: int, n_spaces: int, seed: int = 0) -> PartitionProblem:
    """A reproducible server: disks and a dynamic schema of n_spaces spaces."""
    return problem_from_data(*instance_data(n_disks, n_spaces, seed))


def instance_data(n_disks: int, n_spaces: int, seed: int = 0) -> tuple[list[dict], dict]:
    """`instance`'s dynamic schema and hardware information, as the files `exalloc partition
    --schema --hw-info` reads (benchmarks/time_limits.py writes them)."""
    rng = random.Random(seed)
    disks = []
    for i in range(n_disks):
        ssd = i % 4 == 0
        disks.append(
            {
                "id": f"disk{i:03d}",
                "dev": f"/dev/sd{i:03d}",
                "type": "ssd" if ssd else "hdd",
                "size": 457862 if ssd else 3815447,
            }
        )
    vgs: dict[str, list[str]] = {f"vg{k}": [] for k in range(4)}
    schema: list[dict] = []
    for j in range(n_spaces):
        space: dict = {"id": f"space{j:02d}"}
        if j % 3 == 0:
            space["type"] = "partitions"
        else:
            space["type"] = "lv"
            vgs[f"vg{j % 4}"].append(space["id"])
        if j % 3 == 1:
            space["min_size"] = rng.choice([1024, 5120, 10240, 20480])
            space["max_size"] = space["min_size"] * rng.choice([2, 4, 10])
        elif j % 7 == 2:
            space["size"] = rng.choice([2048, 4096, 8192])
        if j % 5 == 4:
            space["best_with_disks"] = 'yaql=$.disks.where($.type = "ssd")'
        if j % 6 == 5:
            space["weight"] = rng.choice([0.5, 2, 3])
        schema.append(space)
    schema += [{"id": vg, "type": "vg", "contains": lvs} for vg, lvs in vgs.items() if lvs]
    return schema, {"ram": 65536, "disks": disks}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--solver", choices=("highs", "cpsat"), default="highs")
    parser.add_argument(
        "--format", choices=tuple(OVERHEADS_BY_FORMAT), nargs="*", default=list(OVERHEADS_BY_FORMAT)
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--disks", type=int, nargs="*", default=[4, 24, 100])
    parser.add_argument("--spaces", type=int, nargs="*", default=[10, 40])
    parser.add_argument("--time-limit", type=float, default=None)
    opts = parser.parse_args(argv)
    options = SolverOptions(solver=opts.solver, time_limit=opts.time_limit)
    print(f"solver={opts.solver} repeat={opts.repeat} (median seconds)")
    print(f"{'format':>9} {'disks':>5} {'spaces':>6} {'vars':>6} {'build_s':>8} {'solve_s':>8} "
          f"{'total_s':>8} {'cpu_s':>8} {'status':>8} {'unalloc':>8}")  # fmt: skip
    for output_format in opts.format:
        overheads = OVERHEADS_BY_FORMAT[output_format]
        for n_disks in opts.disks:
            for n_spaces in opts.spaces:
                problem = instance(n_disks, n_spaces)
                builds, solves, cpus, last = [], [], [], None
                for _ in range(opts.repeat):
                    cpu = time.process_time()
                    last = solve_layout(problem, overheads, options=options)
                    cpus.append(time.process_time() - cpu)
                    builds.append(last.build_s)
                    solves.append(last.solve_s)
                build, solve = statistics.median(builds), statistics.median(solves)
                print(
                    f"{output_format:>9} {n_disks:>5} {n_spaces:>6} {n_disks * n_spaces:>6} "
                    f"{build:>8.3f} {solve:>8.3f} {build + solve:>8.3f} "
                    f"{statistics.median(cpus):>8.3f} {last.status:>8} "
                    f"{last.check.unallocated_mib:>8}",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
