"""How the proof "no 3 rounds" grows with the cluster (docs/roll.md, "Why 2,000 nodes at random
stay unproven").

    python benchmarks/bench_roll_sat.py [--nodes 400 600 800] [--seeds 2] [--time-limit 150]

For each generated cluster (bench_roll.py's random memory-aware family: secondaries at random,
three instances per node, 80 % drbd), the question the roll strategy asks first: the SAT
clauses of the conflicts alone (formulations/roll_sat.py) on the nodes left once those with
fewer than 3 conflicting nodes are peeled, 3 rounds, MiniSat, one thread. Prints the core's
size and edges, the answer (sat, unsat, or stopped at the limit) and the time.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from roll_gen import RollSpec, generate  # noqa: E402

from formulations.roll import layout_of  # noqa: E402
from formulations.roll_sat import build_clauses  # noqa: E402
from model.htools.hroller import RollerOptions, prelude  # noqa: E402
from model.roll import RollRules, largest_clique, peel, problem_of  # noqa: E402
from solvers.sat_backend import SatSession  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[400, 600, 800])
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--time-limit", type=float, default=150.0)
    args = parser.parse_args()
    print("| nodes | seed | core nodes | core conflicts | 3 rounds | SAT s |")
    print("|---|---|---|---|---|---|")
    for nodes in args.nodes:
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            spec = RollSpec(
                nodes=nodes, instances=3 * nodes, drbd_share=0.8, offline=2, fill=0.7, seed=seed
            )
            cluster = generate(spec)
            pre = prelude(cluster, RollerOptions())
            rules = RollRules(memory_aware=True)
            problem = problem_of(cluster, pre.considered_names, rules, pre.offline, pre.loaded)
            core = problem.restricted(peel(problem, 3)[0])
            clique = [v for v in largest_clique(problem) if v in set(core.nodes)]
            cnf = build_clauses(core, layout_of(core, clique, 3, 3))
            start = time.perf_counter()
            with SatSession(cnf.clauses) as session:
                answer = session.solve(args.time_limit)
            seconds = time.perf_counter() - start
            said = {True: "sat", False: "unsat", None: "stopped"}[answer.satisfiable]
            print(
                f"| {nodes} | {seed} | {len(core.nodes)} | {len(core.conflict_pairs)} "
                f"| {said} | {seconds:.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
