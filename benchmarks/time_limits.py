"""--time-limit against wall time on the largest benchmark inputs (issue 40, item 4).

    python benchmarks/time_limits.py [--limits 10,30] [--nodes 200] [--instances 50]
                                     [--only hail,space,balance,roll,normal,...]
                                     [--margin-s 1] [--margin-share 0.02] [--keep DIR]

Every command that takes --time-limit, on the largest input its own benchmark uses, run as a
user runs it: `python -m cli --json COMMAND ... --time-limit T` in a fresh process, its wall
time (start-up and imports included: the limit counts from the process's start since issue
40) set beside the limit. `within`: at most T + `--margin-s` + `--margin-share` x T (1 s + 2 %
by default: the parts not cut inside, a HiGHS copy, one N+1 decision, the checker's replay,
the JSON's printing), the status and the stages the answer's --json reports (`timing`:
`startup_s`, the program's own stages, `answer_s`). The inputs, each from its benchmark's
generator (heterogeneous clusters):

* hail: the drbd multi-allocate of docs/scale.md (50 instances on 200 dedicated nodes,
  tests/dedicated_gen.py, seed of benchmarks/bench_hail.py), the heterogeneous 1,000-node
  allocate (drbd), a normal-group multi-allocate of 50 mixed instances on 200 heterogeneous
  nodes (benchmarks/bench_joint.py);
* space: bench_space's 200-node cluster, tiered from its tier spec, and its 1,000-node
  cluster (standard spec);
* balance: bench_balance's 200-node group, K = 10 (as `bench_balance.py --nodes 200 --steps
  10`);
* roll --memory-aware: bench_roll's 2,000-node random family (seed 0), also at 60 s;
* squeeze --move drbd: bench_squeeze's largest drbd case (64 nodes, 192 ext, 62 drbd);
* n1: bench_groups' 1,000 nodes in 5 groups; redistribute, compress and evacuate:
  bench_groups' super cluster (500 nodes in 5 groups; evacuate: 5 nodes of the first group);
* partition: bench_partition's largest server (100 disks, 40 spaces).

A figure measured on a loaded machine says so: each row has the load average when it ended.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import dedicated_gen as gen  # noqa: E402
from roll_gen import RollSpec, generate  # noqa: E402

from benchmarks import (  # noqa: E402
    bench_balance,
    bench_groups,
    bench_joint,
    bench_partition,
    bench_space,  # noqa: E402
)
from benchmarks.bench_hail import heterogeneous  # noqa: E402
from model.backends.iallocator import parse_request  # noqa: E402
from model.backends.text import dump_text  # noqa: E402

#: (label, the command's words with {file} (and {hw}) for the input's files, how to write
#: each file (name -> a function returning its path; called only when the input runs), its
#: limits when --limits is not given)
Input = tuple[str, list[str], dict[str, Callable[[], str]], tuple[float, ...]]


def _spec_words(spec) -> str:  # noqa: ANN001 - model.space.Spec
    """A spec as the command line's DISK,RAM,CPU."""
    return f"{spec.disk_mib},{spec.memory_mib},{spec.vcpus}"


