"""`exalloc space --greedy` beside the real hspace 3.0.2 on many generated clusters, byte for
byte: stdout, stderr, exit code and the -S files (issue 36; the default test run holds a few
seeds, tests/test_hspace_greedy.py).

    python benchmarks/sweep_hspace.py [FIRST] [LAST] [--timeout SECONDS]

Cases are tests/space_cases.py's (1-3 groups, heterogeneous nodes, existing instances, drbd,
plain and shared templates, hspace's options at random), each in one of four output variants.
A case where the real hspace itself does not finish within the timeout is counted apart (its
tiered phase can shrink for minutes).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from space_cases import case, greedy_flags, run_both  # noqa: E402

from model.backends.text import dump_text  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("first", type=int, nargs="?", default=0)
    p.add_argument("last", type=int, nargs="?", default=100)
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("-v", "--verbose", action="store_true", help="show each difference")
    args = p.parse_args()
    same = differ = slow = 0
    start = time.perf_counter()
    for seed in range(args.first, args.last):
        c = case(seed)
        flags = greedy_flags(c, seed)
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            path = work / "cluster.data"
            path.write_text(dump_text(c.cluster))
            t0 = time.perf_counter()
            try:
                real, port = run_both(path, flags, work, timeout=args.timeout)
            except subprocess.TimeoutExpired as e:
                slow += 1
                print(f"seed {seed}: timeout ({e.cmd[0]}) {' '.join(flags)}", flush=True)
                continue
            t = time.perf_counter() - t0
        if real == port:
            same += 1
            if args.verbose:
                print(f"seed {seed}: same ({t:.1f} s)", flush=True)
            continue
        differ += 1
        keys = ("stdout", "stderr", "code", "files")
        parts = [k for k in keys if getattr(real, k) != getattr(port, k)]
        print(f"seed {seed}: DIFFERENT {parts} {' '.join(flags)}", flush=True)
        if args.verbose:
            import difflib

            for k in parts[:2]:
                a, b = str(getattr(real, k)), str(getattr(port, k))
                lines = a.splitlines(), b.splitlines()
                diff = difflib.unified_diff(*lines, "hspace", "port", lineterm="")
                print("\n".join(list(diff)[:30]))
    total = args.last - args.first
    print(
        f"{total} cases: {same} byte for byte, {differ} different, {slow} over {args.timeout:g} s "
        f"({time.perf_counter() - start:.0f} s)"
    )
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
