"""Joint node-evacuate, multi-allocate and change-group on heterogeneous normal groups, beside
the real hail.

    python benchmarks/bench_joint.py [--nodes 200] [--evacuate 40] [--multi 10] [--seeds 3]
                                     [--mode all|secondary-only|primary-only] [--offline]
                                     [--change-group 0]

Each case is one group of mixed machine sizes (tests/htools_gen.py shapes) with uneven fills of
drbd, ext and rbd instances. node-evacuate: the two nodes with the most primaries (topped up from
the next ones to `--evacuate` instances), mode `all` (or `--mode`; `--offline` marks the
busiest node offline, a failed node). multi-allocate: a batch of mixed drbd, ext and plain
instances. change-group (`--change-group N`): three such groups of a third of the nodes each,
N drbd and shared-storage instances of the first moved to the others. Per case: the real
hail's time and instances placed or moved; exalloc hail's (default `--capacity-checks exact`,
so joint) time, count, status and gap as the solver note reports them, and the score after each
answer, recomputed from the request: of the group, or of a change-group's target groups
together.
docs/placement.md quotes the table.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import htools_gen as gen  # noqa: E402

from model.backends.iallocator import load_request, new_instance  # noqa: E402
from model.score import cluster_score  # noqa: E402
from model.state import node_states  # noqa: E402
from programs.reference import real_hail  # noqa: E402


def evacuation(
    n_nodes: int, count: int, seed: int, mode: str = "all", offline: bool = False
) -> dict:
    """The busiest nodes' evacuation in `mode`; `offline`: the first instance's primary node
    marked offline (a failed node, whose instances htools moves with force)."""
    data = gen.busiest_evacuation(seed, n_nodes, count)
    data["request"]["evac_mode"] = mode
    if offline:
        first = data["request"]["instances"][0]
        data["nodes"][data["instances"][first]["nodes"][0]]["offline"] = True
    return data


def multi(n_nodes: int, count: int, seed: int) -> dict:
    data = gen.heterogeneous(seed, n_nodes)
    rng = random.Random(seed + 1)
    batch = []
    for k in range(count):
        template = rng.choice(("drbd", "ext", "plain"))
        mem = rng.choice((2048, 4096, 8192, 16384))
        disk = rng.choice((10240, 51200, 102400))
        batch.append(
            {
                "name": f"new-{k}",
                "required_nodes": 2 if template == "drbd" else 1,
                "disk_template": template,
                "disks": [{"mode": "rw", "size": disk}],
                "disk_space_total": disk + (128 if template == "drbd" else 0),
                "memory": mem,
                "vcpus": rng.choice((1, 2, 4)),
                "spindle_use": 1,
                "tags": [],
                "nics": [],
                "os": "debian",
            }
        )
    data["request"] = {"type": "multi-allocate", "instances": batch}
    return data


def _timed(cmd: list[str], timeout: float | None = None) -> tuple[float, dict | None]:
    """Wall time and the answer; (inf, None) when `timeout` seconds pass first."""
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, cwd=REPO, check=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return float("inf"), None
    return time.perf_counter() - start, json.loads(proc.stdout)


def _done(response: dict | None) -> int | None:
    if response is None:
        return None
    return len(response["result"][0]) if response["success"] else 0


def _score_after(path: Path, response: dict | None) -> float | None:
    """The group's score after the answer, recomputed from the request alone."""
    if response is None or not response["success"]:
        return None
    inp = load_request(path)
    state = node_states(inp.cluster)
    after = state
    if inp.request.type == "multi-allocate":
        records = {r.name: new_instance(r) for r in inp.request.instances}
        for name, nodes in response["result"][0]:
            secondary = nodes[1] if len(nodes) > 1 else None
            after = after.placed(state.demand(records[name]), nodes[0], secondary)
    else:
        for name, _group, nodes in response["result"][0]:
            after = after.relocated(name, nodes[0], nodes[1] if len(nodes) > 1 else None)
    if inp.request.type == "change-group":  # the target groups together, as exalloc ranks
        source = {state.nodes[state.locations[n][0]].group_uuid for n in inp.request.instances}
        return cluster_score(st for st in after.nodes.values() if st.group_uuid not in source)
    return cluster_score(after, group="group1")


def _cell(value: float | int | None) -> str:
    if value is None:
        return "-"
    return f"{value:.6f}" if isinstance(value, float) else str(value)


def run_case(
    kind: str, data: dict, tmp: Path, hail_timeout: float, time_limit: float | None = None
) -> dict:
    path = tmp / f"{kind}.json"
    path.write_text(json.dumps(data))
    hail_s, hail = _timed([str(real_hail()), str(path)], hail_timeout)
    limit = ["--time-limit", str(time_limit)] if time_limit is not None else []
    ours_s, report = _timed([sys.executable, "-m", "cli", "--json", "hail", *limit, str(path)])
    assert report is not None
    ours = report["response"]
    status = re.match(r"\w+: (.*)", report["solver_note"])
    wanted = len(data["request"]["instances"])
    return {
        "kind": kind,
        "instances": wanted,
        "hail_s": hail_s,
        "hail_done": _done(hail),
        "hail_score": _score_after(path, hail),
        "exalloc_s": ours_s,
        "exalloc_done": _done(ours),
        "exalloc_score": _score_after(path, ours),
        "status": status.group(1) if status else "one by one (joint not better)",
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=200)
    p.add_argument("--evacuate", type=int, default=40)
    p.add_argument("--multi", type=int, default=10)
    p.add_argument("--change-group", type=int, default=0, help="instances (three groups)")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--mode", choices=("all", "secondary-only", "primary-only"), default="all")
    p.add_argument("--offline", action="store_true", help="the busiest node offline (failed)")
    p.add_argument("--hail-timeout", type=float, default=120.0, help="seconds")
    p.add_argument(
        "--time-limit", type=float, default=None, help="exalloc's --time-limit (default: its own)"
    )
    args = p.parse_args()
    print(
        "| request | seed | instances | hail s | hail done | hail score | exalloc s |"
        " exalloc done | exalloc score | exalloc status |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.seeds):
            evacuate = partial(evacuation, mode=args.mode, offline=args.offline)
            for kind, count, make in (
                ("node-evacuate", args.evacuate, evacuate),
                ("multi-allocate", args.multi, multi),
                ("change-group", args.change_group, lambda n, c, s: gen.group_change(s, n, c)),
            ):
                if not count:
                    continue
                data = make(args.nodes, count, seed)
                r = run_case(kind, data, Path(tmp), args.hail_timeout, args.time_limit)
                hail_s = (
                    f"{r['hail_s']:.2f}"
                    if r["hail_s"] != float("inf")
                    else f"> {args.hail_timeout:.0f}"
                )
                cells = [
                    kind,
                    seed,
                    r["instances"],
                    hail_s,
                    _cell(r["hail_done"]),
                    _cell(r["hail_score"]),
                    f"{r['exalloc_s']:.2f}",
                    _cell(r["exalloc_done"]),
                    _cell(r["exalloc_score"]),
                    r["status"],
                ]
                print("| " + " | ".join(str(c) for c in cells) + " |", flush=True)


if __name__ == "__main__":
    main()
