"""`exalloc hail --greedy -v -v`'s stderr against the real hail's (docs/hail.md, "-v -v dump").

    python benchmarks/sweep_hail_dump.py FIRST_SEED LAST_SEED [--keep DIR] [--data-files]

For each seed of tests/htools_gen.py (every request type, offline and drained nodes,
forthcoming instances, exclusion, location and migration tags), the request is answered by
the real hail and by exalloc's program in this process, both with `-v -v`, and their stderr
(the data warnings, the request and the cluster as Haskell's `show` prints them) compared
byte for byte. `--data-files` also runs `-t FILE` with each of Ganeti's `*.data` files and two
of its requests; a file both refuse counts apart (the messages differ: exalloc's one-line
error names the file). Prints each difference and the counts; `--keep` writes the requests
that differ to DIR. The tests run 20 seeds (tests/test_hail_dump.py).
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
from conftest import TESTSUITE  # noqa: E402
from seeds import seed_range  # noqa: E402

from cli import build_parser  # noqa: E402
from model.errors import ExallocError  # noqa: E402
from programs import hail  # noqa: E402
from programs.options import attached_optionals  # noqa: E402
from programs.reference import real_hail  # noqa: E402
from solvers.options import SolverOptions  # noqa: E402

DATA = TESTSUITE / "test/data/htools"
REQUESTS = ("hail-alloc-drbd.json", "hail-alloc-plain-tags.json")


def ours(words: list[str]) -> str | None:
    """exalloc's stderr before its own notes (what cli.py writes first), None if refused."""
    ns = build_parser().parse_args(attached_optionals(["hail", "--greedy", "-v", "-v", *words]))
    ns.solver_options = SolverOptions()
    try:
        return hail.run(ns).stderr
    except ExallocError:
        return None


def compare(words: list[str], what: str, counts: collections.Counter) -> bool:
    theirs = subprocess.run(
        [str(real_hail()), "-v", "-v", *words], capture_output=True, text=True, check=False
    )
    mine = ours(words)
    if mine is None or theirs.returncode != 0:
        refused = mine is None and theirs.returncode != 0
        counts["refused by both" if refused else "refused by one"] += 1
        return refused
    if mine == theirs.stderr:
        counts["same"] += 1
        return True
    counts["different"] += 1
    real = theirs.stderr
    at = next((k for k, (a, b) in enumerate(zip(mine, real, strict=False)) if a != b), 0)
    print(f"{what}: differs at {at}: ours {mine[at : at + 60]!r}, hail's {real[at : at + 60]!r}")
    return False


def main() -> None:
    args = seed_range(
        __doc__, "the requests that differ", flags={"--data-files": "-t with Ganeti's *.data too"}
    )
    counts: collections.Counter = collections.Counter()
    with tempfile.TemporaryDirectory() as folder:
        for seed, _, path in gen.request_files(Path(folder), range(args.first, args.last)):
            if not compare([str(path)], f"seed {seed}", counts) and args.keep:
                args.keep.mkdir(parents=True, exist_ok=True)
                (args.keep / path.name).write_text(path.read_text())
    print(f"seeds {args.first}-{args.last - 1}:", dict(sorted(counts.items())))
    if args.data_files:
        counts = collections.Counter()
        for snapshot in sorted(DATA.glob("*.data")):
            for request in REQUESTS:
                words = ["-t", str(snapshot), str(DATA / request)]
                compare(words, f"-t {snapshot.name} {request}", counts)
        print("-t FILE:", dict(sorted(counts.items())))


if __name__ == "__main__":
    main()
