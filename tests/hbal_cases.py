"""Random hbal questions on generated unbalanced groups, for tests/test_hbal_greedy.py and
benchmarks/sweep_hbal.py. Test and benchmark helper only.

A case is a cluster of tests/htools_gen.py (1-2 groups) whose nodes are filled unevenly, from
empty to crowded (so that drbd secondaries often leave nodes N+1 unhappy), with instances of one
family (drbd, drbd with plain, ext and other externally mirrored templates), offline and drained
nodes, down and offline instances; and a set of hbal's options, drawn from those that change its
search or its output. `flags(case, prefix)` is the command line both programs get.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

import htools_gen as gen

from model.backends.iallocator import parse_request
from model.backends.text import dump_text
from model.cluster import Cluster

FAMILIES = {
    "drbd": ("drbd",),
    "plain": ("drbd", "plain", "plain"),
    "ext": ("ext", "rbd", "sharedfile", "ext"),
}
#: from empty to crowded: the unbalanced groups hbal is for
FILLS = (0.0, 0.0, 0.05, 0.2, 0.5, 0.8, 0.9, 0.95)


@dataclass(frozen=True)
class Case:
    seed: int
    family: str
    cluster: Cluster
    text: str  # the snapshot, as both programs read it
    options: tuple[str, ...]  # hbal's options (but -t, -S and -C FILE: see `flags`)
    save: bool
    commands: str | None  # None, "-" or "file"


def _options(rng: random.Random, cluster: Cluster) -> list[str]:
    nodes = [n.name for n in cluster.nodes]
    insts = [i.name for i in cluster.instances]
    out: list[str] = []
    groups = [g for g in cluster.groups if any(n.group_uuid == g.uuid for n in cluster.nodes)]
    if len(groups) > 1 or rng.random() < 0.2:
        out += ["-G", rng.choice(groups).name]
    picks = rng.sample(range(14), rng.choice((0, 1, 1, 2, 3)))
    for p in picks:
        if p == 0:
            out += ["-l", str(rng.randint(1, 4))]
        elif p == 1:
            out.append("--evac-mode")
        elif p == 2:
            out.append("--restricted-migration")
        elif p == 3:
            out.append(rng.choice(("--no-disk-moves", "--no-instance-moves")))
        elif p == 4:
            out.append("--ignore-soft-errors")
        elif p == 5:
            out += ["-g", rng.choice(("0", "0.05", "0.5")), "--min-gain-limit"]
            out.append(rng.choice(("0", "1", "10")))
        elif p == 6:
            out += ["-e", rng.choice(("0.1", "1", "5"))]
        elif p == 7 and nodes:
            out += ["-O", rng.choice(nodes)]
        elif p == 8:
            out += ["--max-cpu", rng.choice(("1", "2.5", "8"))]
        elif p == 9:
            out += ["--min-disk", rng.choice(("0.1", "0.3"))]
        elif p == 10:
            out.append("--ignore-dynu")
        elif p == 11 and insts:
            out += ["--select-instances", ",".join(rng.sample(insts, min(len(insts), 3)))]
        elif p == 12 and insts:
            out += ["--exclude-instances", ",".join(rng.sample(insts, min(len(insts), 3)))]
        elif p == 13:
            out += ["--exclusion-tags", "test"]
    shown = rng.random()
    if shown < 0.15:
        out += ["-v", "-v", "-v"]
    elif shown < 0.25:
        out.append("-q")
    if rng.random() < 0.2:
        out.append("-pname,pcnt,scnt,fmem,fdsk,rmem")
    if rng.random() < 0.15:
        out.append("--print-instances")
    if rng.random() < 0.1:
        out.append("--first-job-group")
    return out


def _n1_failures(rng: random.Random, cluster: Cluster) -> Cluster:
    """One or two nodes holding drbd secondaries report less free memory than the largest
    memory they reserve for one primary (htools' rMem), so they fail N+1 at load."""
    reserve: dict[str, dict[str, int]] = {}
    for i in cluster.instances:
        if i.secondary and i.auto_balance and i.status != "ADMIN_offline" and not i.forthcoming:
            peers = reserve.setdefault(i.secondary, {})
            peers[i.primary] = peers.get(i.primary, 0) + i.memory_mib
    nodes = [n for n in cluster.nodes if n.name in reserve and not n.offline]
    if not nodes:
        return cluster
    chosen = {n.name for n in rng.sample(nodes, min(len(nodes), rng.choice((1, 2))))}
    return replace(
        cluster,
        nodes=tuple(
            replace(n, free_memory_mib=max(0, max(reserve[n.name].values()) - 1))
            if n.name in chosen
            else n
            for n in cluster.nodes
        ),
    )


def case(seed: int, family: str | None = None, max_nodes: int = 8) -> Case:
    rng = random.Random(seed)
    family = family or rng.choice(sorted(FAMILIES))
    groups = rng.choice((1, 1, 1, 2))
    n_nodes = rng.randint(max(3, 2 * groups), max_nodes)
    data = gen.cluster(
        rng, n_nodes, groups=groups, templates=FAMILIES[family], fills=FILLS, policies=False
    )
    cluster = parse_request(gen.dumps(gen.allocate(rng, data, "drbd"))).cluster
    # a few dozen instances at most (the search is quadratic in them), then, in a third of the
    # cases, nodes that report less free memory than their N+1 reserve (unhappy at load)
    cluster = replace(cluster, instances=cluster.instances[: rng.randint(4, 30)])
    if rng.random() < 0.35:
        cluster = _n1_failures(rng, cluster)
    commands = rng.choice((None, None, "-", "file"))
    return Case(
        seed,
        family,
        cluster,
        dump_text(cluster),
        tuple(_options(rng, cluster)),
        rng.random() < 0.3,
        commands,
    )


def flags(c: Case, data: str, prefix: str) -> list[str]:
    """The command line for the snapshot at `data`; -S and -C FILE write under `prefix`."""
    out = ["-t", data, *c.options]
    if c.save:
        out += ["-S", f"{prefix}/saved"]
    if c.commands == "-":
        out.append("-C")
    elif c.commands == "file":
        out.append(f"-C{prefix}/cmds.sh")
    return out
