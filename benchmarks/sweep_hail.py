"""`exalloc hail --capacity-checks greedy` and `--greedy` against the real hail.

    python benchmarks/sweep_hail.py FIRST_SEED LAST_SEED [--keep DIR]

For each seed of tests/htools_gen.py (every request type, template, group layout, policy,
offline and drained nodes), both answers with and without hail's `--no-capacity-checks`,
compared as text, and `exalloc hail --greedy` (hail's behaviour, the drained secondary of
allocate-secondary included) the same way; the exact answer is computed too (every printed
answer passes the checker, so a refused one shows as an error here). Prints each difference
and the counts; `--keep` writes the requests that differ to DIR. The tests run seeds 0-359
(tests/test_hail_htools.py); docs/hail.md quotes wider sweeps.
"""

from __future__ import annotations

import collections
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import htools_gen as gen  # noqa: E402
from seeds import seed_range  # noqa: E402

from cli import build_parser  # noqa: E402
from programs import hail  # noqa: E402
from programs.options import attached_optionals  # noqa: E402
from programs.reference import real_hail  # noqa: E402
from solvers.options import SolverOptions  # noqa: E402


def exalloc_hail(args: list[str], capacity: str) -> str:
    ns = build_parser().parse_args(
        attached_optionals(["hail", "--capacity-checks", capacity, *args])
    )
    ns.solver_options = SolverOptions()
    return hail.run(ns).text().strip()


def main() -> None:
    args = seed_range(__doc__, "the requests that differ")
    counts: collections.Counter = collections.Counter()
    with tempfile.TemporaryDirectory() as folder:
        for seed, data, path in gen.request_files(Path(folder), range(args.first, args.last)):
            kind = data["request"]["type"]
            for extra in ([], ["--no-capacity-checks"]):
                words = [str(path), *extra]
                theirs = subprocess.run(
                    [str(real_hail()), *words], capture_output=True, text=True, check=False
                )
                if theirs.returncode != 0:
                    counts["hail failed"] += 1
                    print(f"seed {seed} {kind} {extra}: hail exit {theirs.returncode}")
                    continue
                ours = exalloc_hail(words, "greedy")
                same = ours == theirs.stdout.strip()
                counts["same" if same else "different"] += 1
                if not same:
                    print(f"seed {seed} {kind} {extra}:\n  hail    {theirs.stdout.strip()}")
                    print(f"  exalloc {ours}")
                    if args.keep:
                        args.keep.mkdir(parents=True, exist_ok=True)
                        (args.keep / path.name).write_text(path.read_text())
                greedy = exalloc_hail([*words, "--greedy"], "exact")
                same = greedy == theirs.stdout.strip()
                counts["--greedy same" if same else "--greedy different"] += 1
                if not same:
                    print(f"seed {seed} {kind} {extra} --greedy:\n  exalloc {greedy}")
            exalloc_hail([str(path)], "exact")
            counts["exact answered"] += 1
    print(dict(counts))


if __name__ == "__main__":
    main()
