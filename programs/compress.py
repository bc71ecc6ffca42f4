"""`exalloc compress`: every group that can be emptied into its peer groups, proven, and the
plan for the one that frees the most (docs/groups.md); `--compare` runs the real hail's
change-group of each group beside it."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from model.errors import ExallocError, InputError, about
from model.groups import Resources, group_nodes, hosts
from model.state import ClusterState
from programs import groups as shared
from programs.groups import GroupOptions
from programs.reference import real_hail
from programs.sources import ClusterSource, source_of

if TYPE_CHECKING:  # the strategy imports Pyomo: loaded by `answer`, not by the parser
    from solvers.strategies import groups as strategy


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
    timing: dict[str, float] = field(default_factory=dict)  # seconds per stage (--json)

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
        lines += shared.health_lines(st, r.health)
        lines.append(
            "Compression (exact: every strict check, no peer node loses its evacuation plan):"
        )
        for g, o in r.groups.items():
            name = shared.group_name(st, g)
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
            lines.append(f"{head}; {tail}; {shared.outcome_line(o)}")
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
            from solvers.strategies.relocation import Outcome

            best = r.groups[r.best]
            relocs = best.plan.relocations if isinstance(best, Outcome) and best.plan else ()
            lines.append(
                f"Best: {shared.group_name(st, r.best)} (the most free resources), "
                f"{len(relocs)} relocation(s)"
            )
            lines += shared.relocation_lines(st, relocs)
            if self.print_commands and relocs:
                lines.append("Commands:" + shared.commands_text(st, relocs).rstrip("\n"))
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        r = self.result
        st = self.state
        groups = []
        for g, o in r.groups.items():
            item: dict[str, Any] = {
                "name": shared.group_name(st, g),
                "evacuable": self._evacuable(g),
                "free": _res(r.free[g]),
                "used": _res(r.used[g]),
            }
            if isinstance(o, str):
                item["reason"] = o
                item["status"] = "infeasible"
            else:
                item.update(shared.outcome_json(o))
                if o.plan is not None:
                    item["plan"] = [shared.relocation_json(st, x) for x in o.plan.relocations]
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
        best = None if r.best is None else shared.group_name(st, r.best)
        return {"groups": groups, "best": best, "timing": dict(self.timing)}


def _yes(x: bool | None) -> str:
    return {True: "yes", False: "no", None: "undecided"}[x]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = "Super-cluster compression (docs/groups.md)."
    shared.add_super_cluster_arguments(parser)
    parser.add_argument(
        "-G", "--group", action="append", metavar="GROUP", help="only this group (repeatable)"
    )
    parser.add_argument(
        "--compare",
        action="store_true",
        help="also run the real hail's change-group for every group",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="more detail")


def answer(where: ClusterSource | str, options: GroupOptions) -> CompressReport:
    from model import groups_greedy
    from solvers.strategies import groups as strategy
    from solvers.strategies.relocation import Outcome

    label = shared.as_source(where).label
    state, storage = shared.load(where, options, "exalloc compress")
    kw = options.strategy_kwargs()
    only = list(options.groups) or None
    clock = shared.Stages()
    result = strategy.compress(state, storage, only=only, **options.exact_kwargs())
    clock.stage("exact_s")
    for o in result.groups.values():
        if isinstance(o, Outcome):
            shared.verify(state, storage, o, options.mode)
    clock.stage("check_s")
    greedy = None
    if options.greedy:
        uuids = [state.cluster.group(g).uuid for g in only] if only else None
        end = options.greedy_deadline()
        greedy = groups_greedy.compress(state, storage, uuids, end)
        evacuable = result.health.evacuable()
        for g, (moves, why) in list(greedy.items()):
            if why is None:
                peers = strategy.receiving_peers(state, result.health, g)
                required = [n for p in peers for n in group_nodes(state, p) if n in evacuable]
                bad = strategy.judge(state, storage, moves, required, **kw, deadline=end)
                if bad:
                    greedy[g] = (moves, "by exact checks: " + bad[0])
    hail = None
    if options.compare:
        hail = {
            g: hail_change_group(label, state, g, strategy.receiving_peers(state, result.health, g))
            for g in result.groups
            if hosts(state, group_nodes(state, g))
        }
    clock.stage("greedy_s")
    return CompressReport(
        label, state, result, greedy, hail, options.print_commands, options.verbose, clock.seconds
    )


def run(args: Any) -> CompressReport:
    shared.refuse_cpsat(args, "compress")
    source = source_of(args)
    with about(source.label):
        return answer(source, GroupOptions.of(args))


def hail_change_group(
    label: str, state: ClusterState, group: str, targets: list[str]
) -> tuple[list, list]:
    """The real hail's change-group of every instance of `group` into `targets`: (moved,
    failed) as hail answers (IAllocator v2; the request is built from the snapshot)."""
    from model.generate import cluster_json

    hail = real_hail()  # EXALLOC_REAL_HAIL, when set, is used as it is
    tool = str(hail) if hail.exists() or os.environ.get("EXALLOC_REAL_HAIL") else None
    tool = tool or shutil.which("hail")
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
            f"hail failed on the change-group of {label}: {proc.stderr.strip()[:200]}"
        )
    answer = json.loads(proc.stdout)
    if not answer.get("success"):
        names = doc["request"]["instances"]
        return [], [(n, str(answer.get("info"))) for n in names]
    moved, failed, _jobs = answer["result"]
    return list(moved), [(i, w) for i, w in failed]
