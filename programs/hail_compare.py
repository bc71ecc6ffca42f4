"""`exalloc hail --compare`: the real hail's answer beside exalloc's, judged by the same checker
(instances placed, lost-allocation vectors, remaining disk, per-node vectors)."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from model.backends.iallocator import (
    AllocateRequest,
    AllocateSecondaryRequest,
    IAllocatorInput,
    MultiAllocateRequest,
    RelocateRequest,
    new_instance,
    requested_instances,
    state_after,
)
from model.check import check_allocation
from model.dedicated import minimal_instances, vector_of
from model.errors import InputError
from model.htools.dedicated import shown_objectives
from model.resources import NodeState
from model.state import ClusterState, node_states
from programs.reference import real_hail


def run_real_hail(request_file: str | os.PathLike[str], extra: Sequence[str] = ()) -> dict:
    """Run the real hail; its parsed response plus wall time (raises InputError if absent)."""
    if not real_hail().exists():
        raise InputError(f"--compare needs the real hail at {real_hail()} (EXALLOC_REAL_HAIL)")
    start = time.perf_counter()
    proc = subprocess.run(
        [str(real_hail()), *extra, str(request_file)], capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - start
    if proc.returncode != 0 or not proc.stdout.strip():
        raise InputError(f"real hail failed (exit {proc.returncode}): {proc.stderr.strip()}")
    return {"response": json.loads(proc.stdout), "wall_s": wall, "stderr": proc.stderr}


def _real_hail_on(request_path: str, text: str | None, extra: Sequence[str]) -> dict:
    """run_real_hail on the request file, or on a copy of what was read from stdin."""
    if text is None:
        return run_real_hail(request_path, extra)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        f.write(text)
    try:
        return run_real_hail(f.name, extra)
    finally:
        os.unlink(f.name)


def hail_placements(inp: IAllocatorInput, response: Mapping[str, Any]) -> list[tuple]:
    """hail's answer as checker placements (instance, primary, secondary), request order."""
    req = inp.request
    if not response.get("success"):
        return []
    if isinstance(req, AllocateRequest):
        nodes = response["result"]
        return [(new_instance(req), nodes[0], nodes[1] if len(nodes) > 1 else None)]
    if isinstance(req, MultiAllocateRequest):
        where = {name: nodes for name, nodes in response["result"][0]}
        out = []
        for r in req.instances:
            if r.name in where:
                nodes = where[r.name]
                out.append((new_instance(r), nodes[0], nodes[1] if len(nodes) > 1 else None))
        return out
    return []


def hail_nodes(inp: IAllocatorInput, response: Mapping[str, Any]) -> dict[str, list[str]]:
    """hail's answer as instance -> its new nodes, for every request type."""
    req = inp.request
    if not response.get("success"):
        return {}
    result = response["result"]
    if isinstance(req, AllocateRequest):
        return {req.name: list(result)}
    if isinstance(req, MultiAllocateRequest):
        return {name: list(nodes) for name, nodes in result[0]}
    if isinstance(req, RelocateRequest):
        inst = inp.cluster.instance_index[req.name]
        if inst.secondary:  # drbd: a new secondary
            return {req.name: [inst.primary, *result]}
        return {req.name: list(result)}
    if isinstance(req, AllocateSecondaryRequest):
        return {req.name: [inp.cluster.instance_index[req.name].primary, result]}
    return {name: list(nodes) for name, _group, nodes in result[0]}


