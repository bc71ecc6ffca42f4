"""`exalloc balance --across-groups` at scale (docs/balance.md, "Across groups", "Figures").

    python benchmarks/bench_balance_groups.py [--groups 3] [--nodes 10] [--steps 5]
        [--time-limit 30] [--seeds 2]

Generated super clusters (tests/groups_gen.py): GROUPS ext groups on one pool with NODES nodes
each, four node sizes, the groups filled unevenly (from 0.8 of memory down to 0.2), instance
flavours from 1 to 16 GiB. Each row: the exact answer within K migrations (the strategy, then
the independent checker), its score before and after, bound, gap and times (wall-clock).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from groups_gen import GroupSpec, super_cluster  # noqa: E402

from model.balance_groups import AcrossProblem, check_across_groups, movable  # noqa: E402
from model.groups import storage_of  # noqa: E402
from model.state import node_states  # noqa: E402
from solvers.options import SolverOptions  # noqa: E402
from solvers.strategies.balance_groups import balance_across  # noqa: E402


def row(seed: int, groups: int, nodes: int, steps: int, limit: float) -> str:
    fills = [0.8 - 0.6 * g / max(groups - 1, 1) for g in range(groups)]
    cluster = super_cluster(seed, tuple(GroupSpec(nodes, "ext", "a", f) for f in fills))
    state = node_states(cluster)
    problem = AcrossProblem(state, storage_of(state), steps)
    began = time.perf_counter()
    ans = balance_across(problem, options=SolverOptions(time_limit=limit))
    total = time.perf_counter() - began
    assert check_across_groups(problem, ans.relocations).ok
    gap = "-" if ans.gap is None else f"{100 * ans.gap:.4f}%"
    bound = "-" if ans.bound is None else f"{ans.bound:.6f}"
    return (
        f"{seed:>4} {groups:>6} {groups * nodes:>5} {len(state.locations):>9} "
        f"{len(movable(problem)):>6} {steps:>3} {ans.status:<9} {ans.score_before:>9.6f} "
        f"{ans.start_score:>9.6f} {ans.score:>9.6f} {bound:>9} {gap:>9} {ans.rounds:>6} "
        f"{ans.build_s:>7.2f} {ans.solve_s:>7.2f} {total:>7.2f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, default=3)
    ap.add_argument("--nodes", type=int, default=10, help="nodes per group")
    ap.add_argument("--steps", type=int, default=5, help="K, the most migrations")
    ap.add_argument("--time-limit", type=float, default=30.0)
    ap.add_argument("--seeds", type=int, default=2)
    a = ap.parse_args()
    print(
        "seed groups nodes instances movers  K status      before    greedy     after     bound"
        "       gap"
        " rounds build_s solve_s total_s"
    )
    for seed in range(a.seeds):
        print(row(seed, a.groups, a.nodes, a.steps, a.time_limit), flush=True)


if __name__ == "__main__":
    main()
