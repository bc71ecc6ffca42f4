"""`exalloc redistribute`, `compress` and `evacuate`: super-cluster operations, proven
(docs/groups.md). Read the cluster, ask the strategy (solvers/strategies/groups.py), have the
independent checks judge the plan (strict replay of every relocation, every required node's
evacuation plan replayed after it), run the greedy baselines, print."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from model.backends import load_cluster
from model.errors import CheckFailedError, ExallocError, InputError
from model.groups import (
    Relocation,
    Resources,
    Storage,
    check_relocations,
    crosses_groups,
    format_commands,
    group_nodes,
    hosts,
    job_commands,
    jobsets,
    move_kind,
    storage_of,
)
from model.state import ClusterState, node_states, unique_instance_names
from solvers.strategies import groups as strategy
from solvers.strategies.relocation import Outcome, replay_verdicts

HAIL = Path("/usr/lib/ganeti/iallocators/hail")


def _load(args: Any, what: str) -> tuple[ClusterState, Storage]:
    cluster = load_cluster(args.text_data)
    unique_instance_names(cluster, what)
    state = node_states(cluster)
    return state, storage_of(state, getattr(args, "pool_prefix", None) or "pool:")


def _options(args: Any) -> dict[str, Any]:
    return {
        "mode": getattr(args, "n1", "hard"),
        "offline_targets": getattr(args, "offline_targets", False),
        "options": args.solver_options,
    }


def verify(state: ClusterState, storage: Storage, outcome: Outcome | None, mode: str) -> None:
    """The independent checks every printed plan passed: each relocation replayed with the
    strict adds, then every node that must stay evacuable has its evacuation plan replayed on
    the cluster after them."""
    if outcome is None or outcome.plan is None:
        return
    after, broken = check_relocations(state, storage, outcome.plan.relocations)
    if broken:
        raise CheckFailedError(
            "plan fails the independent check: " + "; ".join(map(str, broken[:3]))
        )
    bad = replay_verdicts(after, outcome.plan.verdicts, mode)
    if bad:
        raise CheckFailedError("a node loses its evacuation plan: " + "; ".join(bad[:3]))


def _group_name(state: ClusterState, uuid: str) -> str:
    return state.cluster.group(uuid).name


def relocation_json(state: ClusterState, r: Relocation) -> dict[str, Any]:
    return {
        "instance": r.instance,
        "from": [n for n in (r.old_primary, r.old_secondary) if n],
        "to": [n for n in (r.primary, r.secondary) if n],
        "from_group": _group_name(state, state.nodes[r.old_primary].group_uuid),
        "to_group": _group_name(state, state.nodes[r.primary].group_uuid),
        "kind": move_kind(state.demands[r.instance].disk_template),
        "commands": [f"gnt-instance {c}" for c in job_commands(state, r)],
    }


def relocation_lines(
    state: ClusterState, relocs: tuple[Relocation, ...] | list[Relocation]
) -> list[str]:
    if not relocs:
        return []
    width = max(len(r.instance) for r in relocs)
    out = []
    for r in relocs:
        src = ":".join(n for n in (r.old_primary, r.old_secondary) if n)
        dst = ":".join(n for n in (r.primary, r.secondary) if n)
        sg = _group_name(state, state.nodes[r.old_primary].group_uuid)
        dg = _group_name(state, state.nodes[r.primary].group_uuid)
        where = f"{sg} {src} -> {dg} {dst}" if crosses_groups(state, r) else f"{src} -> {dst}"
        kind = move_kind(state.demands[r.instance].disk_template)
        out.append(f"  {r.instance:<{width}}  {where}  ({kind})")
    return out


def outcome_json(outcome: Outcome | None) -> dict[str, Any]:
    return {} if outcome is None else outcome.to_json()


def _fmt_number(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and x.is_integer():
        return str(int(x))
    return f"{x:.3g}" if isinstance(x, float) else str(x)


def outcome_line(outcome: Outcome) -> str:
    timing = (
        f"{outcome.rounds} round(s), {outcome.scenarios} failure packing(s), "
        f"{outcome.cuts} cut(s); build {outcome.build_s:.2f} s, solve {outcome.solve_s:.2f} s, "
        f"N+1 checks {outcome.check_s:.2f} s"
    )
    if outcome.status == "infeasible" or not outcome.objective:
        return f"{outcome.status}; {timing}"
    objective = ", ".join(
        f"{n} {_fmt_number(v)}" for n, v in zip(outcome.stages, outcome.objective, strict=False)
    )
    bound = ", ".join(_fmt_number(b) for b in outcome.bound)
    gaps = ", ".join(_fmt_number(g) for g in outcome.gap)
    return f"{outcome.status} ({objective}; bound {bound}; gap {gaps}); {timing}"


def health_lines(state: ClusterState, h: strategy.Health) -> list[str]:
    out = []
    for g in h.groups.values():
        verdict = {True: "healthy", False: "unhealthy", None: "undecided"}[g.healthy]
        details = []
        if g.verdict.offline_hosts:
            details.append("offline nodes hosting instances: " + ", ".join(g.verdict.offline_hosts))
        if g.failing:
            details.append("not evacuable: " + ", ".join(g.failing))
        peers = ", ".join(_group_name(state, p) for p in g.peers) or "none (alone)"
        extra = f" ({'; '.join(details)})" if details else ""
        out.append(f"  group {g.name}: {verdict}{extra}; peers: {peers}")
    return out


def health_json(state: ClusterState, h: strategy.Health) -> list[dict[str, Any]]:
    return [
        {
            "name": g.name,
            "healthy": g.healthy,
            "redundant": g.verdict.redundant,
            "offline_hosts": list(g.verdict.offline_hosts),
            "not_evacuable": list(g.failing),
            "peers": [_group_name(state, p) for p in g.peers],
        }
        for g in h.groups.values()
    ]


def _commands(state: ClusterState, relocs: tuple[Relocation, ...]) -> str:
    return format_commands(state, jobsets(state, relocs))


# --- redistribute ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RedistributeReport:
    source: str
    state: ClusterState
    result: strategy.Redistribution
    greedy: Any  # model.groups_greedy.GreedyResult or None
    print_commands: bool
    greedy_problems: list[str] = field(default_factory=list)  # its result by exact checks

    @property
    def relocations(self) -> tuple[Relocation, ...]:
        return strategy.relocations_of(self.result.outcome)

    def text(self) -> str:
        r = self.result
        lines = [f"Cluster {self.source}: {len(r.health.groups)} groups, exact N+1 per node"]
        lines += health_lines(self.state, r.health)
        if r.outcome is None:
            lines.append(f"Redistribution: {r.reason}")
        else:
            o = r.outcome
            if o.status == "infeasible":
                lines.append(f"Redistribution: no plan exists (proven): {o.reason}")
            else:
                lines.append(
                    f"Redistribution: {len(self.relocations)} relocation(s), {outcome_line(o)}"
                )
                lines += relocation_lines(self.state, self.relocations)
        if self.greedy is not None:
            g = self.greedy
            done = (
                ", ".join(f"{_group_name(self.state, k)} {v}" for k, v in g.groups.items())
                or "nothing to do"
            )
            lines.append(
                f"Greedy (the design's algorithm, htools' allocation): {g.moves} "
                f"relocation(s); {done}"
            )
            lines.append("  judged by exact checks: " + _judged(self.greedy_problems))
        if self.print_commands and self.relocations:
            lines.append("Commands:" + _commands(self.state, self.relocations).rstrip("\n"))
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        r = self.result
        out: dict[str, Any] = {
            "groups": health_json(self.state, r.health),
            "unhealthy": [_group_name(self.state, g) for g in r.unhealthy],
            "healthy_after": r.outcome is not None and r.outcome.plan is not None,
            **outcome_json(r.outcome),
            "moves": len(self.relocations),
            "relocations": [relocation_json(self.state, x) for x in self.relocations],
        }
        if r.outcome is None:
            out["status"] = (
                "infeasible" if r.reason and r.reason.startswith("no plan") else "optimal"
            )
            out["reason"] = r.reason
        if self.greedy is not None:
            out["greedy"] = {
                **greedy_json(self.state, self.greedy),
                "healthy_after": not self.greedy_problems,
                "problems": self.greedy_problems[:20],
            }
        return out


def _judged(problems: list[str]) -> str:
    if not problems:
        return "every group healthy, every check passed"
    more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
    return problems[0] + more


def greedy_json(state: ClusterState, g: Any) -> dict[str, Any]:
    return {
        "moves": g.moves,
        "relocations": [relocation_json(state, x) for x in g.relocations],
        "groups": {_group_name(state, k): v for k, v in g.groups.items()},
        "failed": [{"instance": i, "reason": why} for i, why in g.failed],
    }


def run_redistribute(args: Any) -> RedistributeReport:
    from model import groups_greedy

    state, storage = _load(args, "exalloc redistribute")
    opts = _options(args)
    result = strategy.redistribute(state, storage, **opts)
    verify(state, storage, result.outcome, opts["mode"])
    greedy = (
        None if getattr(args, "no_greedy", False) else groups_greedy.redistribute(state, storage)
    )
    problems: list[str] = []
    if greedy is not None:
        groups = list(result.health.groups)
        everyone = [n for g in groups for n in group_nodes(state, g)]
        problems = strategy.judge(state, storage, greedy.relocations, everyone, groups, **opts)
    return RedistributeReport(
        args.text_data, state, result, greedy, bool(args.print_commands), problems
    )


# --- compress --------------------------------------------------------------------------------


def _res(r: Resources) -> dict[str, int]:
    return {"memory_mib": r.memory_mib, "disk_mib": r.disk_mib, "vcpus": r.vcpus}


@dataclass(frozen=True)
class CompressReport:
    source: str
    state: ClusterState
    result: strategy.Compression
    greedy: dict | None  # uuid -> (relocations, why)
    hail: dict | None  # uuid -> (moved, failed) from the real hail's change-group
    print_commands: bool
    verbose: bool

    def _evacuable(self, g: str) -> bool | None:
        o = self.result.groups[g]
        if isinstance(o, str):
            return False
        if o.status in ("optimal", "feasible"):
            return True
        return False if o.status == "infeasible" else None

    def text(self) -> str:
        r = self.result
        st = self.state
        lines = [f"Cluster {self.source}: {len(r.health.groups)} groups"]
        lines += health_lines(st, r.health)
        lines.append(
            "Compression (exact: every strict check, no peer node loses its evacuation plan):"
        )
        for g, o in r.groups.items():
            name = _group_name(st, g)
            free = r.free[g]
            head = (
                f"  {name}: evacuable {_yes(self._evacuable(g))}; free {free.memory_mib} MiB, "
                f"{free.disk_mib} MiB disk, {free.vcpus} vCPUs"
            )
            if isinstance(o, str):
                lines.append(f"{head}; {o}")
                continue
            moves = len(o.plan.relocations) if o.plan else 0
            tail = o.reason if o.status == "infeasible" else f"{moves} relocation(s)"
            lines.append(f"{head}; {tail}; {outcome_line(o)}")
            if self.greedy is not None:
                gm = self.greedy.get(g)
                lines.append(
                    "    greedy (design): "
                    + (
                        "not a candidate"
                        if gm is None
                        else ("yes" if gm[1] is None else f"no: {gm[1]}")
                    )
                )
            if self.hail is not None and g in self.hail:
                moved, failed = self.hail[g]
                lines.append(
                    f"    hail change-group: {len(moved)} moved, {len(failed)} failed"
                    + (f" (e.g. {failed[0][0]}: {failed[0][1]})" if failed else "")
                )
        if r.best is None:
            lines.append("Best: no group can be emptied")
        else:
            best = r.groups[r.best]
            relocs = best.plan.relocations if isinstance(best, Outcome) and best.plan else ()
            lines.append(
                f"Best: {_group_name(st, r.best)} (the most free resources), "
                f"{len(relocs)} relocation(s)"
            )
            lines += relocation_lines(st, relocs)
            if self.print_commands and relocs:
                lines.append("Commands:" + _commands(st, relocs).rstrip("\n"))
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        r = self.result
        st = self.state
        groups = []
        for g, o in r.groups.items():
            item: dict[str, Any] = {
                "name": _group_name(st, g),
                "evacuable": self._evacuable(g),
                "free": _res(r.free[g]),
                "used": _res(r.used[g]),
            }
            if isinstance(o, str):
                item["reason"] = o
                item["status"] = "infeasible"
            else:
                item.update(outcome_json(o))
                if o.plan is not None:
                    item["plan"] = [relocation_json(st, x) for x in o.plan.relocations]
                elif o.status == "optimal":
                    item["plan"] = []
            if self.greedy is not None:
                gm = self.greedy.get(g)
                item["greedy"] = (
                    None
                    if gm is None
                    else {
                        "evacuable": gm[1] is None,
                        "moves": len(gm[0]),
                        **({"reason": gm[1]} if gm[1] else {}),
                    }
                )
            if self.hail is not None and g in self.hail:
                moved, failed = self.hail[g]
                item["hail"] = {
                    "evacuable": not failed,
                    "moved": len(moved),
                    "failed": [{"instance": i, "reason": w} for i, w in failed],
                }
            groups.append(item)
        return {"groups": groups, "best": None if r.best is None else _group_name(st, r.best)}


def _yes(x: bool | None) -> str:
    return {True: "yes", False: "no", None: "undecided"}[x]


def run_compress(args: Any) -> CompressReport:
    from model import groups_greedy

    state, storage = _load(args, "exalloc compress")
    opts = _options(args)
    result = strategy.compress(state, storage, only=args.group or None, **opts)
    for o in result.groups.values():
        if isinstance(o, Outcome):
            verify(state, storage, o, opts["mode"])
    greedy = None
    if not getattr(args, "no_greedy", False):
        only = [state.cluster.group(g).uuid for g in args.group] if args.group else None
        greedy = groups_greedy.compress(state, storage, only)
        evacuable = result.health.evacuable()
        for g, (moves, why) in list(greedy.items()):
            if why is None:
                peers = strategy.receiving_peers(state, result.health, g)
                required = [n for p in peers for n in group_nodes(state, p) if n in evacuable]
                bad = strategy.judge(state, storage, moves, required, **opts)
                if bad:
                    greedy[g] = (moves, "by exact checks: " + bad[0])
    hail = None
    if getattr(args, "compare", False):
        hail = {
            g: hail_change_group(
                args.text_data, state, g, strategy.receiving_peers(state, result.health, g)
            )
            for g in result.groups
            if hosts(state, group_nodes(state, g))
        }
    return CompressReport(
        args.text_data, state, result, greedy, hail, bool(args.print_commands), bool(args.verbose)
    )


def hail_change_group(
    path: str, state: ClusterState, group: str, targets: list[str]
) -> tuple[list, list]:
    """The real hail's change-group of every instance of `group` into `targets`: (moved,
    failed) as hail answers (IAllocator v2; the request is built from the snapshot)."""
    from model.generate import cluster_json

    tool = os.environ.get("EXALLOC_REAL_HAIL") or (
        str(HAIL) if HAIL.exists() else shutil.which("hail")
    )
    if not tool:
        raise InputError("--compare needs the real hail (scripts/get-ganeti-reference)")
    doc = cluster_json(state.cluster)
    admin = {"running": "up", "ADMIN_down": "down", "ADMIN_offline": "offline"}
    for inst in state.cluster.instances:
        body = doc["instances"][inst.name]
        body["admin_state"] = admin.get(inst.status, "up")
        body["tags"] = list(inst.tags)
        body["spindle_use"] = inst.spindle_use
        body["vcpus"] = inst.vcpus
    doc["request"] = {
        "type": "change-group",
        "instances": hosts(state, group_nodes(state, group)),
        "target_groups": targets,
    }
    with tempfile.TemporaryDirectory() as tmp:
        req = Path(tmp) / "change-group.json"
        req.write_text(json.dumps(doc))
        proc = subprocess.run([tool, str(req)], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise ExallocError(
            f"hail failed on the change-group of {path}: {proc.stderr.strip()[:200]}"
        )
    answer = json.loads(proc.stdout)
    if not answer.get("success"):
        names = doc["request"]["instances"]
        return [], [(n, str(answer.get("info"))) for n in names]
    moved, failed, _jobs = answer["result"]
    return list(moved), [(i, w) for i, w in failed]


# --- evacuate --------------------------------------------------------------------------------


@dataclass(frozen=True)
class EvacuateReport:
    source: str
    state: ClusterState
    result: strategy.Evacuation
    greedy: Any
    print_commands: bool
    notes: list[str] = field(default_factory=list)

    @property
    def relocations(self) -> tuple[Relocation, ...]:
        return strategy.relocations_of(self.result.outcome)

    def _counts(self, relocs) -> tuple[int, int]:  # noqa: ANN001
        cross = sum(1 for r in relocs if crosses_groups(self.state, r))
        return len(relocs), cross

    def text(self) -> str:
        r = self.result
        st = self.state
        o = r.outcome
        moved, cross = self._counts(self.relocations)
        lines = [
            f"Cluster {self.source}: evacuate {', '.join(r.nodes)} "
            f"({len(r.instances)} instance(s))",
            f"Evacuation: {moved} of {len(r.instances)} instance(s), {cross} across groups; "
            + outcome_line(o),
        ]
        lines += relocation_lines(st, self.relocations)
        left = [n for n in r.instances if n not in {x.instance for x in self.relocations}]
        if left:
            lines.append("  left in place (no plan moves them): " + ", ".join(left))
        if self.greedy is not None:
            gm, gc = self._counts(self.greedy.relocations)
            lines.append(
                f"Greedy (hail's node-evacuate, then the design's inter-group allocation): "
                f"{gm} of {len(r.instances)}, {gc} across groups"
            )
            lines.append("  judged by exact checks: " + _judged(self.notes))
        if self.print_commands and self.relocations:
            lines.append("Commands:" + _commands(st, self.relocations).rstrip("\n"))
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        r = self.result
        st = self.state
        moved, cross = self._counts(self.relocations)
        out: dict[str, Any] = {
            "nodes": list(r.nodes),
            "instances": list(r.instances),
            "evacuated": moved,
            "cross_group": cross,
            **outcome_json(r.outcome),
            "relocations": [relocation_json(st, x) for x in self.relocations],
            "left": [n for n in r.instances if n not in {x.instance for x in self.relocations}],
        }
        if self.greedy is not None:
            gm, gc = self._counts(self.greedy.relocations)
            out["greedy"] = {
                **greedy_json(st, self.greedy),
                "evacuated": gm,
                "cross_group": gc,
                "problems": self.notes[:20],
            }
        return out


def run_evacuate(args: Any) -> EvacuateReport:
    from model import groups_greedy

    state, storage = _load(args, "exalloc evacuate")
    nodes = [n for n in args.nodes.split(",") if n]
    if not nodes:
        raise InputError("--nodes: give at least one node")
    opts = _options(args)
    result = strategy.evacuate(state, storage, nodes, **opts)
    verify(state, storage, result.outcome, opts["mode"])
    greedy = (
        None if getattr(args, "no_greedy", False) else groups_greedy.evacuate(state, storage, nodes)
    )
    notes: list[str] = []
    if greedy is not None:
        evacuable = result.health.evacuable() - set(nodes)
        groups = {state.nodes[n].group_uuid for r in greedy.relocations for n in r.nodes()}
        required = [n for g in groups for n in group_nodes(state, g) if n in evacuable]
        notes = strategy.judge(state, storage, greedy.relocations, required, **opts)
    return EvacuateReport(args.text_data, state, result, greedy, bool(args.print_commands), notes)