def outcome(inp: IAllocatorInput, where: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    """The cluster after an answer, as the checker's arithmetic sees it: instances placed or
    moved, the cluster score after, and whether the groups it touched stay N+1 redundant
    (exactly, and by htools' greedy walk)."""
    from model.htools.global_n1 import redundant
    from model.score import cluster_score
    from solvers.strategies.n1 import check_cluster

    state = state_after(inp, where)
    touched = {state.nodes[n].group_uuid for nodes in where.values() for n in nodes}
    groups = [g.uuid for g in inp.cluster.groups if g.uuid in touched]
    n1 = check_cluster(state, groups=groups) if groups else None
    scope = [n for n, st in state.nodes.items() if st.group_uuid in touched]
    return {
        "instances": len(where),
        "score": cluster_score(state),
        "n1_exact": None if n1 is None else n1.redundant,
        "n1_greedy": redundant(state, scope) if scope else None,
    }


def _hails_own_options(args: Any) -> list[str]:
    """The options given to exalloc that the real hail has too, for the same question."""
    extra = []
    if args.capacity_checks == "none":
        extra.append("--no-capacity-checks")
    if args.ignore_soft_errors:
        extra.append("--ignore-soft-errors")
    if args.restrict_allocation_to is not None:
        extra.append("--restrict-allocation-to=" + ",".join(args.restrict_allocation_to))
    if args.ignore_dynu:
        extra.append("--ignore-dynu")
    extra += [f"--simulate={spec}" for spec in args.simulate or ()]  # in the order given
    return extra


def with_comparison(
    report: Any,
    inp: IAllocatorInput,
    request_path: str,
    text: str | None,
    args: Any,
    kvm: int,
) -> Any:
    extra = ["--static-kvm-node-memory", str(kvm)]
    if args.text_data:
        extra += ["-t", str(args.text_data)]
    extra += _hails_own_options(args)
    real = _real_hail_on(request_path, text, extra)
    states = node_states(inp.cluster)
    ours = [
        (new_instance(r), *(list(nodes) + [None])[:2])
        for r in requested_instances(inp.request)
        for n, nodes in report.placements
        if n == r.name
    ]
    mine = check_allocation(states, ours)
    theirs_pl = hail_placements(inp, real["response"])
    theirs = check_allocation(states, theirs_pl)
    theirs_nodes = hail_nodes(inp, real["response"])
    comp = {
        "hail": real,
        "hail_nodes": theirs_nodes,
        "outcome": {
            "exalloc": outcome(inp, {n: list(v) for n, v in report.placements}),
            "hail": outcome(inp, theirs_nodes),
        },
        "hail_placements": {i.name: [p] + ([s] if s else []) for i, p, s in theirs_pl},
        "hail_check": [str(v) for v in theirs.violations],
        "hail_objectives": shown_objectives(theirs.objectives),
        "exalloc_objectives": shown_objectives(mine.objectives),
        "nodes": _vectors(states, ours, theirs_pl),
    }
    return replace(report, compare=comp)


def _vectors(states: ClusterState, ours: list, theirs: list) -> list[dict[str, Any]]:
    """Per node touched by either answer: allocation vector before / exalloc / hail."""

    def after(placements: list) -> Mapping[str, NodeState]:
        state = states
        for inst, p, s in placements:
            state = state.placed(inst, p, s)
        return state.nodes

    a, b = after(ours), after(theirs)
    touched = {p for _, p, _ in ours + theirs} | {s for _, _, s in ours + theirs if s}
    rows = []
    for n in [x for x in states.nodes if x in touched]:
        tests = minimal_instances(states.ipolicy_of(n))
        rows.append(
            {
                "node": n,
                "before": vector_of(tests)(states.nodes[n]),
                "exalloc": vector_of(tests)(a[n]),
                "hail": vector_of(tests)(b[n]),
                "disk_before": states.nodes[n].free_disk_mib,
                "disk_exalloc": a[n].free_disk_mib,
                "disk_hail": b[n].free_disk_mib,
            }
        )
    return rows


def _yes(v: Any) -> str:
    if v is None:
        return "-"
    return v if isinstance(v, str) else ("yes" if v else "no") if isinstance(v, bool) else str(v)


def _vec(v: Sequence[int]) -> str:
    return "[" + ",".join(str(x) for x in v) + "]"


def compare_text(report: Any) -> str:
    c = report.compare or {}
    real = c["hail"]
    run_ = report.runs[0] if report.runs else None
    timing = (
        f"{run_.solver} {run_.summary()}, build {run_.build_s:.3f} s, solve {run_.solve_s:.3f} s"
        if run_
        else "no solve"
    )
    lines = [
        f"exalloc ({timing}):",
        report.response,
        f"hail ({real_hail()}, {real['wall_s']:.3f} s):",
        json.dumps(real["response"], separators=(",", ":")),
        "",
    ]
    ours = dict(report.placements)
    theirs = c["hail_nodes"]
    names = list(dict.fromkeys([*ours, *theirs]))
    if names:
        w = max(12, *(len(n) for n in names))
        lines.append(f"{'instance':<{w}}  {'exalloc':<28}  hail")
        for n in names:
            a = "/".join(ours.get(n, ())) or "-"
            b = "/".join(theirs.get(n, ())) or "-"
            mark = "" if a == b else "   *"
            lines.append(f"{n:<{w}}  {a:<28}  {b}{mark}")
        lines.append("")
    mine, hail = c["outcome"]["exalloc"], c["outcome"]["hail"]
    lines.append(f"{'after the answer':<24}{'exalloc':<24}hail")
    for key, label in (
        ("instances", "instances placed/moved"),
        ("score", "cluster score"),
        ("n1_exact", "N+1 redundant (exact)"),
        ("n1_greedy", "N+1 (htools' greedy)"),
    ):
        a, b = mine[key], hail[key]
        a, b = (f"{a:.8f}", f"{b:.8f}") if key == "score" else (_yes(a), _yes(b))
        lines.append(f"{label:<24}{a:<24}{b}")
    if c["hail_check"]:
        lines.append("hail's answer fails the checker: " + "; ".join(c["hail_check"]))
    if not c["nodes"] or not report.runs:  # the dedicated metric only where it is the metric
        return "\n".join(lines)
    lines.append("")
    eo, ho = c["exalloc_objectives"], c["hail_objectives"]
    lines.append("allocation vectors (test instances by min disk, descending)")
    lines.append(f"{'':<24}{'exalloc':<24}hail")
    lines.append(
        f"{'lost, total':<24}{_vec(eo.get('lost_allocations_total', ())):<24}"
        f"{_vec(ho.get('lost_allocations_total', ()))}"
    )
    lines.append(
        f"{'cluster after':<24}{_vec(eo.get('allocation_vector_after', ())):<24}"
        f"{_vec(ho.get('allocation_vector_after', ()))}"
    )
    lines.append(
        f"{'remaining disk MiB':<24}{eo.get('remaining_disk_mib', 0)!s:<24}"
        f"{ho.get('remaining_disk_mib', 0)}"
    )
    if c["nodes"]:
        lines.append("")
        w = max(8, *(len(r["node"]) for r in c["nodes"]))
        lines.append(
            f"{'node':<{w}}  {'before':<14}{'exalloc':<14}{'hail':<14}disk before/exalloc/hail"
        )
        for r in c["nodes"]:
            lines.append(
                f"{r['node']:<{w}}  {_vec(r['before']):<14}{_vec(r['exalloc']):<14}"
                f"{_vec(r['hail']):<14}{r['disk_before']}/{r['disk_exalloc']}/{r['disk_hail']}"
            )
    return "\n".join(lines)