def inputs(tmp: Path, n_nodes: int, n_instances: int) -> list[Input]:
    """Every input, its files written in `tmp`."""
    out: list[Input] = []

    def file(name: str, text: Callable[[], str]) -> Callable[[], str]:
        """The file's path, written the first time it is asked for."""

        @functools.cache
        def write() -> str:
            path = tmp / name
            path.write_text(text())
            return str(path)

        return write

    def multi() -> dict:
        rng = random.Random(9000 + n_instances + 1)
        return gen.multi_allocate(
            rng, n_nodes, n_instances, template="drbd", odd_nodes=False, fits=True
        )

    def hetero() -> dict:
        rng = random.Random(1000 * 7 + 1 + 1000)
        return heterogeneous(gen.allocate(rng, 1000, template="drbd", fits=True), rng)

    for i, (name, doc) in enumerate(
        (
            (f"hail: multi-allocate {n_instances} drbd on {n_nodes} dedicated nodes", multi),
            ("hail: allocate drbd, heterogeneous 1,000 nodes", hetero),
            (
                f"hail: multi-allocate {n_instances} mixed on {n_nodes} normal nodes",
                lambda: bench_joint.multi(n_nodes, n_instances, 0),
            ),
        )
    ):
        made = file(f"request-{i}.json", lambda doc=doc: json.dumps(doc()))
        out.append((name, ["hail", "{file}"], {"file": made}, (10, 30)))
    tier = _spec_words(bench_space.TIER)
    std = _spec_words(bench_space.STANDARD)
    out.append(
        (
            "space --tiered-alloc: 200 nodes (bench_space seed 0)",
            ["space", "-t", "{file}", "--tiered-alloc", tier, "--standard-alloc", std],
            {"file": file("space-200.data", lambda: dump_text(bench_space.cluster_of(0, 200)))},
            (10, 30),
        )
    )
    out.append(
        (
            "space: 1,000 nodes (bench_space seed 0)",
            ["space", "-t", "{file}", "--standard-alloc", std],
            {"file": file("space-1000.data", lambda: dump_text(bench_space.cluster_of(0, 1000)))},
            (10, 30),
        )
    )

    def group() -> str:
        doc = json.dumps(bench_balance.group(0, 200, 0.25))
        return dump_text(parse_request(doc, "bench").cluster)

    out.append(
        (
            "balance: 200 nodes, K = 10 (bench_balance seed 0)",
            ["balance", "-l", "10", "-t", "{file}"],
            {"file": file("balance-200.data", group)},
            (10, 30, 60),
        )
    )
    roll = RollSpec(nodes=2000, instances=6000, drbd_share=0.8, offline=2, fill=0.7, seed=0)
    out.append(
        (
            "roll --memory-aware: 2,000 nodes, random (bench_roll seed 0)",
            ["roll", "--memory-aware", "-t", "{file}"],
            {"file": file("roll-2000.data", lambda: dump_text(generate(roll)))},
            (10, 30, 60),
        )
    )
    from squeeze_gen import SqueezeSpec, drbd_cluster

    squeeze = SqueezeSpec(nodes=64, instances=192, seed=1, max_fill=0.5)
    out.append(
        (
            "squeeze --move drbd: 64 nodes, 192 ext, 62 drbd (bench_squeeze)",
            ["squeeze", "--move", "drbd", "-t", "{file}"],
            {"file": file("squeeze-64.data", lambda: dump_text(drbd_cluster(squeeze, 62)))},
            (10, 30),
        )
    )
    out.append(
        (
            "n1: 1,000 nodes in 5 groups (bench_groups seed 0)",
            ["n1", "-t", "{file}"],
            {
                "file": file(
                    "n1-1000.data", lambda: bench_groups._state(bench_groups.N1_GROUPS, 0)[1]
                )
            },
            (10, 30),
        )
    )
    super_file = file(
        "super-500.data", lambda: bench_groups._state(bench_groups.SUPER_GROUPS, 0)[1]
    )
    out.append(
        (
            "redistribute: 500 nodes in 5 groups (bench_groups seed 0)",
            ["redistribute", "-t", "{file}"],
            {"file": super_file},
            (10, 30),
        )
    )
    out.append(
        (
            "compress: 500 nodes in 5 groups (bench_groups seed 0)",
            ["compress", "-t", "{file}"],
            {"file": super_file},
            (10, 30),
        )
    )
    out.append(
        (
            "evacuate: 5 nodes of 500 in 5 groups (bench_groups seed 0)",
            ["evacuate", "-t", "{file}", "--nodes", "{victims}"],
            {"file": super_file, "victims": lambda: ",".join(_victims(super_file()))},
            (10, 30),
        )
    )
    server = functools.cache(lambda: bench_partition.instance_data(100, 40))
    out.append(
        (
            "partition: 100 disks, 40 spaces (bench_partition)",
            ["partition", "--schema", "{file}", "--hw-info", "{hw}"],
            {
                "file": file("schema.yaml", lambda: json.dumps(server()[0])),
                "hw": file("hw.yaml", lambda: json.dumps(server()[1])),
            },
            (10, 30),
        )
    )
    return out


