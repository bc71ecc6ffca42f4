"""Reading a running cluster: exalloc's RAPI and LUXI readers beside the real hinfo.

    python benchmarks/bench_live.py [--sizes 200,1000,3000] [--seeds 1]

Each case is a generated snapshot (model/generate.py: mixed node sizes, three disk templates,
uneven fill) served by the local RAPI server (HTTPS) and LUXI responder of tests/ganeti_live.py.
For each it times exalloc's reader alone (in this process), `exalloc info` end to end (a new
process: Python start-up, read, score) and the real `hinfo` on the same source, and checks that
exalloc's `-S` snapshot equals the real `hroller`'s byte for byte.
Prints a Markdown table; figures go to docs/live.md.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

from ganeti_live import LuxiResponder, RapiAnswers, RapiServer, self_signed_certificate  # noqa: E402

from model.backends.luxi import load_luxi  # noqa: E402
from model.backends.rapi import load_rapi  # noqa: E402
from model.generate import ClusterSpec, generate_cluster  # noqa: E402

NODE_TYPES = ((32768, 512000, 8), (65536, 1048576, 16), (131072, 2097152, 32))


def timed(command: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed: {done.stderr.strip()}")
    return wall


def same_snapshot(tool: str, source: str, folder: Path) -> bool:
    subprocess.run(
        [tool, source, "-S", str(folder / "ref")], capture_output=True, check=False, timeout=600
    )
    subprocess.run(
        ["exalloc", "info", source, "-S", str(folder / "ours")], capture_output=True, check=False
    )
    return (folder / "ref.original").read_bytes() == (folder / "ours").read_bytes()


def run_case(nodes: int, seed: int, tls: tuple[Path, Path], folder: Path) -> list[dict]:
    spec = ClusterSpec(
        nodes=nodes,
        groups=max(1, nodes // 500),
        node_types=NODE_TYPES,
        templates=("ext", "plain", "drbd"),
        fill=0.8,
    )
    cluster = generate_cluster(spec, seed)
    answers = RapiAnswers.of_cluster(cluster)
    rows = []
    with RapiServer(answers.bodies(), tls=tls) as server:
        start = time.perf_counter()
        load_rapi(server.url)
        read = time.perf_counter() - start
        rows.append(
            {
                "source": "RAPI (https)",
                "read_s": read,
                "exalloc_s": timed(["exalloc", "info", "-m", server.url]),
                "hinfo_s": timed(["hinfo", "-m", server.url]),
                "same": same_snapshot("hroller", f"-m{server.url}", folder),
            }
        )
    path = folder / "query.sock"
    with LuxiResponder(path, answers):
        load_luxi(str(path))  # the responder encodes its replies once, as a daemon would
        start = time.perf_counter()
        load_luxi(str(path))
        read = time.perf_counter() - start
        rows.append(
            {
                "source": "LUXI",
                "read_s": read,
                "exalloc_s": timed(["exalloc", "info", f"-L{path}"]),
                "hinfo_s": timed(["hinfo", f"-L{path}"]),
                "same": same_snapshot("hroller", f"-L{path}", folder),
            }
        )
    for row in rows:
        row.update(nodes=nodes, instances=len(cluster.instances), seed=seed)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="200,1000,3000", help="node counts, comma-separated")
    parser.add_argument("--seeds", type=int, default=1)
    args = parser.parse_args()
    print(
        "| nodes | instances | source | exalloc read s | exalloc info s "
        "| hinfo s | same -S snapshot |"
    )
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="exl-", dir="/tmp") as tmp:
        folder = Path(tmp)
        tls = self_signed_certificate(folder)
        for nodes in (int(n) for n in args.sizes.split(",")):
            for seed in range(args.seeds):
                for r in run_case(nodes, seed, tls, folder):
                    print(
                        f"| {r['nodes']} | {r['instances']} | {r['source']} | {r['read_s']:.2f} "
                        f"| {r['exalloc_s']:.2f} | {r['hinfo_s']:.2f} | {r['same']} |",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
