"""Random hspace questions on generated clusters, for tests/test_space_exact.py and
benchmarks/sweep_space.py. Test and benchmark helper only.

A case is a heterogeneous cluster of tests/htools_gen.py (1-3 groups, existing instances of the
chosen templates, offline and drained nodes, policies), a template for the new instances
(drbd, plain or a shared-storage one), a spec and a set of hspace's options, with the command
line that asks the real hspace the same.
"""

from __future__ import annotations

import random
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import htools_gen as gen

from model.backends.iallocator import parse_request
from model.backends.text import dump_text, parse_text
from model.cluster import Cluster
from model.space import SpaceOptions, Spec, default_options

FAMILIES = ("drbd", "plain", "shared")
SHARED = ("ext", "rbd", "sharedfile", "diskless")


@dataclass(frozen=True)
class Case:
    seed: int
    cluster: Cluster
    spec: Spec
    options: SpaceOptions
    flags: tuple[str, ...]  # hspace's options for the same question


def case(
    seed: int, family: str | None = None, max_nodes: int = 10, *, offline_targets: bool = True
) -> Case:
    """The question of a seed: family cycles through drbd, plain and shared by default.
    `offline_targets`: global N+1 as htools decides it (offline nodes take re-placed
    instances), so that counts compare with hspace's."""
    rng = random.Random(seed)
    family = family or FAMILIES[seed % len(FAMILIES)]
    template = family if family != "shared" else rng.choice(SHARED)
    groups = rng.choice((1, 1, 2, 3))
    n_nodes = rng.randint(max(3, groups * 2), max(max_nodes, groups * 2))
    existing = rng.choice((("plain", "drbd"), ("drbd",), gen.ALL_TEMPLATES, ("ext", "rbd")))
    data = gen.cluster(
        rng, n_nodes, groups=groups, templates=existing, fill=rng.choice((0.1, 0.3, 0.5, None))
    )
    data = gen.allocate(rng, data, "plain")
    # through the text format, as hspace reads it (one disk per instance, of the total size)
    cluster = parse_text(dump_text(parse_request(gen.dumps(data)).cluster), "generated")
    spec = Spec(
        memory_mib=rng.choice((1024, 2048, 4096, 8192, 16384)),
        disk_mib=rng.choice((10240, 51200, 102400, 204800)),
        vcpus=rng.choice((1, 2, 4)),
        spindles=1,
    )
    given: dict = {"disk_template": template, "offline_targets": offline_targets}
    flags = [f"--disk-template={template}"]
    r = rng.random()
    if r < 0.2:
        given["capacity_checks"] = False
        flags.append("--no-capacity-checks")
    if rng.random() < 0.25:
        given["independent_groups"] = True
        flags.append("--independent-groups")
    if rng.random() < 0.25:
        given["accept_existing_errors"] = True
        flags.append("--accept-existing-errors")
    if rng.random() < 0.15:
        ratio = rng.choice((1.0, 2.0, 8.0))
        given["max_cpu"] = ratio
        flags.append(f"--max-cpu={ratio}")
    if rng.random() < 0.15:
        ratio = rng.choice((0.05, 0.2))
        given["min_disk"] = ratio
        flags.append(f"--min-disk={ratio}")
    if rng.random() < 0.1:
        node = rng.choice(cluster.nodes).name
        given["offline"] = (node,)
        flags.append(f"-O{node}")
    return Case(seed, cluster, spec, default_options(cluster, **given), tuple(flags))


def hspace_command(path: Path, c: Case) -> list[str]:
    """The real hspace on the same question, in its human-readable form: the machine-readable
    one refuses clusters with forthcoming instances ("internal inconsistency": hspace counts
    them as allocated but not as placed)."""
    s = c.spec
    alloc = f"{s.disk_mib},{s.memory_mib},{s.vcpus},{s.spindles}"
    return [
        "hspace",
        "-t",
        str(path),
        f"--standard-alloc={alloc}",
        # a tier spec below every policy's minimum memory: the tiered phase, which hspace
        # always runs, stops at once instead of shrinking for minutes
        "--tiered-alloc=1024,64,1",
        *c.flags,
    ]


ALLOC = re.compile(r"Normal \(fixed-size\) allocation results:\n  - +(\d+) instances allocated")


def hspace_count(path: Path, c: Case, timeout: float = 300) -> int | None:
    """hspace's standard count, None when it exits with an error (no candidates)."""
    proc = subprocess.run(hspace_command(path, c), capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        return None
    found = ALLOC.search(proc.stdout)
    return int(found.group(1)) if found else None


@dataclass(frozen=True)
class Run:
    """One program's answer to a command: stdout, stderr, exit code and the files it wrote."""

    stdout: str
    stderr: str
    code: int
    files: dict[str, str]


def greedy_flags(c: Case, variant: int) -> list[str]:
    """hspace's command line for a case, beyond the cluster: the spec, its flags and one of
    four output variants: human, machine-readable, `-S` with `-p` and `-v -v` (the three with
    hspace_command's tier spec below every policy, so that the tiered phase stops at once),
    and a tiered phase from twice the standard spec with `-l 5` (it shrinks for every unit down
    to hspace's floors once nothing fits: hundreds of levels)."""
    s = c.spec
    flags = [f"--standard-alloc={s.disk_mib},{s.memory_mib},{s.vcpus},{s.spindles}", *c.flags]
    quick = ["--tiered-alloc=1024,64,1"]
    variants = (
        quick,
        [*quick, "--machine-readable"],
        [*quick, "-S", "saved", "-pname,pcnt,fmem,fdsk", "-v", "-v"],
        [f"--tiered-alloc={2 * s.disk_mib},{2 * s.memory_mib},{2 * s.vcpus}", "-l", "5"],
    )
    return flags + variants[variant % len(variants)]


def run_both(
    path: Path, flags: list[str], work: Path, timeout: float = 300, option: str = "-t"
) -> tuple[Run, Run]:
    """The real hspace and `exalloc space --greedy` on the same command (`option` names how
    `path` is read: -t, or -I for a request), each in its own directory (the -S paths they
    print are the same)."""
    from shelltests import exalloc_scripts

    exalloc = str(exalloc_scripts()["exalloc"])
    out = []
    for name, argv in (("real", ["hspace"]), ("port", [exalloc, "space", "--greedy"])):
        where = work / name
        where.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(
            [*argv, option, str(path), *flags],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=where,
        )
        files = {p.name: p.read_text() for p in sorted(where.iterdir())}
        out.append(Run(proc.stdout, proc.stderr, proc.returncode, files))
    return out[0], out[1]
