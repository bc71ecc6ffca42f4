"""How far a short node-evacuation's bound is from a proof when the model starts from the best
plan known: the 30 s target of issue 11, with the plan taken out of the question.

    python benchmarks/bound_from_best.py [--seeds 2] [--long 120] [--short 30]

For each evacuation of benchmarks/bench_joint.py (200 nodes, 40 instances, mode all):
`exalloc hail --time-limit LONG` gives the best plan; then `--time-limit SHORT` with the joint
model started from that plan in place of the narrow walk (hail's walk, and the search beside it,
left out: the start is already better). Prints each run's score, status and gap as `info`
reports them. docs/placement.md quotes the result.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "tests"))

import bench_joint  # noqa: E402

import cli  # noqa: E402
from solvers.strategies import joint_evacuate, joint_search  # noqa: E402


def _hail(path: Path, limit: float) -> tuple[float, dict]:
    out = io.StringIO()
    began = time.perf_counter()
    with contextlib.redirect_stdout(out):
        code = cli.main(["--json", "hail", "--time-limit", str(limit), str(path)])
    assert code in (0, None), code
    report = json.loads(out.getvalue())
    return time.perf_counter() - began, {**report["response"], "note": report["solver_note"]}


def _plan(response: dict) -> dict[str, tuple[str, str | None]]:
    return {
        name: (nodes[0], nodes[1] if len(nodes) > 1 else None)
        for name, _group, nodes in response["result"][0]
    }


def _status(response: dict) -> str:
    found = re.match(r"\w+: ([^;]*).*joint plan \d+, score ([0-9.]+)", response["note"])
    return f"{found.group(2)}, {found.group(1)}" if found else response["note"][-120:]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--long", type=float, default=120.0)
    p.add_argument("--short", type=float, default=30.0)
    args = p.parse_args()
    print("| seed | long run: score, status | short run from its plan: score, status | short s |")
    print("|---|---|---|---|", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.seeds):
            path = Path(tmp) / f"evacuate{seed}.json"
            path.write_text(json.dumps(bench_joint.evacuation(200, 40, seed)))
            _, best = _hail(path, args.long)
            known = _plan(best)
            saved = joint_search.narrow_walk, joint_evacuate.SECONDS_PER_TRIAL
            joint_search.narrow_walk = lambda *_a, _plan=known, **_k: dict(
                _plan
            )  # the model's start
            joint_evacuate.SECONDS_PER_TRIAL = float("inf")  # no walk of hail's, before or beside
            try:
                short_s, short = _hail(path, args.short)
            finally:
                joint_search.narrow_walk, joint_evacuate.SECONDS_PER_TRIAL = saved
            print(f"| {seed} | {_status(best)} | {_status(short)} | {short_s:.1f} |", flush=True)


if __name__ == "__main__":
    main()
