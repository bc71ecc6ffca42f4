"""Concurrent creations on a real Ganeti 3.0.2 master, blocking against opportunistic locking.

The figures beside `exalloc loadtest`'s in docs/locking.md ("On a running Ganeti"). Each row
starts CREATIONS `gnt-instance add -I exalloc-hail` (diskless, MEMORY each, all of them fit)
from CLIENTS threads at once, with or without `--opportunistic-locking`, and times them; the
instances are then removed (not timed). Needs root: it brings up the master with
tests/live/ganeti-master.sh (unless one answers already) and tears it down at the end.

    python benchmarks/bench_ganeti_locking.py [--creations 8] [--memory 512M]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "tests" / "live" / "ganeti-master.sh"
LINK = Path("/usr/lib/ganeti/iallocators/exalloc-hail")
ROWS = [(1, False), (4, False), (4, True), (8, False), (8, True)]


def settings(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.split())


def create(os_name: str, name: str, memory: str, opportunistic: bool) -> tuple[float, int, bool]:
    words = ["gnt-instance", "add", "-t", "diskless", "-I", "exalloc-hail", "-o", os_name]
    words += ["--no-nics", "--no-name-check", "--no-ip-check", "-B", f"memory={memory}"]
    words += ["--opportunistic-locking"] if opportunistic else []
    start = time.monotonic()
    done = subprocess.run([*words, name], capture_output=True, text=True, check=False)
    fell_back = "falling back to full lock allocation" in done.stdout + done.stderr
    return time.monotonic() - start, done.returncode, fell_back


def row(os_name: str, clients: int, opportunistic: bool, creations: int, memory: str) -> str:
    names = [f"bench-{clients}-{int(opportunistic)}-{i}" for i in range(creations)]
    start = time.monotonic()
    with ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(lambda n: create(os_name, n, memory, opportunistic), names))
    wall = time.monotonic() - start
    for name in names:
        subprocess.run(["gnt-instance", "remove", "-f", name], capture_output=True, check=False)
    latencies = sorted(r[0] for r in results)
    created = sum(1 for r in results if r[1] == 0)
    fell_back = sum(1 for r in results if r[2])
    p95 = latencies[min(len(latencies) - 1, round(0.95 * (len(latencies) - 1)))]
    mode = "opportunistic" if opportunistic else "blocking"
    return (
        f"| {clients} | {mode} | {created} | {fell_back} | {wall:.1f} | {created / wall:.2f} "
        f"| {statistics.median(latencies):.1f} | {p95:.1f} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--creations", type=int, default=8)
    parser.add_argument("--memory", default="512M")
    args = parser.parse_args()
    status = subprocess.run(["bash", str(SCRIPT), "status"], capture_output=True, text=True)
    ours = status.returncode != 0
    if ours:
        status = subprocess.run(["bash", str(SCRIPT), "up"], capture_output=True, text=True)
        if status.returncode != 0:
            print(status.stderr.strip(), file=sys.stderr)
            return 1
    made_link = not LINK.exists()
    if made_link:
        LINK.symlink_to(Path(sys.executable).parent / "exalloc-hail")
    try:
        os_name = settings(status.stdout)["OS"]
        print("| clients | mode | created | fell back to all locks | wall s | creations/s "
              "| latency p50 s | p95 s |")  # fmt: skip
        print("|---|---|---|---|---|---|---|---|")
        for clients, opportunistic in ROWS:
            print(row(os_name, clients, opportunistic, args.creations, args.memory), flush=True)
    finally:
        if made_link:
            LINK.unlink(missing_ok=True)
        if ours:
            subprocess.run(["bash", str(SCRIPT), "down"], capture_output=True, check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
