"""Small generated node-evacuations against every plan: is the joint answer the best one?

    python benchmarks/evacuate_brute.py FIRST_SEED LAST_SEED [--plans 3000]

For each node-evacuate that tests/htools_gen.py generates in the seed range, with at most
`--plans` plans (each instance staying or on any node or pair of its group not being
evacuated; drbd failovers of primary-only evacuations and requests spanning groups are
left out), every plan the checker passes and htools' steps make is tried
(tests/test_joint.py `_best_of_all`), and exalloc's answer (20 s) compared: the same number
of moves and the same score to 1e-6, and whether it claims optimal. Prints one line per
request and the counts docs/placement.md quotes; "WRONG" marks an answer that is not the
best plan.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import htools_gen as gen  # noqa: E402
from joint_status import status  # noqa: E402
from test_joint import _best_of_all, _evacuation_options, _score_after  # noqa: E402

from model.backends.iallocator import parse_request  # noqa: E402
from model.htools.evacuate import nodes_to_evacuate  # noqa: E402
from model.htools.requests import EVAC_MODES  # noqa: E402
from model.state import node_states  # noqa: E402
from solvers.options import SolverOptions  # noqa: E402
from solvers.strategies.iallocator import IAllocatorOptions, answer  # noqa: E402


def plans(text: str) -> int | None:
    """How many plans `_best_of_all` tries, or None when it does not apply."""
    inp = parse_request(text)
    state = node_states(inp.cluster)
    mode, names = inp.request.evac_mode, list(inp.request.instances)
    movable = [n for n in names if state.demands[n].disk_template not in ("plain", "file")]
    drbd = [n for n in movable if state.demands[n].disk_template == "drbd"]
    groups = {state.nodes[state.locations[n][0]].group_uuid for n in movable}
    if not movable or len(groups) > 1 or (mode == "primary-only" and drbd):
        return None
    evacuated = nodes_to_evacuate(state, EVAC_MODES[mode], names)
    count = 1
    for n in movable:
        count *= len(_evacuation_options(state, n, mode, evacuated))
    return count


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("first", type=int)
    p.add_argument("last", type=int)
    p.add_argument("--plans", type=int, default=3000)
    args = p.parse_args()
    options = IAllocatorOptions(solver=SolverOptions(time_limit=20))
    counts: collections.Counter = collections.Counter()
    for seed in range(args.first, args.last):
        data = gen.for_seed(seed)
        if data["request"]["type"] != "node-evacuate":
            continue
        text = gen.dumps(data)
        count = plans(text)
        if count is None or count > args.plans:
            continue
        inp = parse_request(text)
        state = node_states(inp.cluster)
        moves, score, _ = _best_of_all(text, state)
        response = json.loads(answer(inp, options).response)
        moved = len(response["result"][0])
        ours = _score_after(text, response) if moved else None
        best = moved == moves and (ours is None or abs(ours - score) < 1e-6)
        end = status(response)
        claim = end.startswith("optimal")
        counts["best plan" if best else "WRONG", end.split(",")[0]] += 1
        print(f"{seed:5d} {count:5d} plans, best {moves} moves {score:.6f}, ours {moved} "
              f"{'' if best else 'WRONG '}{'(claims optimal) ' if claim else ''}{end}",
              flush=True)  # fmt: skip
    for key, n in sorted(counts.items()):
        print(f"{n:4d} {key[0]}: {key[1]}")


if __name__ == "__main__":
    main()
