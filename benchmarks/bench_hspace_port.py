"""The cost of one tryAlloc in hspace's port (`exalloc space --greedy`, model/htools/hspace.py)
on generated drbd clusters: both phases of hspace (the tiered phase from twice the standard
spec, `-l 5`, as benchmarks/sweep_hspace.py's fourth variant) run in process, the tryAlloc
calls counted and timed.

    python benchmarks/bench_hspace_port.py [SEED ...]

Prints per seed the nodes, the tryAlloc calls made, the phases' seconds and the mean
milliseconds per call (docs/space.md, "Tests").
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import space_cases as sc  # noqa: E402

from model.htools.hspace import Run, setup, standard_phase, tiered_phase  # noqa: E402
from model.space import Spec, with_node_status  # noqa: E402
from model.state import node_states  # noqa: E402

#: drbd questions of tests/space_cases.py whose tiered phase shrinks for hundreds of levels
SEEDS = (3, 51, 87, 99)


def main() -> None:
    seeds = [int(a) for a in sys.argv[1:]] or list(SEEDS)
    print("seed nodes calls seconds ms/call")
    for seed in seeds:
        c = sc.case(seed, "drbd")
        o = c.options
        state = with_node_status(node_states(c.cluster), o.offline, o.max_cpu, o.min_disk)
        s = setup(
            state, c.cluster, o.disk_template, o.spindle_use, capacity=o.capacity_checks,
            independent_groups=o.independent_groups, accept_existing=o.accept_existing_errors,
            bad_groups=False,
        )  # fmt: skip
        spec = c.spec
        twice = Spec(2 * spec.memory_mib, 2 * spec.disk_mib, 2 * spec.vcpus, spec.spindles)
        run = Run()
        t = time.perf_counter()
        tiered_phase(s, [twice], 5, run)
        standard_phase(s, spec, None, run)
        dt = time.perf_counter() - t
        per = 1000 * dt / max(run.calls, 1)
        print(seed, len(c.cluster.nodes), run.calls, f"{dt:.2f}", f"{per:.2f}", flush=True)


if __name__ == "__main__":
    main()
