"""One benchmark on two checkouts of exalloc, taking turns, in one run.

    python benchmarks/old_and_new.py OLD_TREE [--rounds N] -- bench_hail.py --allocate 100 ...

A change that must leave the figures unchanged (issue 35) is measured as the machine is at
the time: the benchmark script of each tree runs in turn, old then new, `--rounds` times, so a
change of load falls on both alike. Each tree runs its own code: its own benchmark script with
its checkout first on PYTHONPATH (the `exalloc-hail` console script and every `python -m cli`
then import that tree's modules). The scripts' own output is printed, each headed by the tree
and round it came from; comparing the tables is the reader's part.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

NEW_TREE = Path(__file__).resolve().parent.parent


def run(tree: Path, script: str, args: list[str]) -> tuple[float, str]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(tree / "benchmarks" / script), *args],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"{tree}: {script} failed ({proc.returncode}): {proc.stderr.strip()}")
    return time.perf_counter() - start, proc.stdout


def main(argv: list[str]) -> int:
    if "--" not in argv:
        raise SystemExit("usage: old_and_new.py OLD_TREE [--rounds N] -- SCRIPT [ARGS...]")
    cut = argv.index("--")
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("old", type=Path, help="the other checkout (e.g. a clone at the old commit)")
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv[:cut])
    script, *bench_args = argv[cut + 1 :]
    load = os.getloadavg()
    print(f"load average at the start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    for round_ in range(1, args.rounds + 1):
        for label, tree in (("old", args.old.resolve()), ("new", NEW_TREE)):
            wall, out = run(tree, script, bench_args)
            print(f"\n## {label} ({tree}), round {round_}: {wall:.1f} s\n")
            print(out.rstrip())
    load = os.getloadavg()
    print(f"\nload average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
