"""Solve one HiGHS run that exalloc left in $EXALLOC_HIGHS_DUMP, apart from exalloc.

    EXALLOC_HIGHS_DUMP=DIR exalloc hail --time-limit 30 REQUEST.json    # leaves DIR/runNN.*
    python benchmarks/highs_round.py DIR/run01 [--time-limit S] [--log FILE] [KEY=VALUE ...]

The run's model (`runNN.mps`), with exalloc's options and start (`runNN.json`), KEY=VALUE
pairs overriding HiGHS options (e.g. mip_heuristic_effort=0). Prints the status, objective,
dual bound, gap, nodes and wall time. Any highspy can run it: in its own environment, a newer
HiGHS than the one pinned beside ortools (docs/solvers.md, "A solve on its own").
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import highspy


def option_value(text: str) -> bool | int | float | str:
    """A HiGHS option value from the command line: bool, int, float, else the text."""
    if text in ("true", "false"):
        return text == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="DIR/runNN (without suffix)")
    parser.add_argument("--time-limit", type=float, help="instead of the run's own")
    parser.add_argument("--log", type=Path, help="write HiGHS's log here")
    parser.add_argument("options", nargs="*", metavar="KEY=VALUE")
    args = parser.parse_intermixed_args()
    saved = json.loads(args.run.with_suffix(".json").read_text())
    options = {k: v for k, v in saved["options"].items() if v is not None}
    if args.time_limit is not None:
        options["time_limit"] = args.time_limit
    for pair in args.options:
        key, _, value = pair.partition("=")
        options[key] = option_value(value)
    highs = highspy.Highs()
    highs.setOptionValue("output_flag", args.log is not None)
    if args.log is not None:
        highs.setOptionValue("log_to_console", False)
        highs.setOptionValue("log_file", str(args.log))
    highs.readModel(str(args.run.with_suffix(".mps")))
    for key, value in options.items():
        highs.setOptionValue(key, value)
    if saved["start"] is not None:
        start = saved["start"]
        highs.setSolution(len(start), list(range(len(start))), start)
    began = time.perf_counter()
    highs.run()
    wall = time.perf_counter() - began
    info = highs.getInfo()
    status = highs.modelStatusToString(highs.getModelStatus())
    print(
        f"{args.run.name} HiGHS {highs.version()}: {status}, objective "
        f"{info.objective_function_value:.6f}, bound {info.mip_dual_bound:.6f}, gap "
        f"{100 * info.mip_gap:.4f} %, {info.mip_node_count} nodes, {wall:.1f} s"
    )


if __name__ == "__main__":
    main()
