"""Benchmark exalloc squeeze against the real hsqueeze, and alone at scale (docs/squeeze.md).

    python benchmarks/bench_squeeze.py --compare 8,16,32,64 --hsqueeze-timeout 300
    python benchmarks/bench_squeeze.py --scale 500:5000,3000:30000 --time-limit 120
    python benchmarks/bench_squeeze.py --drbd 64:192:62 --time-limit 120

Clusters come from `tests/squeeze_gen.py` (seeded, ext instances): the comparison uses small
nodes with four instances per node, the scale runs large nodes with ten instances per node,
the DRBD runs small nodes with ext instances and DRBD pairs, squeezed with `--move ext` and
`--move drbd`.
In the comparison both tools run as subprocesses, so the wall times include process start and
loading. The scale runs call the solve strategy (`solvers.strategies.squeeze.plan`) in this
process on the snapshot read back from its file: wall time is loading plus planning, and the
model build time is reported apart from the solve time. Prints Markdown tables (and JSON with
--json).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from squeeze_gen import LARGE_NODE_TYPES, SqueezeSpec, drbd_cluster, ext_cluster  # noqa: E402

from model.backends.text import load_text, save_text  # noqa: E402
from model.squeeze import SqueezeRequest  # noqa: E402
from model.state import node_states  # noqa: E402
from solvers.options import SolverOptions  # noqa: E402
from solvers.strategies.squeeze import plan  # noqa: E402

#: hsqueeze's default --minimal-resources and --target-resources.
DEFAULT_FACTOR = 2.0


def run_hsqueeze(path: Path, timeout_s: float) -> dict:
    exe = shutil.which("hsqueeze")
    if exe is None:
        return {"nodes": None, "wall_s": None, "note": "hsqueeze not installed"}
    t0 = time.perf_counter()
    try:
        out = subprocess.run(
            [exe, "-t", str(path), "-C"], capture_output=True, text=True, timeout=timeout_s
        ).stdout
    except subprocess.TimeoutExpired:
        return {"nodes": None, "wall_s": None, "note": f"> {timeout_s:.0f} s (killed)"}
    wall = time.perf_counter() - t0
    lines = out.splitlines()
    mode = lines[0] if lines else ""
    nodes = []
    for line in lines[1:]:
        if not line.strip():
            break
        nodes.append(line)
    moves = out.count("gnt-instance migrate")
    return {"mode": mode, "nodes": len(nodes), "moves": moves, "wall_s": wall, "note": ""}


def run_exalloc(path: Path, time_limit: float | None, threads: int) -> dict:
    cmd = [sys.executable, "-m", "cli", "--json", "--threads", str(threads)]
    if time_limit is not None:
        cmd += ["--time-limit", str(time_limit)]
    cmd += ["squeeze", "-t", str(path)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        return {"nodes": None, "wall_s": wall, "note": proc.stderr.strip()}
    doc = json.loads(proc.stdout)
    return {
        "mode": doc["mode"],
        "nodes": len(doc["nodes"]),
        "moves": len(doc["moves"]),
        "status": doc["status"],
        "objective": doc["objective"],
        "bound": doc["bound"],
        "gap": doc["gap"],
        "method": doc["method"],
        "build_s": doc["build_s"],
        "solve_s": doc["solve_s"],
        "wall_s": wall,
        "checked": doc["checker"]["ok"],
    }


def plan_in_process(path: Path, time_limit: float | None, threads: int, move: str = "ext") -> dict:
    """exalloc's plan through the solve strategy, timed from reading the snapshot."""
    t0 = time.perf_counter()
    state = node_states(load_text(path))
    request = SqueezeRequest(DEFAULT_FACTOR, DEFAULT_FACTOR, move)
    # no solver named, as on the command line without --solver: the strategy picks per problem
    options = SolverOptions(time_limit=time_limit, threads=threads, solver_given=False)
    result = plan(state, request, options)
    wall = time.perf_counter() - t0
    return {
        "mode": result.mode,
        "nodes": len(result.nodes),
        "moves": len(result.moves),
        "status": result.status,
        "objective": list(result.objective),
        "bound": list(result.bound),
        "gap": list(result.gap),
        "method": result.method,
        "solver": result.solver,
        "build_s": result.build_s,
        "solve_s": result.solve_s,
        "wall_s": wall,
        "checked": result.checker["ok"],
    }


