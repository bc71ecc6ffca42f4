"""Super-cluster operations at scale (docs/groups.md, "Figures").

    python benchmarks/bench_groups.py [--seeds 3] [--quick] [--greedy] [--hcheck]

Generated super clusters (tests/groups_gen.py): groups of mixed storage (ext and rbd pools,
drbd and plain, mixed), four node sizes, per-node fills drawn around each group's, instance
flavours from 1 to 16 GiB with small ones most common, an offline node still hosting
instances. Cases:

* n1: exact N+1 of every node of 1,000 nodes in 5 groups (`exalloc n1`), beside hcheck with
  --hcheck;
* redistribute and compress: 500 nodes / about 5,000 instances in 5 groups, one group
  unhealthy (an offline node hosting instances), one lightly filled; every group's compression
  is decided. Times are the whole command's: health (exact N+1 of every node), the problem's
  model, the master rounds and the exact checks; with --greedy the design's greedy baseline
  runs too.

Prints one Markdown table per case.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from groups_gen import FLAVOURS, GroupSpec, super_cluster  # noqa: E402

from model.backends.text import dump_text, parse_text  # noqa: E402
from model.groups import storage_of  # noqa: E402
from model.state import node_states  # noqa: E402
from programs.groups import verify  # noqa: E402
from solvers.strategies import groups as strategy  # noqa: E402
from solvers.strategies.n1 import check_cluster  # noqa: E402

# small instances are the most common (about 10 per node on average)
SMALL_MOSTLY = FLAVOURS[:1] * 3 + FLAVOURS[1:2] * 3 + FLAVOURS[2:3] * 2 + FLAVOURS[3:]

N1_GROUPS = (
    GroupSpec(200, "ext", "a", 0.7),
    GroupSpec(200, "rbd", "b", 0.8),
    GroupSpec(200, "lvm", None, 0.6),
    GroupSpec(200, "mixed", "a", 0.75, offline=1),
    GroupSpec(200, "drbd", None, 0.85),
)
SUPER_GROUPS = (
    GroupSpec(100, "ext", "a", 0.9, offline=1),  # unhealthy: an offline node hosts instances
    GroupSpec(100, "ext", "a", 0.6),
    GroupSpec(100, "mixed", "a", 0.55),
    GroupSpec(100, "lvm", None, 0.65),
    GroupSpec(100, "ext", "a", 0.3),  # lightly filled: the compression candidate
)


def _state(specs, seed: int):
    text = dump_text(super_cluster(seed, specs, flavours=SMALL_MOSTLY))
    return node_states(parse_text(text, f"seed {seed}")), text


def n1_case(seed: int, hcheck: bool) -> dict:
    state, text = _state(N1_GROUPS, seed)
    start = time.perf_counter()
    report = check_cluster(state)
    wall = time.perf_counter() - start
    verdicts = [v for g in report.groups for v in g.nodes]
    out = {
        "nodes": len(state.nodes),
        "instances": len(state.demands),
        "exact_s": wall,
        "not_evacuable": sum(1 for v in verdicts if v.evacuable is False),
        "undecided": sum(1 for v in verdicts if v.evacuable is None),
    }
    if hcheck:
        import tempfile

        from programs.n1 import hcheck_counts

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "cluster.data"
            path.write_text(text)
            start = time.perf_counter()
            counts = hcheck_counts(str(path))
            out["hcheck_s"] = time.perf_counter() - start
            out["hcheck_bad"] = sum(counts.values())
    return out


def super_case(seed: int, greedy: bool) -> dict:
    from model import groups_greedy

    state, _ = _state(SUPER_GROUPS, seed)
    storage = storage_of(state)
    out: dict = {"nodes": len(state.nodes), "instances": len(state.demands)}
    start = time.perf_counter()
    h = strategy.health(state, storage)
    out["health_s"] = time.perf_counter() - start
    start = time.perf_counter()
    r = strategy.redistribute(state, storage, known=h)
    out["redistribute_s"] = out["health_s"] + time.perf_counter() - start
    o = r.outcome
    if o is not None:
        verify(state, storage, o, "hard")
    out["redistribute"] = r.reason or (
        f"{o.status}, {_num(o.objective)} moves (bound {_num(o.bound)}), "
        f"{o.rounds} rounds, {o.scenarios} scenarios, {o.cuts} cuts; "
        f"build {o.build_s:.1f} / solve {o.solve_s:.1f} / check {o.check_s:.1f} s"
    )
    start = time.perf_counter()
    c = strategy.compress(state, storage, known=h)
    out["compress_s"] = out["health_s"] + time.perf_counter() - start
    parts = []
    for g, oc in c.groups.items():
        name = state.cluster.group(g).name
        if isinstance(oc, str):
            parts.append(f"{name}: no ({oc.split(':')[0]})")
            continue
        verify(state, storage, oc, "hard")
        moves = len(oc.plan.relocations) if oc.plan else 0
        answer = (
            "yes" if oc.status == "optimal" else ("no" if oc.status == "infeasible" else oc.status)
        )
        parts.append(f"{name}: {answer}" + (f" ({moves} moves)" if answer == "yes" else ""))
    out["compress"] = "; ".join(parts) + f"; best {c.best and state.cluster.group(c.best).name}"
    if greedy:
        start = time.perf_counter()
        g = groups_greedy.redistribute(state, storage)
        out["greedy_redistribute"] = f"{g.moves} moves, {g.groups}"
        out["greedy_redistribute_s"] = time.perf_counter() - start
        start = time.perf_counter()
        gc = groups_greedy.compress(state, storage)
        yes = [state.cluster.group(k).name for k, (_, why) in gc.items() if why is None]
        out["greedy_compress"] = f"candidates {len(gc)}, emptied {yes}"
        out["greedy_compress_s"] = time.perf_counter() - start
    return out


def _num(values) -> str:  # noqa: ANN001
    return ",".join("-" if v is None else f"{v:g}" for v in values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one seed, no n1 case")
    parser.add_argument("--greedy", action="store_true", help="also time the design's greedy")
    parser.add_argument("--hcheck", action="store_true", help="also run hcheck on the n1 case")
    args = parser.parse_args()
    seeds = range(1 if args.quick else args.seeds)
    if not args.quick:
        print("| n1: seed | nodes | instances | exalloc s | not evacuable | undecided | hcheck s |")
        print("|---|---|---|---|---|---|---|")
        for seed in seeds:
            r = n1_case(seed, args.hcheck)
            print(
                f"| {seed} | {r['nodes']} | {r['instances']} | {r['exact_s']:.1f} "
                f"| {r['not_evacuable']} | {r['undecided']} | {r.get('hcheck_s', '-')} |",
                flush=True,
            )
        print()
    print(
        "| seed | nodes | instances | health s | redistribute s | redistribute | compress s "
        "| compress (every group) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for seed in seeds:
        r = super_case(seed, args.greedy)
        print(
            f"| {seed} | {r['nodes']} | {r['instances']} | {r['health_s']:.1f} "
            f"| {r['redistribute_s']:.1f} | {r['redistribute']} | {r['compress_s']:.1f} "
            f"| {r['compress']} |",
            flush=True,
        )
        if args.greedy:
            print(
                f"|  | greedy |  |  | {r['greedy_redistribute_s']:.1f} "
                f"| {r['greedy_redistribute']} | {r['greedy_compress_s']:.1f} "
                f"| {r['greedy_compress']} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
