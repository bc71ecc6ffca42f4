"""How the joint model's answers end on generated requests: proven optimal, a gap, no score
bound, or no joint model at all (hail's answer stands).

    python benchmarks/joint_status.py [--evacuate 80] [--change-group 40] [--multi 40]
                                      [--time-limit 20]

Takes the first requests of each type that tests/htools_gen.py generates (seed 0 upwards),
answers each with `--capacity-checks exact` and the time limit, prints every request that is
not proven (type, seed, exalloc's status) and the counts docs/placement.md ("Limits") quotes.
Every answer passes the checker inside `answer`.
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import htools_gen as gen  # noqa: E402

from model.backends.iallocator import parse_request  # noqa: E402
from solvers.options import SolverOptions  # noqa: E402
from solvers.strategies.iallocator import IAllocatorOptions, answer  # noqa: E402


def status(note: str) -> str:
    """'no model', or exalloc's status as the answer's solver note reports it."""
    found = re.match(r"\w+: ([^;]*)", note)
    return found.group(1) if found else "no model"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--evacuate", type=int, default=80)
    p.add_argument("--change-group", type=int, default=40)
    p.add_argument("--multi", type=int, default=40)
    p.add_argument("--time-limit", type=float, default=20.0)
    args = p.parse_args()
    wanted = {
        "node-evacuate": args.evacuate,
        "change-group": args.change_group,
        "multi-allocate": args.multi,
    }
    options = IAllocatorOptions(solver=SolverOptions(time_limit=args.time_limit))
    taken: collections.Counter = collections.Counter()
    ends: collections.Counter = collections.Counter()
    seed = 0
    while any(taken[kind] < count for kind, count in wanted.items()):
        data = gen.for_seed(seed)
        kind = data["request"]["type"]
        if kind in wanted and taken[kind] < wanted[kind]:
            taken[kind] += 1
            end = status(answer(parse_request(gen.dumps(data)), options).note)
            ends[kind, end.split(",")[0] if "gap" in end else end] += 1
            if not end.startswith(("optimal", "no model")):
                print(f"{kind} seed {seed}: {end}", flush=True)
        seed += 1
    for (kind, end), count in sorted(ends.items()):
        print(f"{count:4d} {kind} {end}")


if __name__ == "__main__":
    main()
