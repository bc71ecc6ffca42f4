"""Joint multi-allocate and node-evacuate against htools' one-by-one walk, on the generated
requests of tests/htools_gen.py.

    python benchmarks/sweep_joint.py FIRST_SEED LAST_SEED

Both answers use the exact global N+1 check (`--capacity-checks exact`); the one-by-one one is
htools' algorithm, the joint one solvers/strategies/joint.py. Prints one line per request
(instances, seconds each, placed or moved by each, status) and the counts docs/placement.md
quotes. Every answer passes the checker inside `answer`.
"""

from __future__ import annotations

import collections
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import htools_gen as gen  # noqa: E402

from model.backends.iallocator import parse_request  # noqa: E402
from solvers.strategies.iallocator import (  # noqa: E402
    IAllocatorOptions,
    answer,
    one_by_one_answer,
)

KINDS = ("multi-allocate", "node-evacuate", "change-group")


def acted(response: dict) -> int:
    return len(response["result"][0]) if response["success"] else 0


def main(first: int, last: int) -> None:
    counts: collections.Counter = collections.Counter()
    seconds: dict[str, list[float]] = collections.defaultdict(list)
    for seed in range(first, last):
        data = gen.for_seed(seed)
        kind = data["request"]["type"]
        if kind not in KINDS:
            continue
        text = gen.dumps(data)
        start = time.perf_counter()
        one = json.loads(one_by_one_answer(parse_request(text), IAllocatorOptions()).response)
        one_s = time.perf_counter() - start
        start = time.perf_counter()
        ans = answer(parse_request(text), IAllocatorOptions())
        joint, note = json.loads(ans.response), ans.note
        joint_s = time.perf_counter() - start
        seconds[kind].append(joint_s)
        won = "joint plan" in note
        more = acted(joint) - acted(one)
        # never fewer: the one-by-one plan is the joint answer's floor (a "fewer" is a bug)
        key = "FEWER" if more < 0 else "more" if more > 0 else "lower score" if won else "same"
        counts[kind, key] += 1
        status = note[:40] if won else ""
        print(
            f"{seed:5d} {kind:15s} n={len(data['request']['instances']):2d} "
            f"{one_s:6.2f}s {joint_s:6.2f}s {acted(one):2d} -> {acted(joint):2d} {status}",
            flush=True,
        )
    for (kind, key), count in sorted(counts.items()):
        print(f"{count:4d} {kind} {key}")
    for kind, times in sorted(seconds.items()):
        times.sort()
        print(
            f"{kind}: {len(times)} requests, joint seconds median {times[len(times) // 2]:.2f},"
            f" max {times[-1]:.2f}"
        )


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
