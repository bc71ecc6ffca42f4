"""Opportunistic versus blocking locking in `exalloc alloc-server`: speed bought, balance paid.

    python benchmarks/bench_locking.py [--clients 1,4,8,16] [--holds 0,0.5,2] [--creations 40]
                                       [--nodes 40] [--seed 7] [--out runs.jsonl] [--quick]
                                       [--normal [--capacity-checks exact|greedy|none]]

The cluster is a generated dedicated (exclusive-storage) snapshot with four node sizes and an
uneven random fill (`exalloc generate`, the command is printed); with --normal, a normal group
(plain, drbd and ext creations, placed by the cluster score under the global N+1 check that
--capacity-checks names, and a lower fill: at 60 % the generated group is not N+1 redundant
to begin with, so every creation fails N+1). For every (clients, hold,
mode) a fresh `exalloc alloc-server` starts on it with an empty state directory and
`exalloc loadtest` drives the creations (seeded sizes from the group's policy, plain and
drbd); the final state is saved with `exalloc state -S` and loaded by the real `hinfo`.
Prints a Markdown table (docs/locking.md) and, with --out, one JSON line per run.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# memory MiB, disk MiB, CPUs: four node sizes, as an operator's hardware generations
NODE_TYPES = "32768:512000:8,65536:1048576:16,98304:1048576:24,131072:2097152:32"
FILL = 0.6
NORMAL_FILL = 0.3


def exalloc(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cli", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        **kw,
    )


def generate(directory: Path, nodes: int, seed: int, normal: bool) -> tuple[Path, str]:
    args = [
        "generate",
        "--out",
        str(directory),
        "--count",
        "1",
        "--seed",
        str(seed),
        "--nodes",
        str(nodes),
        *([] if normal else ["--exclusive-storage"]),
        "--fill",
        str(NORMAL_FILL if normal else FILL),
        "--node-types",
        NODE_TYPES,
        "--requests",
        "none",
    ]
    result = exalloc(*args)
    if result.returncode != 0:
        raise SystemExit(f"exalloc generate failed: {result.stderr.strip()}")
    return directory / "snap-0000.data", "exalloc " + " ".join(args)


class Server:
    def __init__(self, cluster: Path, directory: Path, checks: str):
        self.socket = str(directory / "alloc.sock")
        self.log = directory / "server.log"
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "cli", "alloc-server", "-t", str(cluster)]
                + ["--socket", self.socket, "--state-dir", str(directory / "state")]
                + ["--capacity-checks", checks],
                cwd=REPO,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        deadline = time.monotonic() + 120
        while "listening on" not in self.log.read_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"alloc-server did not start: {self.log.read_text()}")
            time.sleep(0.05)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=120)


def hinfo_loads(path: Path) -> str:
    """'yes' when the real hinfo loads the snapshot, else why not ('-' without hinfo)."""
    if shutil.which("hinfo") is None:
        return "-"
    result = subprocess.run(["hinfo", "-t", str(path)], capture_output=True, text=True, check=False)
    return "yes" if result.returncode == 0 else f"no: {result.stderr.strip()[:60]}"


def one_run(
    cluster: Path, scratch: Path, clients: int, hold: float, opportunistic: bool, args
) -> dict:
    directory = Path(tempfile.mkdtemp(prefix="run-", dir=scratch))
    server = Server(cluster, directory, args.capacity_checks)
    try:
        command = [
            "loadtest",
            "--clients",
            str(clients),
            "--creations",
            str(args.creations),
            "--hold",
            f"{hold:g}",
            "--seed",
            str(args.seed),
            "--templates",
            "plain,drbd,ext" if args.normal else "plain,drbd",
        ]
        if opportunistic:
            command.append("--opportunistic")
        if args.retries:
            command += ["--retries", str(args.retries)]
        result = exalloc(*command, "--socket", server.socket, "--no-progress", "--json")
        if result.returncode != 0:
            raise SystemExit(f"loadtest failed: {result.stderr.strip()} {result.stdout[-300:]}")
        run = json.loads(result.stdout)
        saved = directory / "final.data"
        state = exalloc("state", "--socket", server.socket, "-S", str(saved))
        if state.returncode != 0:
            raise SystemExit(f"state failed: {state.stderr.strip()}")
        run["hinfo"] = hinfo_loads(saved)
        run["command"] = "exalloc " + " ".join(command) + " --json"
    finally:
        server.stop()
    shutil.rmtree(directory, ignore_errors=True)
    return run


def _vec(v) -> str:
    return "-" if v is None else "[" + ",".join(str(x) for x in v) + "]"


def table(runs: list[dict]) -> str:
    head = (
        "| clients | hold s | mode | created | temp_nores | nores | wall s | creations/s "
        "| speed-up | latency p50 s | p95 s | final score | lost allocations | checker | hinfo |"
    )
    lines = [head, "|" + "---|" * 15]
    blocking = {(r["clients"], r["hold_s"]): r for r in runs if r["mode"] == "blocking"}
    for r in runs:
        base = blocking.get((r["clients"], r["hold_s"]))
        speed = (
            f"{r['throughput_per_s'] / base['throughput_per_s']:.1f}x"
            if base and base["throughput_per_s"] > 0
            else "-"
        )
        lines.append(
            f"| {r['clients']} | {r['hold_s']:g} | {r['mode']} | {r['created']} | "
            f"{r['temp_nores']} | {r['nores']} | {r['wall_s']:.1f} | "
            f"{r['throughput_per_s']:.2f} | {speed} | {r['latency_p50_s']:.2f} | "
            f"{r['latency_p95_s']:.2f} | {r['score']:.4f} | {_vec(r['lost_allocations'])} | "
            f"{r['check']} | {r['hinfo']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", default="1,4,8,16")
    parser.add_argument("--holds", default="0,0.5,2")
    parser.add_argument("--creations", type=int, default=40)
    parser.add_argument("--nodes", type=int, default=40)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--retries", type=int, default=0)
    parser.add_argument("--out", help="append one JSON line per run")
    parser.add_argument("--quick", action="store_true", help="clients 1,8; holds 0,0.5")
    parser.add_argument("--normal", action="store_true", help="a normal group, not dedicated")
    parser.add_argument("--capacity-checks", default="exact", choices=("exact", "greedy", "none"))
    args = parser.parse_args()
    clients = [1, 8] if args.quick else [int(x) for x in args.clients.split(",")]
    holds = [0.0, 0.5] if args.quick else [float(x) for x in args.holds.split(",")]
    scratch = Path(tempfile.mkdtemp(prefix="bench-locking-", dir="/tmp"))
    runs: list[dict] = []
    try:
        cluster, command = generate(scratch / "cluster", args.nodes, args.seed, args.normal)
        print(f"cluster: {command}", file=sys.stderr)
        start = time.perf_counter()
        for hold in holds:
            for n in clients:
                for opportunistic in (False, True):
                    run = one_run(cluster, scratch, n, hold, opportunistic, args)
                    runs.append(run)
                    print(
                        f"{n} clients, hold {hold:g} s, {run['mode']}: {run['created']} created "
                        f"in {run['wall_s']:.1f} s ({time.perf_counter() - start:.0f} s so far)",
                        file=sys.stderr,
                    )
                    if args.out:
                        with open(args.out, "a") as fh:
                            fh.write(json.dumps({**run, "cluster": command}) + "\n")
        print(f"cluster: `{command}`\n")
        print(table(runs))
        print(f"\nwhole table: {time.perf_counter() - start:.0f} s")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
