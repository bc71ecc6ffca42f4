"""`exalloc space --move-existing` on generated clusters: how many more fit after moves.

    python benchmarks/sweep_space_moves.py FIRST_SEED LAST_SEED [--max-moves N] [--time-limit S]

The questions of tests/space_cases.py (drbd, plain and shared-storage templates in turn), each
answered without moves and after at most N of hbal's moves
(solvers/strategies/space_moves.py); prints per seed the counts, the status, the clusters
seen and solved, the seconds and the moves (docs/space.md, "Moving existing instances first").
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import space_cases as sc  # noqa: E402

from model.space_moves import MoveOptions  # noqa: E402
from model.state import node_states  # noqa: E402
from solvers.options import SolverOptions  # noqa: E402
from solvers.strategies.space_moves import with_moves  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("first", type=int)
    p.add_argument("last", type=int)
    p.add_argument("--max-moves", type=int, default=1)
    p.add_argument("--time-limit", type=float, default=60.0)
    a = p.parse_args()
    print("seed template nodes instances without with status clusters solved depth seconds moves")
    for seed in range(a.first, a.last):
        c = sc.case(seed)
        t = time.perf_counter()
        r = with_moves(
            node_states(c.cluster), c.spec, c.options, MoveOptions(a.max_moves),
            SolverOptions(time_limit=a.time_limit),
        )  # fmt: skip
        moves = "; ".join(f"{s.instance} {s.code}" for s in r.moves) or "-"
        print(
            seed, c.options.disk_template, len(c.cluster.nodes), len(c.cluster.instances),
            r.before, r.count, r.status, r.states, r.solved, r.depth,
            f"{time.perf_counter() - t:.1f}", moves, flush=True,
        )  # fmt: skip


if __name__ == "__main__":
    main()
