"""Small generated multi-allocate and change-group requests against every plan: is the joint
answer the best one?

    python benchmarks/joint_brute.py FIRST_SEED LAST_SEED [--plans 3000] [--time-limit 20]

For each multi-allocate and change-group that tests/htools_gen.py generates in the seed range
(change-groups into one target group or several), every plan
`tests/joint_plans.py` makes is tried (each instance unplaced, or unmoved, or on any node or
pair it may use; the options the checker refuses on their own left out, since adding
instances only takes room away). Requests with more than `--plans` plans are skipped.
exalloc's answer (`--time-limit` seconds) is scored and judged the same way. One line per
request (seed, type, plans, best, ours, exalloc's status; `change-group*`: several target
groups) and the counts at the end. "WRONG"
marks an answer worse than the best plan, or better than every feasible plan (the line says
which test the answer fails), or one that claims "optimal" without being the best; "beyond"
an answer with no joint model (hail's) outside the plans tried. docs/placement.md quotes the
counts.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "benchmarks"))

import htools_gen as gen  # noqa: E402
from joint_plans import brute_of, judge, show  # noqa: E402
from joint_status import status  # noqa: E402

from model.backends.iallocator import parse_request  # noqa: E402
from solvers.options import SolverOptions  # noqa: E402
from solvers.strategies.iallocator import IAllocatorOptions, answer  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("first", type=int)
    p.add_argument("last", type=int)
    p.add_argument("--plans", type=int, default=3000)
    p.add_argument("--time-limit", type=float, default=20.0)
    args = p.parse_args()
    options = IAllocatorOptions(solver=SolverOptions(time_limit=args.time_limit))
    counts: collections.Counter = collections.Counter()
    for seed in range(args.first, args.last):
        data = gen.for_seed(seed)
        kind = data["request"]["type"]
        if kind not in ("multi-allocate", "change-group"):
            continue
        text = gen.dumps(data)
        brute = brute_of(text)
        if brute is None:
            counts[kind, "skipped: no target group"] += 1
            continue
        if len(getattr(brute, "targets", ())) > 1:
            kind = "change-group*"  # into several target groups
        count = brute.plans()
        if count > args.plans:
            counts[kind, f"skipped: over {args.plans} plans"] += 1
            continue
        began = time.perf_counter()
        best, best_plan, passed, asked = brute.best()
        brute_s = time.perf_counter() - began
        began = time.perf_counter()
        try:
            response = json.loads(answer(parse_request(text), options).response)
        except Exception as e:  # noqa: BLE001 - a crash is a finding, not the end of the run
            counts[kind, "CRASH"] += 1
            print(f"{seed:6d} {kind:14s} {count:5d} plans, best {show(best)}, "
                  f"CRASH {type(e).__name__}: {e}", flush=True)  # fmt: skip
            continue
        answer_s = time.perf_counter() - began
        plan = brute.ours(response)
        ours = brute.key(plan)
        verdict = judge(best, ours)
        end = status(response)
        claim = end.startswith("optimal")
        wrong = verdict == "worse" or (verdict == "better" and end != "no model")
        mark = {"best": "", "better": "beyond "}[verdict] if not wrong else "WRONG "
        outcome = "best plan" if verdict == "best" else mark.strip()
        counts[kind, f"{outcome}: {end.split(',')[0]}"] += 1
        print(f"{seed:6d} {kind:14s} {count:5d} plans ({passed} pass, {asked} N+1), "
              f"best {show(best)}, ours {show(ours)} {mark}"
              f"{'(claims optimal) ' if claim else ''}{end} [{brute_s:.1f}+{answer_s:.1f} s]",
              flush=True)  # fmt: skip
        if verdict != "best":
            print(f"       ours: {sorted(plan.items())}: {brute.why_not(plan)}")
            print(f"       best: {sorted(best_plan.items())}")
            print(f"       info: {response['info']}", flush=True)
    for key, n in sorted(counts.items()):
        print(f"{n:4d} {key[0]} {key[1]}")


if __name__ == "__main__":
    main()
