"""`exalloc squeeze` against the real hsqueeze on generated clusters.

    python benchmarks/sweep_squeeze.py FIRST_SEED LAST_SEED [--keep DIR]

Each seed draws a cluster of tests/squeeze_gen.py (4-16 nodes, ext-only or mixed with DRBD,
plain, exclusion tags and standby nodes, fills up to 95 %) and the two resource factors;
both tools answer with the default `--move ext`. Counted: where exalloc frees more nodes
(or powers on fewer), as many, or fewer; where hsqueeze's plan is better, exalloc's checker
judges hsqueeze's plan and the reasons it refuses it are printed. Also where exalloc's own
answer fails its checker. docs/squeeze.md quotes the counts.
"""

from __future__ import annotations

import collections
import contextlib
import io
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from seeds import seed_range  # noqa: E402
from squeeze_gen import SqueezeSpec, ext_cluster, mixed_cluster  # noqa: E402

import cli  # noqa: E402
from model.backends.text import save_text  # noqa: E402
from model.check import Move, check_squeeze  # noqa: E402
from model.resources import probe_demand  # noqa: E402
from model.squeeze import not_preexisting  # noqa: E402
from model.state import node_states  # noqa: E402

HEADERS = {"'Nodes to offline'": "offline", "'Nodes to online'": "online", "'No action'": "none"}


def drawn(seed: int) -> tuple[str, SqueezeSpec, str, str]:
    rng = random.Random(seed)
    n = rng.randint(4, 16)
    spec = SqueezeSpec(
        nodes=n,
        instances=rng.randint(n, 5 * n),
        max_fill=rng.choice((0.3, 0.5, 0.6, 0.8, 0.95)),
        standby=rng.choice((0, 0, 1, 2)),
        seed=seed,
    )
    kind = rng.choice(("ext", "mixed"))
    return kind, spec, rng.choice(("2.0", "1.0", "3.0")), rng.choice(("2.0", "1.5", "4.0"))


def hsqueeze_plan(path: Path, factors: list[str]) -> tuple[str, list[str], list[Move]]:
    proc = subprocess.run(
        ["hsqueeze", "-t", str(path), *factors, "-C"], capture_output=True, text=True, check=True
    )
    lines = proc.stdout.splitlines()
    nodes = []
    for line in lines[1:]:
        if not line:
            break
        nodes.append(line)
    moves = [
        Move(words[-1], words[-2], None)
        for words in (line.split() for line in lines)
        if words[:3] == ["gnt-instance", "migrate", "-f"] and "-n" in words
    ]
    return HEADERS[lines[0]], nodes, moves


def main() -> None:
    args = seed_range(__doc__, "the clusters hsqueeze does better on")
    counts: collections.Counter = collections.Counter()
    refused: collections.Counter = collections.Counter()
    with tempfile.TemporaryDirectory() as folder:
        for seed in range(args.first, args.last):
            kind, spec, minimal, target = drawn(seed)
            cluster = (ext_cluster if kind == "ext" else mixed_cluster)(spec)
            path = Path(folder) / f"cluster-{seed}.data"
            save_text(cluster, path)
            factors = [f"--minimal-resources={minimal}", f"--target-resources={target}"]
            mode, nodes, moves = hsqueeze_plan(path, factors)
            out = io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
                code = cli.main(["--json", "squeeze", "-t", str(path), *factors])
            if code != 0:
                counts["exalloc failed"] += 1
                print(f"seed {seed}: exalloc exit {code}")
                continue
            doc = json.loads(out.getvalue())
            if not doc["checker"]["ok"]:
                counts["exalloc's answer refused by its checker"] += 1
                print(f"seed {seed}: exalloc's {doc['mode']} answer fails its checker")
            ours, theirs = len(doc["nodes"]), len(nodes)
            if mode == "online":
                ours, theirs = -ours, -theirs  # fewer powered on is better
            if ours > theirs:
                counts["exalloc better"] += 1
            elif ours == theirs:
                counts["same count"] += 1
            else:
                counts["hsqueeze better"] += 1
                state = node_states(cluster)
                std = cluster.cluster_policy.std
                factor = float(target if mode == "offline" else minimal)
                report = check_squeeze(state, nodes, moves, probe_demand(std, factor))
                kinds = sorted({v.kind for v in not_preexisting(cluster, report.violations, moves)})
                refused[", ".join(kinds) or "nothing"] += 1
                print(
                    f"seed {seed} ({kind}, {minimal}, {target}): hsqueeze {mode} {nodes}, "
                    f"exalloc {doc['mode']} {doc['nodes']}; hsqueeze's plan breaks: {kinds}"
                )
                if args.keep:
                    args.keep.mkdir(parents=True, exist_ok=True)
                    (args.keep / path.name).write_text(path.read_text())
    print(dict(counts))
    print("hsqueeze's better plans, what exalloc's checker refuses in them:", dict(refused))


if __name__ == "__main__":
    main()
