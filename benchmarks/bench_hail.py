"""Benchmark `exalloc hail` against the real hail on generated clusters.

    python -m benchmarks.bench_hail      # allocate 100/500/1000; multi 10/50 plain, 10 drbd on 200
    python -m benchmarks.bench_hail --allocate 1000 --multi '' --repeat 3
    python -m benchmarks.bench_hail --json results.json
    python -m benchmarks.bench_hail --allocate '' --multi '' --multi-drbd '' --normal 100,500,1000
    python -m benchmarks.bench_hail --allocate '' --multi '' --multi-drbd '' --hetero 1000

Heterogeneous dedicated groups, `--hetero SIZES` (default 1000): the generator's cluster with
some nodes grown to 1.5x, 2x and 4x machines (HETERO_SIZES), keeping their instances.

Normal (non-exclusive-storage) groups, `--normal SIZES`: one group of mixed machine sizes,
either empty or populated with uneven fills (0-40 % of each node's memory, drbd, plain and
ext instances, N+1 redundant), and a plain, drbd and ext allocate on each; exalloc runs with
`--capacity-checks greedy` and must give hail's answer byte for byte. hail's time is capped
by `--hail-timeout` (its drbd allocate on a populated group is far slower than quadratic).

Three commands per request, as processes, end to end, taking turns, best of --repeat runs:
the real hail; `exalloc-hail` (the console script next to this interpreter) answered by an
`exalloc hail-server` started for the benchmark, as Ganeti would call it with the server
running; and `python -m cli hail`, exalloc in a fresh process (interpreter start-up and
the imports of Pyomo and HiGHS included). allocate: one plain and one drbd request per
size; the answers must be identical. From exalloc's `--json`: the time spent in process on
the request (reading it, screening, model, solve, check), the Pyomo build and the solver time.
multi-allocate: a batch of N instances on a homogeneous 200-node group (instances sized so
that each fits its slice); both answers go through the checker, which gives the
(placed, lost-allocations vector, remaining disk) each achieves.

Clusters come from `tests/dedicated_gen.py` with fixed seeds, so a row names its input.
"""

from __future__ import annotations

import argparse
import json
import os
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
import htools_gen  # noqa: E402

from model.backends.iallocator import parse_request  # noqa: E402
from model.check import check_allocation  # noqa: E402
from model.state import node_states  # noqa: E402
from programs.hail_compare import hail_placements  # noqa: E402
from programs.reference import real_hail  # noqa: E402


def _run(
    cmd: list[str], env: dict[str, str] | None = None, timeout: float | None = None
) -> tuple[float, str]:
    """Wall time and stdout; (inf, "") when `timeout` seconds pass first."""
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, cwd=REPO, check=False, env=env, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return float("inf"), ""
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr.strip()}")
    return wall, proc.stdout


def _solver_args(solver: str, time_limit: float | None) -> list[str]:
    return ["--solver", solver] + ([] if time_limit is None else ["--time-limit", str(time_limit)])


def _exalloc_cmd(path: Path, solver: str, time_limit: float | None) -> list[str]:
    cmd = [sys.executable, "-m", "cli", "--json", *_solver_args(solver, time_limit)]
    return [*cmd, "hail", str(path)]


def _best(
    runs: list[tuple[list[str], dict[str, str] | None]], repeat: int
) -> list[tuple[float, str]]:
    """Best wall time of `repeat` runs of each command, and the output of that run. The
    commands take turns, so a change in the machine's load falls on all of them alike."""
    times: list[list[tuple[float, str]]] = [[] for _ in runs]
    for _ in range(repeat):
        for k, (cmd, env) in enumerate(runs):
            times[k].append(_run(cmd, env))
    return [min(t, key=lambda r: r[0]) for t in times]