def _fmt(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def compare(
    sizes: list[int], timeout_s: float, time_limit: float | None, seed: int, threads: int, tmp: Path
) -> list[dict]:
    rows = []
    print(
        "| nodes / instances | hsqueeze freed | hsqueeze moves | hsqueeze s "
        "| exalloc freed | exalloc moves | status | exalloc s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for n in sizes:
        spec = SqueezeSpec(nodes=n, instances=4 * n, seed=seed)
        cluster = ext_cluster(spec)
        path = tmp / f"ext-{n}.data"
        save_text(cluster, path)
        h = run_hsqueeze(path, timeout_s)
        e = run_exalloc(path, time_limit, threads)
        row = {"nodes": n, "instances": len(cluster.instances), "hsqueeze": h, "exalloc": e}
        rows.append(row)
        h_time = _fmt(h["wall_s"], 2) if h["wall_s"] is not None else h["note"]
        h_nodes = _fmt(h["nodes"], 0) if h["nodes"] is not None else "–"
        print(
            f"| {n} / {len(cluster.instances)} | {h_nodes} "
            f"| {h.get('moves', '–')} | {h_time} | {e['nodes']} | {e.get('moves')} "
            f"| {e.get('status')} | {_fmt(e['wall_s'], 2)} |",
            flush=True,
        )
    return rows


def scale(
    cases: list[tuple[int, int]], time_limit: float, seed: int, threads: int, tmp: Path
) -> list[dict]:
    rows = []
    print(
        "| nodes / instances | method | freed | bound | gap | moves | status "
        "| build s | solve s | wall s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n, i in cases:
        spec = SqueezeSpec(nodes=n, instances=i, seed=seed, node_types=LARGE_NODE_TYPES)
        cluster = ext_cluster(spec)
        path = tmp / f"ext-{n}-{i}.data"
        save_text(cluster, path)
        e = plan_in_process(path, time_limit, threads)
        rows.append({"nodes": n, "instances": len(cluster.instances), "exalloc": e})
        print(f"| {n} / {len(cluster.instances)} | {e.get('method')} | {_cells(e)}", flush=True)
    return rows


def _cells(e: dict) -> str:
    """A scale or DRBD row from the nodes freed on: bound, gap, moves, status, times."""
    gap = (e.get("gap") or [None])[0]
    bound = (e.get("bound") or [None])[0]
    return (
        f"{e['nodes']} | {_fmt(bound, 0)} | {_fmt(None if gap is None else 100 * gap, 2)} % "
        f"| {e.get('moves')} | {e.get('status')} | {_fmt(e.get('build_s'))} "
        f"| {_fmt(e.get('solve_s'))} | {_fmt(e['wall_s'])} |"
    )


def drbd(
    cases: list[tuple[int, int, int]], time_limit: float, seed: int, threads: int, tmp: Path
) -> list[dict]:
    rows = []
    print(
        "| nodes / ext / drbd | move | solver | freed | bound | gap | moves | status "
        "| build s | solve s | wall s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for n, i, k in cases:
        # nodes filled to at most half by ext instances (the default is 0.6): with the DRBD
        # instances on top, every node can still host hsqueeze's probe (a shrink, not expand)
        spec = SqueezeSpec(nodes=n, instances=i, seed=seed, max_fill=0.5)
        cluster = drbd_cluster(spec, k)
        path = tmp / f"drbd-{n}-{i}-{k}.data"
        save_text(cluster, path)
        for move in ("ext", "drbd"):
            e = plan_in_process(path, time_limit, threads, move)
            rows.append({"nodes": n, "ext": i, "drbd": k, "move": move, "exalloc": e})
            print(f"| {n} / {i} / {k} | {move} | {e['solver']} | {_cells(e)}", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compare", default="", help="node counts for exalloc vs hsqueeze")
    ap.add_argument("--scale", default="", help="NODES:INSTANCES,... for exalloc alone")
    ap.add_argument("--drbd", default="", help="NODES:EXT:DRBD,... squeezed with --move drbd")
    ap.add_argument("--hsqueeze-timeout", type=float, default=300.0)
    ap.add_argument("--time-limit", type=float, default=120.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    args = ap.parse_args()
    out: dict[str, list] = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if args.compare:
            sizes = [int(x) for x in args.compare.split(",")]
            out["compare"] = compare(
                sizes, args.hsqueeze_timeout, args.time_limit, args.seed, args.threads, tmp
            )
        if args.scale:
            cases = [tuple(int(v) for v in x.split(":")) for x in args.scale.split(",")]
            out["scale"] = scale(cases, args.time_limit, args.seed, args.threads, tmp)  # type: ignore[arg-type]
        if args.drbd:
            specs = [tuple(int(v) for v in x.split(":")) for x in args.drbd.split(",")]
            out["drbd"] = drbd(specs, args.time_limit, args.seed, args.threads, tmp)  # type: ignore[arg-type]
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
