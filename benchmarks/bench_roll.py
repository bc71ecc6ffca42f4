"""`exalloc roll` beside the real hroller, on heterogeneous generated clusters (docs/roll.md).

    python benchmarks/bench_roll.py [--seeds 3] [--first-seed 0] [--quick] [--nodes N]
        [--family random|storage|racks] [--rule memory-aware|hroller] [--time-limit 120]
        [--hroller-timeout 300]

Each case is a generated snapshot (tests/roll_gen.py: three node shapes, five instance
flavours, drbd secondaries at random, gathered on storage-heavy nodes or, a second family,
in the next of racks of one hardware type each, plain and stopped
instances, two offline nodes, node tags) with one master. For each: the real hroller's rounds
and wall time on the saved file; exalloc's rounds, status, bound and time, in this process
(the imports of Pyomo and OR-Tools, paid once per process, are printed apart), from reading
the snapshot to the checked plan: hroller's prelude and its rounds (for the comparison and as a
start), the problem, the plan, the independent check.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from roll_gen import RollSpec, generate  # noqa: E402

from model.backends.text import dump_text, load_text  # noqa: E402
from model.htools.hroller import RollerOptions, prelude, rounds_of  # noqa: E402
from model.roll import RollRules, check_plan, problem_of  # noqa: E402
from solvers.options import SolverOptions  # noqa: E402
from solvers.strategies.roll import plan  # noqa: E402

CASES = (
    # nodes, instances, storage-heavy nodes holding the secondaries (0: at random or by
    # rack), racks (secondaries in the next rack; 0: none), memory-aware
    (400, 1200, 0, 0, True),
    (400, 1200, 20, 0, True),
    (400, 1200, 0, 9, True),
    (400, 1200, 0, 0, False),
    (400, 1200, 20, 0, False),
    (2000, 6000, 0, 0, True),
    (2000, 6000, 100, 0, True),
    (2000, 6000, 0, 45, True),
    (2000, 6000, 0, 0, False),
)
FAMILIES = ("random", "storage", "racks")


def family(storage: int, racks: int) -> str:
    return "storage" if storage else "racks" if racks else "random"


def real_hroller(path: Path, timeout: float) -> tuple[int | str | None, float]:
    """The real hroller's rounds (hroller's rules: it has no memory-aware mode) and time;
    "-" when it did not answer within `timeout` seconds."""
    if shutil.which("hroller") is None:
        return None, 0.0
    start = time.perf_counter()
    try:
        out = subprocess.run(
            ["hroller", "--no-headers", "-t", str(path)],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return "-", time.perf_counter() - start
    seconds = time.perf_counter() - start
    if out.returncode:
        return None, seconds
    return len([ln for ln in out.stdout.splitlines() if ln]), seconds


def exact(path: Path, memory_aware: bool, time_limit: float | None) -> dict:
    start = time.perf_counter()
    cluster = load_text(path)
    rules = RollRules(memory_aware=memory_aware)
    options = RollerOptions()
    pre = prelude(cluster, options)
    greedy = None if memory_aware else rounds_of(pre, options)  # as `exalloc roll` does
    keep = set(pre.considered_names)
    ok = greedy is not None and not greedy.exit_code
    known = [[v for v in r if v in keep] for r in greedy.rounds] if ok else []
    problem = problem_of(cluster, pre.considered_names, rules, pre.offline, pre.loaded)
    result = plan(problem, SolverOptions(solver_given=False, time_limit=time_limit), known=[known])
    check_plan(cluster, pre.considered_names, rules, result.rounds, pre.offline)
    return {
        "rounds": result.objective,
        "status": result.status,
        "bound": result.bound,
        "clique": len(result.clique),
        "memory": result.memory_bound,
        "start": result.start_rounds,
        "method": result.method,
        "build_s": result.build_s,
        "solve_s": result.solve_s,
        "restarts": result.restarts,
        "peeled": result.peeled,
        "seconds": time.perf_counter() - start,
        "port_rounds": len([r for r in greedy.rounds if r]) if ok else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="the 400-node cases only")
    parser.add_argument("--nodes", type=int, help="only the cases of this many nodes")
    parser.add_argument("--family", choices=FAMILIES, help="only the cases of this family")
    parser.add_argument("--rule", choices=("memory-aware", "hroller"), help="only this rule")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--time-limit", type=float, default=120.0)
    parser.add_argument("--hroller-timeout", type=float, default=300.0)
    args = parser.parse_args()
    t0 = time.perf_counter()
    import ortools.sat.python.cp_model  # noqa: F401
    import pyomo.environ  # noqa: F401

    print(f"imports of Pyomo and OR-Tools: {time.perf_counter() - t0:.1f} s (once per process)")
    print()
    print(
        "| nodes | instances | secondaries | rule | seed | hroller rounds | hroller s "
        "| exalloc rounds | status | bound (clique, memory) | start | peeled | restarts "
        "| build s | solve s | exalloc s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    cases = [
        c
        for c in CASES
        if (not args.quick or c[0] <= 400)
        and args.nodes in (None, c[0])
        and args.family in (None, family(c[2], c[3]))
        and args.rule in (None, "memory-aware" if c[4] else "hroller")
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for nodes, instances, storage, racks, memory_aware in cases:
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                spec = RollSpec(
                    nodes=nodes,
                    instances=instances,
                    drbd_share=0.8,
                    concentrated=storage,
                    offline=2,
                    fill=0.7,
                    seed=seed,
                    racks=racks,
                )
                path = Path(tmp) / f"roll-{nodes}-{storage}-{seed}.data"
                path.write_text(dump_text(generate(spec)))
                real, real_s = real_hroller(path, args.hroller_timeout)
                r = exact(path, memory_aware, args.time_limit)
                rule = "memory-aware" if memory_aware else "hroller's"
                where = (
                    f"{storage} storage nodes"
                    if storage
                    else f"next rack of {racks}"
                    if racks
                    else "at random"
                )
                print(
                    f"| {nodes} | {instances} | {where} | {rule} | {seed} | {real} "
                    f"| {real_s:.2f} | {r['rounds']} | {r['status']} "
                    f"| {r['bound']} ({r['clique']}, {r['memory']}) | {r['start']} "
                    f"| {r['peeled']} | {r['restarts']} "
                    f"| {r['build_s']:.2f} | {r['solve_s']:.2f} | {r['seconds']:.2f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
