"""The exact standard allocation beside the real hspace on generated clusters.

    python benchmarks/sweep_space.py FIRST_SEED LAST_SEED

The questions of tests/space_cases.py (drbd, plain and shared-storage templates in turn; 1-3
groups of 3-10 heterogeneous nodes with existing instances of several templates, offline and
drained nodes, policies; hspace's options drawn at random), with global N+1 as htools decides
it (offline nodes take re-placed instances), so that the counts compare. exalloc must never
place fewer than hspace; prints every case where the counts differ, and per template family
the cases, how many exalloc places more on, and the mean gain (docs/space.md).
"""

from __future__ import annotations

import sys
import tempfile
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import space_cases as sc  # noqa: E402
from seeds import seed_range  # noqa: E402

from model.backends.text import dump_text  # noqa: E402
from model.state import node_states  # noqa: E402
from solvers.strategies.space import standard  # noqa: E402


def main() -> None:
    args = seed_range(__doc__)
    table: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "cluster.data"
        for seed in range(args.first, args.last):
            c = sc.case(seed)
            family = sc.FAMILIES[seed % len(sc.FAMILIES)]
            path.write_text(dump_text(c.cluster))
            greedy = sc.hspace_count(path, c)
            result = standard(node_states(c.cluster), c.spec, c.options)
            row = table[family]
            if greedy is None:
                row["hspace refused"] += 1
                continue
            row["cases"] += 1
            row["optimal"] += result.status == "optimal"
            if result.count != greedy:
                print(
                    f"seed {seed} {c.options.disk_template} {' '.join(c.flags)}: exalloc "
                    f"{result.count} ({result.status}), hspace {greedy}",
                    flush=True,
                )
            if result.count > greedy:
                row["more"] += 1
            elif result.count < greedy:
                row["fewer"] += 1
            if greedy:
                row["gain"] += (result.count - greedy) / greedy
                row["with instances"] += 1
    print(
        "| family | cases | optimal | exalloc more | exalloc fewer | mean gain | hspace refused |"
    )
    print("|---|---|---|---|---|---|---|")
    for family in sc.FAMILIES:
        r = table[family]
        gain = 100 * r["gain"] / r["with instances"] if r["with instances"] else 0.0
        print(
            f"| {family} | {r['cases']:.0f} | {r['optimal']:.0f} | {r['more']:.0f} "
            f"| {r['fewer']:.0f} | {gain:.1f} % | {r['hspace refused']:.0f} |"
        )


if __name__ == "__main__":
    main()
