"""exact against greedy global N+1 on the generated requests of tests/htools_gen.py.

    python benchmarks/sweep_capacity_checks.py FIRST_SEED LAST_SEED

Counts, per request type, where the two answers agree and where exact places or moves more or
fewer instances (docs/hail.md quotes the counts for seeds 0-359). Every answer passes the
checker inside `answer`.
"""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import htools_gen as gen  # noqa: E402

from model.backends.iallocator import parse_request  # noqa: E402
from solvers.strategies.iallocator import IAllocatorOptions, answer  # noqa: E402

MOVED_LISTS = ("multi-allocate", "node-evacuate", "change-group")


def acted(kind: str, response: dict) -> int:
    """Instances placed or moved by an answer."""
    if not response["success"]:
        return 0
    return len(response["result"][0]) if kind in MOVED_LISTS else 1


def main(first: int, last: int) -> None:
    stats: collections.Counter = collections.Counter()
    examples: dict[str, list] = collections.defaultdict(list)
    for seed in range(first, last):
        data = gen.for_seed(seed)
        text = gen.dumps(data)
        kind = data["request"]["type"]
        greedy = answer(parse_request(text), IAllocatorOptions(capacity_checks="greedy"))
        exact = answer(parse_request(text), IAllocatorOptions(capacity_checks="exact"))
        g, e = json.loads(greedy.response), json.loads(exact.response)
        if g == e:
            stats[f"same {kind}"] += 1
            continue
        pg, pe = acted(kind, g), acted(kind, e)
        key = "exact more" if pe > pg else "exact fewer" if pe < pg else "same count, other nodes"
        stats[f"{key} {kind}"] += 1
        examples[key].append((seed, kind, g["info"][:150], e["info"][:150]))
    for key, count in sorted(stats.items()):
        print(f"{count:4d} {key}")
    for key, cases in examples.items():
        print("==", key)
        for case in cases[:4]:
            print("  ", case)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
