"""The hroller port (`exalloc roll --greedy`) beside the real hroller on generated clusters.

    python benchmarks/sweep_roll.py FIRST LAST

For each seed FIRST..LAST-1, a cluster of tests/roll_gen.py (2-14 nodes, up to 40 instances,
drbd secondaries at random or on one to three storage nodes, one or two groups, offline
nodes, fills from 30 to 98 %) is saved as a text snapshot and given to both with twelve option
sets (hroller's shell tests' and two `-O` choices); stdout, stderr and exit code must be equal.
Prints the first differences and the count (docs/roll.md).
"""

from __future__ import annotations

import random
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "benchmarks")]

from roll_gen import RollSpec, generate  # noqa: E402
from seeds import seed_range  # noqa: E402

import cli  # noqa: E402
from model.backends.text import dump_text  # noqa: E402

OPTION_SETS = (
    [],
    ["--ignore-non-redundant"],
    ["--skip-non-redundant"],
    ["--offline-maintenance"],
    ["--full-evacuation", "--print-moves"],
    ["--print-moves", "-v", "-v", "-v"],
    ["--one-step-only", "--print-moves"],
    ["--node-tags=red,blue"],
    ["-G", "group-1"],
    ["--full-evacuation", "--ignore-non-redundant", "--print-moves"],
)


def spec_of(seed: int) -> RollSpec:
    rng = random.Random(seed)
    return RollSpec(
        nodes=rng.randint(2, 14),
        instances=rng.randint(0, 40),
        drbd_share=rng.choice((0.3, 0.7, 1.0)),
        concentrated=rng.choice((0, 0, 1, 2, 3)),
        groups=rng.choice((1, 1, 2)),
        offline=rng.choice((0, 0, 1, 2)),
        fill=rng.choice((0.3, 0.6, 0.9, 0.98)),
        seed=seed,
    )


def ours(argv: list[str]) -> tuple[str, str, int]:
    """`exalloc roll --greedy` in this process, its stdout, stderr and exit code."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["roll", "--greedy", *argv])
    return out.getvalue(), err.getvalue(), code


def main() -> None:
    args = seed_range(__doc__)
    runs = differ = 0
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.first, args.last):
            cluster = generate(spec_of(seed))
            path = Path(tmp) / f"roll-{seed}.data"
            path.write_text(dump_text(cluster))
            rng = random.Random(seed)
            names = [n.name for n in cluster.nodes]
            extra = [["-O", rng.choice(names)], ["-O", rng.choice(names), "-O", rng.choice(names)]]
            for argv in [*OPTION_SETS, *extra]:
                runs += 1
                full = ["-t", str(path), *argv]
                real = subprocess.run(["hroller", *full], capture_output=True, text=True)
                if ours(full) != (real.stdout, real.stderr, real.returncode):
                    differ += 1
                    if differ <= 5:
                        print(f"differs: seed {seed}, {' '.join(argv) or '(no options)'}")
    print(f"{runs - differ} of {runs} runs equal to the real hroller's")


if __name__ == "__main__":
    main()
