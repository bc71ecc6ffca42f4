"""Where the 200-node evacuation's spreads sit: each alone over whole plans, and together.

    python benchmarks/spreads_apart.py [--seeds 2] [--time-limit 30]

For each evacuation of benchmarks/bench_joint.py (200 nodes, 40 instances, mode all):
`exalloc hail --time-limit L` gives a plan and its group's placement problem. Per group of
twin metrics (model/spread.py `twin_groups`): the spread at that plan; the least spread of the
continuous relaxation (`least_spread`, the model's σ_lo); and the least spread of whole plans
for that metric alone, as far as single moves of a primary or a secondary from the plan find it
(capacities dropped, a pair's nodes kept apart: an upper bound of that least). Then the
weighted sum of these spreads at the plan beside the least of their sum over the continuous
relaxation (`joint_floors`, Frank-Wolfe). docs/placement.md quotes the result.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "tests"))

import bench_joint  # noqa: E402
from bound_from_best import _hail, _plan  # noqa: E402

from model.placement import SD_METRICS, PlacementProblem  # noqa: E402
from model.spread import joint_floors, least_spread, twin_groups  # noqa: E402
from solvers.strategies import joint_evacuate  # noqa: E402

Plan = Mapping[str, tuple[str, str | None]]


def _values(problem: PlacementProblem, plan: Plan) -> np.ndarray:
    """Every scored node's SD_METRICS values after the plan (node × metric)."""
    index = {n: i for i, n in enumerate(problem.scored)}
    values = np.array([problem.base_sd[n] for n in problem.scored], dtype=float)
    for name, (p, s) in plan.items():
        for node, changes in ((p, problem.primary_sd), (s, problem.secondary_sd)):
            if node in index and (name, node) in changes:
                values[index[node]] += changes[name, node]
    return values


def _alone(problem: PlacementProblem, plan: Plan, k: int) -> float:
    """Metric k's spread after single moves lower it no further, from `plan`."""
    index = {n: i for i, n in enumerate(problem.scored)}
    kinds = {i.name: i for i in problem.batch.instances}
    current = {name: list(spot) for name, spot in plan.items()}
    v = _values(problem, plan)[:, k]

    def change(name: str, node: str, role: str) -> float:
        table = problem.primary_sd if role == "p" else problem.secondary_sd
        return table[name, node][k] if (name, node) in table else 0.0

    better = True
    while better:
        better = False
        for name, spot in current.items():
            for slot, role in ((0, "p"), (1, "s")):
                now = spot[slot]
                if now is None:
                    continue
                kind = kinds[name]
                candidates = kind.primaries if role == "p" else kind.secondaries
                best, best_v = v.std(), None
                for c in candidates:
                    if c in (now, spot[1 - slot]):
                        continue
                    w = v.copy()
                    if now in index:
                        w[index[now]] -= change(name, now, role)
                    if c in index:
                        w[index[c]] += change(name, c, role)
                    if w.std() < best - 1e-12:
                        best, best_v, best_node = w.std(), w, c
                if best_v is not None:
                    v, spot[slot], better = best_v, best_node, True
    return float(v.std())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--time-limit", type=float, default=30.0)
    args = p.parse_args()
    captured: list[PlacementProblem] = []
    solve = joint_evacuate.place_jointly

    def capture(state, problem, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
        captured.append(problem)
        return solve(state, problem, *a, **k)

    joint_evacuate.place_jointly = capture
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.seeds):
            path = Path(tmp) / f"evacuate{seed}.json"
            path.write_text(json.dumps(bench_joint.evacuation(200, 40, seed)))
            captured.clear()
            _, response = _hail(path, args.time_limit)
            problem, plan = captured[-1], _plan(response)
            groups = twin_groups(problem)
            weights = [sum(SD_METRICS[k].weight for k in g) for g in groups]
            at = _values(problem, plan).std(axis=0)
            print(f"seed {seed}")
            print("| metrics | weight | at the plan | σ_lo (continuous) | alone, whole plans |")
            print("|---|---|---|---|---|")
            for g, w in zip(groups, weights, strict=True):
                lo = least_spread(problem, g[0])
                names = ", ".join(SD_METRICS[k].name for k in g)
                alone = _alone(problem, plan, g[0])
                low = "-" if lo is None else f"{lo:.5f}"
                print(f"| {names} | {w:g} | {at[g[0]]:.5f} | {low} | {alone:.5f} |", flush=True)
            together = sum(w * at[g[0]] for g, w in zip(groups, weights, strict=True))
            # a last group of weight 0: the run leaving it out has every spread together
            floor = joint_floors(problem, [*groups, groups[0]], [*weights, 0.0])[-1]
            print(f"weighted sum at the plan {together:.5f}, least together (continuous) "
                  f"{floor:.5f}\n", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