class HailServer:
    """`exalloc hail-server` on a private socket, and the `exalloc-hail` client that uses it
    (the console script next to this interpreter, as Ganeti would run it)."""

    def __init__(self, tmp: Path):
        self.socket = tmp / "hail.sock"
        self.log = tmp / "hail-server.log"
        cmd = [sys.executable, "-m", "cli", "hail-server", "--socket", str(self.socket)]
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(cmd, cwd=REPO, stderr=log, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while "listening on" not in self.log.read_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"hail-server did not start: {self.log.read_text()}")
            time.sleep(0.05)
        script = Path(sys.executable).parent / "exalloc-hail"
        self.client = (
            [str(script)]
            if script.exists()
            else [
                sys.executable,
                "-c",
                "import sys; from cli import hail_console; sys.exit(hail_console())",
            ]
        )
        self.env = dict(os.environ, EXALLOC_HAIL_SOCKET=str(self.socket))

    def command(
        self, path: Path, solver: str, time_limit: float | None, extra: tuple[str, ...] = ()
    ) -> tuple[list[str], dict]:
        return [*self.client, *_solver_args(solver, time_limit), *extra, str(path)], self.env

    def served(self) -> int:
        return sum(": hail " in line for line in self.log.read_text().splitlines())

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=60)


def _quality(text: str, response: dict) -> tuple[int, list[int], int]:
    inp = parse_request(text)
    placements = hail_placements(inp, response)
    check = check_allocation(node_states(inp.cluster), placements)
    if not check.ok:
        return len(placements), ["infeasible"], 0  # type: ignore[list-item]
    obj = check.objectives
    return len(placements), list(obj["lost_allocations_total"]), obj["remaining_disk_mib"]


def _timed(path: Path, args: argparse.Namespace) -> list[tuple[float, str]]:
    """hail, exalloc in a fresh process, exalloc-hail answered by the server: best runs."""
    before = args.server.served()
    runs = _best(
        [
            ([str(real_hail()), str(path)], None),
            (_exalloc_cmd(path, args.solver, args.time_limit), None),
            args.server.command(path, args.solver, args.time_limit),
        ],
        args.repeat,
    )
    if args.server.served() != before + args.repeat:
        raise SystemExit("exalloc-hail did not reach the server (see its log)")
    return runs


def _measure(path: Path, args: argparse.Namespace) -> tuple[dict, dict, dict[str, Any]]:
    """Run the three commands on `path`: (hail's answer, exalloc's --json, the timing fields)."""
    (hail_s, hail_out), (ex_s, ex_out), (served_s, served_out) = _timed(path, args)
    doc = json.loads(ex_out)
    runs = doc["solver"]
    fields = {
        "hail_s": hail_s,
        "exalloc_s": ex_s,
        "served_s": served_s,
        "served_same": json.loads(served_out)["result"] == doc["response"]["result"],
        "in_process_s": doc["timing"]["load_s"] + doc["timing"]["answer_s"],
        "build_s": sum(r["build_s"] for r in runs),
        "solve_s": sum(r["solve_s"] for r in runs),
        "status": ",".join(sorted({r["status"] for r in runs})) or "-",
    }
    return json.loads(hail_out), doc, fields


#: Machine sizes of a heterogeneous dedicated group, as multiples of the generator's node
#: (64 GiB, 1 TiB, 16 spindles, 16 CPUs): most nodes standard, some 1.5x, 2x and 4x.
HETERO_SIZES = (1.0, 1.0, 1.0, 1.5, 2.0, 4.0)


