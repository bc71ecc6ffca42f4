"""The hbal port (`exalloc balance --greedy`) beside the real hbal on generated groups.

    python benchmarks/sweep_hbal.py FIRST LAST

For each seed FIRST..LAST-1, a case of tests/hbal_cases.py is given to both programs: 3-8
nodes in one or two groups, up to 30 instances (drbd, drbd and plain, or externally
mirrored), nodes filled from empty to crowded, some failing N+1 at load, offline and drained
nodes, and a random set of hbal's options (-S and -C among them). Stdout, stderr, exit code
and every file written (-S FILE.original and FILE.balanced, the -C script) must be equal.
Prints the first differences, the count and the seconds each side took (docs/balance.md).
"""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "benchmarks")]

import hbal_cases as hc  # noqa: E402
from seeds import seed_range  # noqa: E402

import cli  # noqa: E402


def files(d: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(d.iterdir())}


def main() -> None:
    args = seed_range(__doc__)
    runs = differ = steps = 0
    real_s = ours_s = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.first, args.last):
            c = hc.case(seed)
            where = Path(tmp) / str(seed)
            real_dir, ours_dir = where / "hbal", where / "exalloc"
            real_dir.mkdir(parents=True)
            ours_dir.mkdir()
            data = where / "cluster.data"
            data.write_text(c.text)
            t = time.perf_counter()
            real = subprocess.run(
                ["hbal", *hc.flags(c, str(data), str(real_dir))], capture_output=True, text=True
            )
            real_s += time.perf_counter() - t
            out, err = io.StringIO(), io.StringIO()
            t = time.perf_counter()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = cli.main(["balance", "--greedy", *hc.flags(c, str(data), str(ours_dir))])
            ours_s += time.perf_counter() - t
            mine = (
                out.getvalue().replace(str(ours_dir), str(real_dir)),
                err.getvalue().replace(str(ours_dir), str(real_dir)),
                code,
                files(ours_dir),
            )
            runs += 1
            steps += real.stdout.count(" a=")
            if mine != (real.stdout, real.stderr, real.returncode, files(real_dir)):
                differ += 1
                if differ <= 5:
                    print(f"differs: seed {seed} ({c.family}), {' '.join(c.options)}")
    print(
        f"{runs - differ} of {runs} runs equal to the real hbal's ({steps} steps); "
        f"hbal {real_s:.1f} s, exalloc {ours_s:.1f} s"
    )


if __name__ == "__main__":
    main()
