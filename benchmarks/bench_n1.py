"""Exact global N+1 (`exalloc n1`) beside the real hcheck, on heterogeneous generated clusters.

    python benchmarks/bench_n1.py [--seeds 3] [--quick]

Each case is a generated snapshot (model/generate.py) with mixed node sizes and instance shapes at
a given memory fill; exalloc decides every node (plan or proof), hcheck runs on the same file.
Prints a Markdown table: wall time of both, nodes hcheck cannot evacuate, nodes exalloc proves
non-evacuable, how exalloc decided (first fit / bound / MIP), and the MIP's build and solve time.
Figures go to docs/n1.md.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from model.backends.text import dump_text, parse_text  # noqa: E402
from model.errors import InputError  # noqa: E402
from model.generate import ClusterSpec, generate_cluster  # noqa: E402
from model.state import node_states  # noqa: E402
from programs.n1 import hcheck_counts  # noqa: E402
from solvers.strategies.n1 import MIP, check_cluster  # noqa: E402

# memory MiB, disk MiB, CPUs: four node sizes, as an operator's hardware generations
NODE_TYPES = (
    (32768, 512000, 8),
    (65536, 1048576, 16),
    (98304, 1048576, 24),
    (131072, 2097152, 32),
)
CASES = (
    # nodes, groups, templates, fill
    (200, 1, ("ext",), 0.80),
    (200, 1, ("ext",), 0.90),
    (200, 1, ("ext",), 0.95),
    (200, 1, ("ext", "plain", "drbd"), 0.90),
    (1000, 5, ("ext", "plain", "drbd"), 0.80),
    (1000, 5, ("ext", "plain", "drbd"), 0.92),
)


def hcheck(path: Path) -> tuple[int | None, float]:
    """hcheck's non-evacuable nodes over all groups, and its wall time."""
    if shutil.which("hcheck") is None:
        return None, 0.0
    start = time.perf_counter()
    try:
        counts = hcheck_counts(str(path))
    except InputError:
        return None, time.perf_counter() - start
    return sum(counts.values()), time.perf_counter() - start


def run_case(nodes: int, groups: int, templates: tuple[str, ...], fill: float, seed: int) -> dict:
    spec = ClusterSpec(
        nodes=nodes, groups=groups, node_types=NODE_TYPES, templates=templates, fill=fill
    )
    text = dump_text(generate_cluster(spec, seed))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cluster.data"
        path.write_text(text)
        greedy, greedy_s = hcheck(path)
        start = time.perf_counter()
        state = node_states(parse_text(text, str(path)))
        report = check_cluster(state, offline_targets=True)  # htools' semantics, to compare
        wall = time.perf_counter() - start
    verdicts = [v for g in report.groups for v in g.nodes]
    methods = Counter(v.method for v in verdicts)
    mips = [v for v in verdicts if v.method == MIP]
    return {
        "case": f"{nodes} nodes / {groups} groups, {','.join(templates)}, fill {fill}",
        "instances": len(state.demands),
        "seed": seed,
        "exalloc_s": wall,
        "hcheck_s": greedy_s,
        "hcheck_bad": greedy,
        "exact_bad": sum(1 for v in verdicts if v.evacuable is False),
        "undecided": sum(1 for v in verdicts if v.evacuable is None),
        "methods": dict(methods),
        "mip_build_s": sum(v.build_s for v in mips),
        "mip_solve_s": sum(v.solve_s for v in mips),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="the 200-node cases only")
    args = parser.parse_args()
    cases = [c for c in CASES if not args.quick or c[0] <= 200]
    print(
        "| case | instances | seed | exalloc s | hcheck s | hcheck: not evacuable "
        "| exalloc: not evacuable | undecided | decided by | MIP build / solve s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for case in cases:
        for seed in range(args.seeds):
            r = run_case(*case, seed)
            how = ", ".join(f"{k} {v}" for k, v in sorted(r["methods"].items()))
            print(
                f"| {r['case']} | {r['instances']} | {seed} | {r['exalloc_s']:.2f} "
                f"| {r['hcheck_s']:.2f} | {r['hcheck_bad']} | {r['exact_bad']} | {r['undecided']} "
                f"| {how} | {r['mip_build_s']:.2f} / {r['mip_solve_s']:.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
