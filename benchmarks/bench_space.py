"""exalloc space's exact standard and tiered allocation beside the real hspace (docs/space.md).

    python benchmarks/bench_space.py [--seeds N] [--templates drbd,plain,ext] [--no-hspace]
                                     [--sizes 200,1000] [--tiered] [--tier-limit S]
                                     [--max-tiers N]

Heterogeneous clusters of tests/htools_gen.py (four machine sizes, uneven fills of drbd, ext
and rbd instances, one group): 200 nodes (about 1,750 instances) and 1,000 nodes (about 5,000
instances). The new instances: 4 GiB, 50 GiB disk, 2 vCPUs (standard); tiered from 16 GiB,
200 GiB, 4 vCPUs. For exalloc: the model's build and solve times, the whole answer's time
(checker and binding report included, the cluster already loaded), the count and its status;
for hspace: its count and wall time on the same text snapshot (its tiered phase started from a
spec below every policy's minimum, so that it ends at once, for the standard rows).
"""

from __future__ import annotations

import argparse
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import htools_gen as gen  # noqa: E402

from model.backends.iallocator import parse_request  # noqa: E402
from model.backends.text import dump_text, parse_text  # noqa: E402
from model.cluster import Cluster  # noqa: E402
from model.space import Spec, default_options  # noqa: E402
from model.state import node_states  # noqa: E402
from solvers.options import SolverOptions  # noqa: E402
from solvers.strategies.space import standard  # noqa: E402
from solvers.strategies.space_tiered import tiered  # noqa: E402

STANDARD = Spec(4096, 51200, 2, 1)
TIER = Spec(16384, 204800, 4, 1)
ALLOCATED = re.compile(r"Normal \(fixed-size\) allocation results:\n  - +(\d+) instances allocated")
TIERED_LINE = re.compile(r"^  - +(\d+) instances of spec MEM (\d+), DSK (\d+), CPU (\d+)", re.M)


def cluster_of(seed: int, nodes: int) -> Cluster:
    rng = random.Random(seed)
    fills = (0.1, 0.2, 0.3, 0.4, 0.5) if nodes <= 200 else (0.05, 0.1, 0.15, 0.2)
    data = gen.cluster(
        rng,
        nodes,
        templates=("drbd", "drbd", "ext", "rbd"),
        odd=False,
        tags=False,
        policies=False,
        fills=fills,
    )
    data = gen.allocate(rng, data, "plain")
    return parse_text(dump_text(parse_request(gen.dumps(data)).cluster), f"seed {seed}")


def run_hspace(path: Path, template: str, spec: Spec, tier: Spec | None, timeout: float):
    """(count, seconds) of the standard phase, or of the tiered phase when `tier` is given
    (then count is (instances, memory handed out)); None on a time-out."""
    alloc = f"{spec.disk_mib},{spec.memory_mib},{spec.vcpus},{spec.spindles}"
    tiers = "1024,64,1" if tier is None else f"{tier.disk_mib},{tier.memory_mib},{tier.vcpus}"
    cmd = ["hspace", "-t", str(path), f"--disk-template={template}"]
    cmd += [f"--standard-alloc={alloc}", f"--tiered-alloc={tiers}"]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    seconds = time.perf_counter() - t0
    if tier is None:
        found = ALLOCATED.search(proc.stdout)
        return (int(found.group(1)) if found else None), seconds
    rows = TIERED_LINE.findall(proc.stdout.split("Standard (fixed-size)")[0])
    return (sum(int(k) for k, *_ in rows), sum(int(k) * int(m) for k, m, *_ in rows)), seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--templates", default="drbd,plain,ext")
    ap.add_argument("--sizes", default="200,1000")
    ap.add_argument("--no-hspace", action="store_true")
    ap.add_argument("--tiered", action="store_true", help="tiered rows (200 nodes) as well")
    ap.add_argument("--timeout", type=float, default=600.0, help="hspace's limit per run (s)")
    ap.add_argument("--tier-limit", type=float, default=30.0, help="exalloc's tiered budget (s)")
    ap.add_argument(
        "--max-tiers", type=int, default=1000, help="rungs of exalloc's tiered ladder at most"
    )
    args = ap.parse_args()
    print(
        "| case | instances | template | exalloc count | status | build s | solve s "
        "| answer s | hspace count | hspace s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        for size in (int(s) for s in args.sizes.split(",")):
            for seed in range(args.seeds):
                cluster = cluster_of(seed, size)
                path = Path(folder) / f"c{size}-{seed}.data"
                path.write_text(dump_text(cluster))
                state = node_states(cluster)
                for template in args.templates.split(","):
                    opts = default_options(cluster, disk_template=template)
                    t0 = time.perf_counter()
                    res = standard(state, STANDARD, opts)
                    answer_s = time.perf_counter() - t0
                    h = (
                        None
                        if args.no_hspace
                        else run_hspace(path, template, STANDARD, None, args.timeout)
                    )
                    theirs = "-" if h is None else f"{h[0]} | {h[1]:.1f}"
                    if h is None and not args.no_hspace:
                        theirs = f"- | > {args.timeout:.0f}"
                    print(
                        f"| {size} nodes, seed {seed} | {len(cluster.instances)} | {template} "
                        f"| {res.count} | {res.status} | {res.build_s:.2f} | {res.solve_s:.2f} "
                        f"| {answer_s:.2f} | {theirs} |",
                        flush=True,
                    )
                    if args.tiered and size <= 200:
                        t0 = time.perf_counter()
                        tr = tiered(
                            state, (TIER,), opts, SolverOptions(time_limit=args.tier_limit),
                            max_tiers=args.max_tiers,
                        )  # fmt: skip
                        tier_s = time.perf_counter() - t0
                        mem = tr.handed_out()["memory_mib"]
                        h = (
                            None
                            if args.no_hspace
                            else run_hspace(path, template, STANDARD, TIER, args.timeout)
                        )
                        theirs = "-" if h is None else f"{h[0][0]} ({h[0][1]} MiB) | {h[1]:.1f}"
                        status = (
                            "optimal"
                            if all(s.status == "optimal" for s in tr.stages)
                            else "feasible"
                        )
                        models = sum(1 for s in tr.stages if s.solves)
                        build = sum(s.build_s for s in tr.stages)
                        solve = sum(s.solve_s for s in tr.stages)
                        stopped = f", stopped by {tr.stopped}" if tr.stopped else ""
                        print(
                            f"| tiered, {size} nodes, seed {seed} | {len(cluster.instances)} "
                            f"| {template} | {tr.count} ({mem} MiB, {len(tr.spec_counts())} specs) "
                            f"| {status} per tier; {len(tr.stages)} rungs, {models} with a "
                            f"model{stopped} | {build:.2f} | {solve:.2f} | {tier_s:.2f} "
                            f"| {theirs} |",
                            flush=True,
                        )


if __name__ == "__main__":
    main()
