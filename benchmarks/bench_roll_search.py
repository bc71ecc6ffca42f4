"""Does a local search find 3 rounds where the SAT relaxation cannot decide? (docs/roll.md, "Why
2,000 nodes at random stay unproven").

    python benchmarks/bench_roll_search.py [--nodes 2000] [--seeds 4] [--first-seed 0]
        [--time-limit 60] [--rounds 3]

For each generated cluster (bench_roll.py's random memory-aware family: secondaries at random,
three instances per node, 80 % drbd), the nodes left once those with fewer than 3 conflicting
nodes are peeled (`model.roll.peel`), searched by TabuCol with the receiving nodes' memory as
penalties (solvers/strategies/roll_search.py) for `--rounds` rounds within `--time-limit`
seconds. A search reaching penalty 0 has its rounds packed and the peeled nodes put back
(`complete_rounds`), and the plan is judged by the independent checker; with as many rounds as
the bound (the clique and memory bounds, 3 on this family) it would be proven optimal. Prints
the core, whether rounds were found, the lowest penalty seen, the moves and the time.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from roll_gen import RollSpec, generate  # noqa: E402

from model.htools.hroller import RollerOptions, prelude  # noqa: E402
from model.roll import RollRules, check_plan, peel, problem_of  # noqa: E402
from solvers.strategies.roll import complete_rounds  # noqa: E402
from solvers.strategies.roll_search import tabu_rounds  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(
        "| nodes | seed | core nodes | core conflicts | rounds | found | lowest penalty "
        "| moves | search s | plan |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    rules = RollRules(memory_aware=True)
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        n = args.nodes
        spec = RollSpec(nodes=n, instances=3 * n, drbd_share=0.8, offline=2, fill=0.7, seed=seed)
        cluster = generate(spec)
        pre = prelude(cluster, RollerOptions())
        problem = problem_of(cluster, pre.considered_names, rules, pre.offline, pre.loaded)
        kept, peeled = peel(problem, args.rounds)
        core = problem.restricted(kept)
        start = time.perf_counter()
        found = tabu_rounds(core, args.rounds, 10**12, seed=seed, deadline=start + args.time_limit)
        seconds = time.perf_counter() - start
        verdict = "-"
        if found.rounds is not None:
            done = complete_rounds(problem, found.rounds, peeled, args.rounds)
            if done is None:
                verdict = "does not pack"
            else:
                check_plan(cluster, pre.considered_names, rules, done, pre.offline)
                verdict = f"{len(done)} rounds, checked"
        print(
            f"| {n} | {seed} | {len(core.nodes)} | {len(core.conflict_pairs)} | {args.rounds} "
            f"| {'yes' if found.rounds is not None else 'no'} | {found.best} | {found.moves} "
            f"| {seconds:.2f} | {verdict} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
