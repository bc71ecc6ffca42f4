"""Benchmark `exalloc hail` against the real hail on generated dedicated clusters.

    python -m benchmarks.bench_hail      # allocate 100/500/1000; multi 10/50 plain, 10 drbd on 200
    python -m benchmarks.bench_hail --allocate 1000 --multi '' --repeat 3
    python -m benchmarks.bench_hail --json results.json

allocate: one plain and one drbd request per size; both tools run as processes, end to end
(exalloc as `python -m cli hail`, i.e. what `exalloc-hail` runs), best of --repeat runs; the
answers must be identical. From exalloc's `--json`: the time spent in process on the request
(reading it, screening, model, solve, check; the rest is interpreter start-up and imports),
the Pyomo build and the solver time.
multi-allocate: a batch of N instances on a homogeneous 200-node group (instances sized so
that each fits its slice); both answers go through the checker, which gives the
(placed, lost-allocations vector, remaining disk) each achieves.

Clusters come from `tests/dedicated_gen.py` with fixed seeds, so a row names its input.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

import dedicated_gen as gen  # noqa: E402

from model.check import check_allocation  # noqa: E402
from model.iallocator import parse_request  # noqa: E402
from model.resources import node_states  # noqa: E402
from programs.hail import REAL_HAIL, hail_placements  # noqa: E402


def _run(cmd: list[str]) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, check=False)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr.strip()}")
    return wall, proc.stdout


def _exalloc_cmd(path: Path, solver: str, time_limit: float | None) -> list[str]:
    cmd = [sys.executable, "-m", "cli", "--json", "--solver", solver]
    if time_limit is not None:
        cmd += ["--time-limit", str(time_limit)]
    return [*cmd, "hail", str(path)]


def _best(cmd: list[str], repeat: int) -> tuple[float, str]:
    """Best wall time of `repeat` runs, and the output of that run."""
    runs = [_run(cmd) for _ in range(repeat)]
    return min(runs, key=lambda r: r[0])


def _quality(text: str, response: dict) -> tuple[int, list[int], int]:
    inp = parse_request(text)
    placements = hail_placements(inp, response)
    check = check_allocation(node_states(inp.cluster), placements)
    if not check.ok:
        return len(placements), ["infeasible"], 0  # type: ignore[list-item]
    obj = check.objectives
    return len(placements), list(obj["lost_allocations_total"]), obj["remaining_disk_mib"]


def bench_allocate(n_nodes: int, template: str, args: argparse.Namespace, tmp: Path) -> dict:
    rng = random.Random(n_nodes * 7 + (template == "drbd"))
    data = gen.allocate(rng, n_nodes, template=template, fits=True)
    path = tmp / f"allocate-{n_nodes}-{template}.json"
    path.write_text(json.dumps(data))
    hail_s, hail_out = _best([str(REAL_HAIL), str(path)], args.repeat)
    ex_s, ex_out = _best(_exalloc_cmd(path, args.solver, args.time_limit), args.repeat)
    doc = json.loads(ex_out)
    hail = json.loads(hail_out)
    runs = doc["solver"]
    return {
        "problem": "allocate",
        "nodes": n_nodes,
        "template": template,
        "hail_s": hail_s,
        "exalloc_s": ex_s,
        "in_process_s": doc["timing"]["load_s"] + doc["timing"]["answer_s"],
        "build_s": sum(r["build_s"] for r in runs),
        "solve_s": sum(r["solve_s"] for r in runs),
        "status": ",".join(sorted({r["status"] for r in runs})) or "-",
        "same": hail["result"] == doc["response"]["result"],
        "result": doc["response"]["result"],
    }


def bench_multi(
    n_nodes: int, n_instances: int, args: argparse.Namespace, tmp: Path, template: str = "plain"
) -> dict:
    rng = random.Random(9000 + n_instances + (template == "drbd"))
    data = gen.multi_allocate(
        rng, n_nodes, n_instances, template=template, odd_nodes=False, fits=True
    )
    text = json.dumps(data)
    path = tmp / f"multi-{n_nodes}-{n_instances}-{template}.json"
    path.write_text(text)
    hail_s, hail_out = _best([str(REAL_HAIL), str(path)], args.repeat)
    ex_s, ex_out = _best(_exalloc_cmd(path, args.solver, args.time_limit), args.repeat)
    doc = json.loads(ex_out)
    hail = json.loads(hail_out)
    runs = doc["solver"]
    return {
        "problem": "multi-allocate",
        "nodes": n_nodes,
        "instances": n_instances,
        "template": template,
        "hail_s": hail_s,
        "exalloc_s": ex_s,
        "in_process_s": doc["timing"]["load_s"] + doc["timing"]["answer_s"],
        "build_s": sum(r["build_s"] for r in runs),
        "solve_s": sum(r["solve_s"] for r in runs),
        "status": ",".join(sorted({r["status"] for r in runs})) or "-",
        "hail_quality": _quality(text, hail),
        "exalloc_quality": _quality(text, doc["response"]),
    }


def table(rows: list[dict[str, Any]]) -> str:
    out = [
        "| problem | size | hail s | exalloc s | of which in process s | build s | solve s | "
        "status | hail (placed, lost, disk MiB) | exalloc |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r["problem"] == "allocate":
            size = f"{r['nodes']} nodes, {r['template']}"
            hq = "same node(s)" if r["same"] else "DIFFERENT"
            eq = "/".join(r["result"]) or "(fails)"
        else:
            size = f"{r['instances']} {r['template']} instances, {r['nodes']} nodes"
            hq, eq = str(tuple(r["hail_quality"])), str(tuple(r["exalloc_quality"]))
        out.append(
            f"| {r['problem']} | {size} | {r['hail_s']:.3f} | {r['exalloc_s']:.2f} | "
            f"{r['in_process_s']:.2f} | {r['build_s']:.3f} | {r['solve_s']:.3f} | "
            f"{r['status']} | {hq} | {eq} |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--allocate", default="100,500,1000", help="node counts ('' for none)")
    p.add_argument("--templates", default="plain,drbd")
    p.add_argument("--multi", default="10,50", help="batch sizes on --multi-nodes ('' for none)")
    p.add_argument("--multi-drbd", default="10", help="drbd batch sizes ('' for none)")
    p.add_argument("--multi-nodes", type=int, default=200)
    p.add_argument("--repeat", type=int, default=1, help="runs per tool; the best counts")
    p.add_argument("--solver", default="highs", choices=("highs", "cpsat"))
    p.add_argument("--time-limit", type=float, default=None)
    p.add_argument("--json", dest="json_out", help="also write the rows to this file")
    args = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        for n in [int(x) for x in args.allocate.split(",") if x]:
            for template in [t for t in args.templates.split(",") if t]:
                rows.append(bench_allocate(n, template, args, tmp))
                print(table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
        for template, sizes in (("plain", args.multi), ("drbd", args.multi_drbd)):
            for k in [int(x) for x in sizes.split(",") if x]:
                rows.append(bench_multi(args.multi_nodes, k, args, tmp, template))
                print(table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    print(table(rows))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
