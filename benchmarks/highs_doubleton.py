"""HiGHS's doubleton-equation wrong bound, on the reduced round the regression test solves.

    python benchmarks/highs_doubleton.py [--full] [--presolve-off] [--derive]

tests/data/highs-doubleton-wrong-bound.mps.xz is the first score round of a 200-node evacuation
of 40 (benchmarks/bench_joint.py seed 1, written by HiGHS). tests/data/highs-doubleton-plan.npz
holds `plan`, HiGHS's optimum of that round with exalloc's presolve options (34.545575; the same
without presolve), and `fixed`, the integer columns the reduced round fixes at the plan's values
(a quarter of them: `np.random.default_rng(1).random(10283) < 0.25`, 2,550 columns). The reduced
round is a restriction of the round that still holds the plan, so its true optimum is the plan's
score too. Solves it (or, with --full, the whole round) with exalloc's presolve rules off
(solvers/highs_backend.py PRESOLVE_RULES_OFF: aggregator and doubleton equations) and with only
the aggregator off (doubleton equations on: the bad setting), one thread, seed 0, no gap, and
prints each status, optimum, its excess over the plan's score and the CPU seconds. --derive
solves the whole round with exalloc's options again and writes the .npz anew (the same draw).
"""

from __future__ import annotations

import argparse
import lzma
import tempfile
import time
from pathlib import Path

import highspy
import numpy as np

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
MODEL = DATA / "highs-doubleton-wrong-bound.mps.xz"
PLAN = DATA / "highs-doubleton-plan.npz"
AGGREGATOR, DOUBLETON_EQUATIONS = 1 << 12, 1 << 9
SETTINGS = {
    "exalloc's (doubleton equations off)": {"presolve_rule_off": AGGREGATOR | DOUBLETON_EQUATIONS},
    "doubleton equations on": {"presolve_rule_off": AGGREGATOR},
}


def read_round() -> highspy.HighsLp:
    """The whole round, as HiGHS wrote it."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "round.mps"
        path.write_bytes(lzma.decompress(MODEL.read_bytes()))
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        h.readModel(str(path))
        return h.getLp()


def solve(lp: highspy.HighsLp, options: dict) -> tuple[str, float, float, np.ndarray]:
    """HiGHS's status, objective, CPU seconds and solution on `lp` with these options."""
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.passModel(lp)
    for key, value in {"mip_rel_gap": 0.0, "random_seed": 0, "threads": 1, **options}.items():
        h.setOptionValue(key, value)
    started = time.process_time()
    h.run()
    seconds = time.process_time() - started
    status = h.modelStatusToString(h.getModelStatus())
    solution = np.array(h.getSolution().col_value)
    return status, h.getInfo().objective_function_value, seconds, solution


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="the whole round, nothing fixed")
    parser.add_argument("--presolve-off", action="store_true", help="also without presolve")
    parser.add_argument("--derive", action="store_true", help="write the .npz anew")
    args = parser.parse_args()
    lp = read_round()
    integer = np.array([int(v) for v in lp.integrality_]) > 0
    if args.derive:
        plan = solve(lp, next(iter(SETTINGS.values())))[3]
        plan[integer] = np.round(plan[integer])
        columns = np.flatnonzero(integer)
        fixed = columns[np.random.default_rng(1).random(len(columns)) < 0.25]
        np.savez_compressed(PLAN, plan=plan, fixed=fixed.astype(np.int32))
    data = np.load(PLAN)
    plan, fixed = data["plan"], data["fixed"]
    score = float(np.array(lp.col_cost_) @ plan + lp.offset_)
    if not args.full:
        lower, upper = np.array(lp.col_lower_), np.array(lp.col_upper_)
        lower[fixed] = upper[fixed] = plan[fixed]
        lp.col_lower_, lp.col_upper_ = lower, upper
    print(f"{'whole' if args.full else 'reduced'} round: {lp.num_col_} columns, "
          f"{0 if args.full else len(fixed)} fixed; the plan's score {score:.9f}")  # fmt: skip
    settings = dict(SETTINGS)
    if args.presolve_off:
        settings["presolve off"] = {"presolve": "off"}
    for name, options in settings.items():
        status, objective, seconds, _ = solve(lp, options)
        print(f"{name}: {status} {objective:.9f} ({objective - score:+.2e}), {seconds:.1f} s CPU")


if __name__ == "__main__":
    main()