def _victims(path: str) -> list[str]:
    """Five online nodes of the super cluster's first group (the unhealthy one)."""
    from model.backends.text import load_text

    cluster = load_text(Path(path))
    first = cluster.groups[0].uuid
    return [n.name for n in cluster.nodes if n.group_uuid == first and not n.offline][:5]


def stages_of(doc: object) -> dict[str, float]:
    """The answer's `timing` (startup_s, the stages, answer_s), else every number named *_s
    one level down (the commands that report their times their own way)."""
    if not isinstance(doc, dict):
        return {}
    timing = doc.get("timing")
    if isinstance(timing, dict):
        flat = {k: v for k, v in timing.items() if isinstance(v, int | float)}
        flat.update(
            {k: v for k, v in timing.get("stages", {}).items() if isinstance(v, int | float)}
        )
        return {k: round(v, 2) for k, v in flat.items()}
    found: dict[str, float] = {}
    for key, value in doc.items():
        if key.endswith("_s") and isinstance(value, int | float):
            found[key] = round(value, 2)
    return found


def status_of(doc: object) -> str:
    """The answer's status, where its --json names one."""
    if not isinstance(doc, dict):
        return ""
    for key in ("status",):
        if isinstance(doc.get(key), str):
            return doc[key]
    for value in doc.values():
        if isinstance(value, dict) and isinstance(value.get("status"), str):
            return value["status"]
    return ""


def run(words: list[str], limit: float, margin_s: float, share: float, keep: Path | None) -> dict:
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "cli", "--json", *words, "--time-limit", f"{limit:g}"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    wall = time.perf_counter() - start
    allowed = limit + margin_s + share * limit
    row: dict = {
        "limit_s": limit,
        "wall_s": round(wall, 2),
        "within": wall <= allowed,
        "allowed_s": round(allowed, 2),
        "exit": done.returncode,
        "load": os.getloadavg()[0],
    }
    if keep is not None:
        name = f"{words[0]}-{len(list(keep.iterdir()))}-{limit:g}"
        (keep / f"{name}.json").write_text(done.stdout)
        (keep / f"{name}.err").write_text(done.stderr)
    try:
        doc = json.loads(done.stdout)
    except ValueError:
        doc = None
    row["status"] = status_of(doc)
    row["stages"] = stages_of(doc)
    if isinstance(doc, dict) and words[0] == "hail":
        row["info"] = doc["response"]["info"][:90]
        row["solver_note"] = doc.get("solver_note", "")[:200]
    lines = done.stderr.strip().splitlines() or [""]
    row["note" if done.returncode == 0 else "error"] = lines[-1][:200]
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--limits", default="", help="e.g. 10,30 (default: each input's own)")
    p.add_argument("--nodes", type=int, default=200)
    p.add_argument("--instances", type=int, default=50)
    p.add_argument(
        "--only",
        default="",
        help="commands (hail,space,balance,roll,squeeze,n1,redistribute,compress,evacuate,"
        "partition) "
        "or words of the inputs' labels (normal, tiered) to run",
    )
    p.add_argument("--margin-s", type=float, default=1.0)
    p.add_argument("--margin-share", type=float, default=0.02)
    p.add_argument("--keep", type=Path, help="write each answer's stdout and stderr here")
    args = p.parse_args()
    only = set(args.only.split(",")) - {""}
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO
    ).stdout.strip()
    print(json.dumps({"commit": commit, "load": os.getloadavg()}), flush=True)
    with tempfile.TemporaryDirectory() as name:
        for label, words, files, own in inputs(Path(name), args.nodes, args.instances):
            if only and words[0] not in only and not any(w in label for w in only):
                continue
            limits = [float(x) for x in args.limits.split(",") if x] or own
            argv = [w.format(**{k: make() for k, make in files.items()}) for w in words]
            for limit in limits:
                row = run(argv, limit, args.margin_s, args.margin_share, args.keep)
                print(json.dumps({"input": label, **row}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
