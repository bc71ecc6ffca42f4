"""The exact N+1 check against the real hcheck on generated clusters.

    python benchmarks/sweep_n1.py FIRST_SEED LAST_SEED

The clusters of tests/htools_gen.py's requests (every template, up to three groups, tags,
policies, offline and drained nodes), as text snapshots: for every group, exalloc's exact
check (with htools' offline targets, so that the counts compare) must decide every node and
find no more nodes that cannot be evacuated than `hcheck --no-simulation` counts. Prints each
group where it does not, and the totals (docs/n1.md).
"""

from __future__ import annotations

import re
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

from model.backends.iallocator import parse_request  # noqa: E402
from model.backends.text import dump_text, load_text  # noqa: E402
from model.state import node_states  # noqa: E402
from solvers.strategies.n1 import check_cluster  # noqa: E402

NOT_EVACUABLE = re.compile(
    r"Statistics for group (\S+) initially\n(?:.*\n)*?\s+Nodes not directly evacuateable: (\d+)"
)


def main() -> None:
    args = seed_range(__doc__)
    groups = worse = fewer = hcheck_failed = 0
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "cluster.data"
        for seed in range(args.first, args.last):
            path.write_text(dump_text(parse_request(gen.dumps(gen.for_seed(seed))).cluster))
            proc = subprocess.run(
                ["hcheck", "-t", str(path), "--no-simulation"], capture_output=True, text=True
            )
            if proc.returncode != 0:
                hcheck_failed += 1
                continue
            greedy = {g: int(n) for g, n in NOT_EVACUABLE.findall(proc.stdout)}
            report = check_cluster(node_states(load_text(path)), offline_targets=True)
            for group in report.groups:
                groups += 1
                exact = sum(1 for v in group.nodes if v.evacuable is False)
                undecided = sum(1 for v in group.nodes if v.evacuable is None)
                if undecided or exact > greedy[group.name]:
                    worse += 1
                    print(
                        f"seed {seed} group {group.name}: exalloc {exact} not evacuable, "
                        f"{undecided} undecided; hcheck {greedy[group.name]}"
                    )
                fewer += exact < greedy[group.name]
    print(
        f"{groups} groups: exalloc finds fewer non-evacuable nodes on {fewer}, more or "
        f"undecided on {worse}; hcheck failed on {hcheck_failed} clusters"
    )


if __name__ == "__main__":
    main()