def heterogeneous(data: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """Grow some nodes of a generated dedicated cluster to bigger machines, keeping what
    their instances use (so fills are uneven: a 4x node hosting one slice is mostly empty)."""
    for node in data["nodes"].values():
        k = rng.choice(HETERO_SIZES)
        if k == 1.0:
            continue
        for total, free in (
            ("total_memory", "free_memory"),
            ("total_disk", "free_disk"),
            ("total_spindles", "free_spindles"),
        ):
            grown = int(node[total] * k)
            node[free] += grown - node[total]
            node[total] = grown
        node["total_cpus"] = int(node["total_cpus"] * k)
    return data


def bench_allocate(
    n_nodes: int, template: str, args: argparse.Namespace, tmp: Path, hetero: bool = False
) -> dict:
    rng = random.Random(n_nodes * 7 + (template == "drbd") + 1000 * hetero)
    data = gen.allocate(rng, n_nodes, template=template, fits=True)
    if hetero:
        data = heterogeneous(data, rng)
    kind = "hetero" if hetero else "allocate"
    path = tmp / f"{kind}-{n_nodes}-{template}.json"
    path.write_text(json.dumps(data))
    hail, doc, fields = _measure(path, args)
    return {
        "problem": "allocate (heterogeneous)" if hetero else "allocate",
        "instances_in_cluster": len(data["instances"]),
        "nodes": n_nodes,
        "template": template,
        **fields,
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
    hail, doc, fields = _measure(path, args)
    return {
        "problem": "multi-allocate",
        "nodes": n_nodes,
        "instances": n_instances,
        "template": template,
        **fields,
        "hail_quality": _quality(text, hail),
        "exalloc_quality": _quality(text, doc["response"]),
    }


def normal_cluster(n_nodes: int, populated: bool, seed: int) -> dict[str, Any]:
    """One heterogeneous normal group: mixed machine sizes; populated: uneven fills of drbd,
    plain and ext instances (so redundant that the N+1 check runs on every node)."""
    rng = random.Random(seed)
    return htools_gen.cluster(
        rng,
        n_nodes,
        templates=("drbd", "drbd", "drbd", "plain", "ext"),
        odd=False,
        tags=False,
        policies=False,
        fills=(0.0, 0.1, 0.2, 0.3, 0.4) if populated else (0.0,),
    )


def bench_normal(
    n_nodes: int, populated: bool, template: str, args: argparse.Namespace, tmp: Path
) -> dict:
    seed = n_nodes * 10 + populated
    data = normal_cluster(n_nodes, populated, seed)
    size = {"plain": (4096, 102400, 2), "drbd": (4096, 102400, 2), "ext": (8192, 10240, 4)}
    mem, disk, vcpus = size[template]  # ext: its disk is not on the nodes
    data["request"] = {
        "type": "allocate",
        "name": "new-instance",
        "required_nodes": 2 if template == "drbd" else 1,
        "disk_template": template,
        "disks": [{"mode": "rw", "size": disk}],
        "disk_space_total": disk + (128 if template == "drbd" else 0),
        "memory": mem,
        "vcpus": vcpus,
        "spindle_use": 1,
        "tags": [],
        "nics": [],
    }
    path = tmp / f"normal-{n_nodes}-{'populated' if populated else 'empty'}-{template}.json"
    path.write_text(json.dumps(data))
    hail_s, hail_out = _run([str(real_hail()), str(path)], timeout=args.hail_timeout)
    cmd = [sys.executable, "-m", "cli", "--json", "hail", "--capacity-checks", "greedy"]
    greedy = ("--capacity-checks", "greedy")
    runs = _best(
        [([*cmd, str(path)], None), args.server.command(path, "highs", None, greedy)],
        args.repeat,
    )
    (ex_s, ex_out), (served_s, served_out) = runs
    doc = json.loads(ex_out)
    line = json.dumps(doc["response"], separators=(",", ":"), ensure_ascii=False)
    return {
        "problem": "allocate (normal)",
        "nodes": n_nodes,
        "cluster": "populated" if populated else "empty",
        "instances": len(data["instances"]),
        "template": template,
        "hail_s": hail_s,
        "exalloc_s": ex_s,
        "served_s": served_s,
        "in_process_s": doc["timing"]["load_s"] + doc["timing"]["answer_s"],
        "same": None if not hail_out else hail_out.strip() == line,
        "served_same": json.loads(served_out)["result"] == doc["response"]["result"],
        "result": doc["response"]["result"],
    }


def normal_table(rows: list[dict[str, Any]]) -> str:
    out = [
        "| size | cluster | instances | template | hail s | exalloc-hail via server s | "
        "exalloc s | of which in process s | answer |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        timed_out = r["hail_s"] == float("inf")
        hail = f"> {r['hail_timeout']:g}" if timed_out else f"{r['hail_s']:.2f}"
        same = {True: "same as hail", False: "DIFFERENT", None: "(hail did not finish)"}
        answer = "/".join(r["result"]) if r["result"] else "(fails)"
        out.append(
            f"| {r['nodes']} nodes | {r['cluster']} | {r['instances']} | {r['template']} | "
            f"{hail} | {r['served_s']:.3f} | {r['exalloc_s']:.2f} | {r['in_process_s']:.2f} | "
            f"{same[r['same']]}: {answer} |"
        )
    return "\n".join(out)


def table(rows: list[dict[str, Any]]) -> str:
    out = [
        "| problem | size | hail s | exalloc-hail via server s | exalloc s | "
        "of which in process s | build s | solve s | status | hail (placed, lost, disk MiB) | "
        "exalloc |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r["problem"].startswith("allocate"):
            size = f"{r['nodes']} nodes, {r['template']}"
            if "instances_in_cluster" in r and r["problem"] != "allocate":
                size += f" ({r['instances_in_cluster']} instances)"
            hq = "same node(s)" if r["same"] else "DIFFERENT"
            eq = "/".join(r["result"]) or "(fails)"
        else:
            size = f"{r['instances']} {r['template']} instances, {r['nodes']} nodes"
            hq, eq = str(tuple(r["hail_quality"])), str(tuple(r["exalloc_quality"]))
        served = f"{r['served_s']:.3f}" + ("" if r["served_same"] else " DIFFERENT")
        out.append(
            f"| {r['problem']} | {size} | {r['hail_s']:.3f} | {served} | {r['exalloc_s']:.2f} | "
            f"{r['in_process_s']:.2f} | {r['build_s']:.3f} | {r['solve_s']:.3f} | "
            f"{r['status']} | {hq} | {eq} |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--allocate", default="100,500,1000", help="node counts ('' for none)")
    p.add_argument("--templates", default="plain,drbd")
    p.add_argument(
        "--hetero",
        default="1000",
        help="node counts of heterogeneous dedicated groups (mixed machine sizes; '' for none)",
    )
    p.add_argument("--multi", default="10,50", help="batch sizes on --multi-nodes ('' for none)")
    p.add_argument("--multi-drbd", default="10", help="drbd batch sizes ('' for none)")
    p.add_argument("--multi-nodes", type=int, default=200)
    p.add_argument("--repeat", type=int, default=1, help="runs per tool; the best counts")
    p.add_argument("--solver", default="highs", choices=("highs", "cpsat"))
    p.add_argument("--time-limit", type=float, default=None)
    p.add_argument("--json", dest="json_out", help="also write the rows to this file")
    p.add_argument("--normal", default="", help="normal-group sizes, e.g. 100,500,1000")
    p.add_argument("--normal-templates", default="plain,drbd,ext")
    p.add_argument("--normal-clusters", default="empty,populated")
    p.add_argument("--hail-timeout", type=float, default=300.0, help="seconds (normal groups)")
    args = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="exalloc-bench-", dir="/tmp") as tmpdir:
        tmp = Path(tmpdir)
        args.server = HailServer(tmp)
        try:
            _bench_all(args, tmp, rows)
        finally:
            args.server.stop()
    dedicated = [r for r in rows if r["problem"] != "allocate (normal)"]
    normal = [r for r in rows if r["problem"] == "allocate (normal)"]
    if dedicated:
        print(table(dedicated))
    if normal:
        print(normal_table(normal))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(rows, indent=1))
    return 0


def _bench_all(args: argparse.Namespace, tmp: Path, rows: list[dict[str, Any]]) -> None:
    for n in [int(x) for x in args.normal.split(",") if x]:
        for cluster in [c for c in args.normal_clusters.split(",") if c]:
            for template in [t for t in args.normal_templates.split(",") if t]:
                row = bench_normal(n, cluster == "populated", template, args, tmp)
                row["hail_timeout"] = args.hail_timeout
                rows.append(row)
                print(normal_table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    for n in [int(x) for x in args.allocate.split(",") if x]:
        for template in [t for t in args.templates.split(",") if t]:
            rows.append(bench_allocate(n, template, args, tmp))
            print(table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    for n in [int(x) for x in args.hetero.split(",") if x]:
        for template in [t for t in args.templates.split(",") if t]:
            rows.append(bench_allocate(n, template, args, tmp, hetero=True))
            print(table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    for template, sizes in (("plain", args.multi), ("drbd", args.multi_drbd)):
        for k in [int(x) for x in sizes.split(",") if x]:
            rows.append(bench_multi(args.multi_nodes, k, args, tmp, template))
            print(table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
