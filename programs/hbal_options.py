"""hbal 3.0.2's search and loader options, declared once for the two programs that take them:
`exalloc balance` (hbal itself) and `exalloc n1` (hcheck, whose rebalancing simulation is
hbal's search and reads hbal's options, `Hcheck.hs` `fromCLIOptions`).

The values are read as htools reads them (programs/space_options.py: a value hbal refuses is
refused in hbal's words, exit 1, not as an argparse usage error).
"""

from __future__ import annotations

import argparse


def instance_names(text: str) -> tuple[str, ...]:
    """A comma-separated list as htools splits it (`sepSplit ','`)."""
    from model.backends.text import sep_split

    return tuple(sep_split(",", text))


def hbal_search_options(p: argparse.ArgumentParser, scope: str = "") -> None:
    """The search's knobs: -e, -g, --min-gain-limit, the kinds of moves, -E. `scope` prefixes
    each help line (n1: "--greedy: ", the options only reach hcheck's simulation)."""
    from programs.space_options import htools_double

    p.add_argument(
        "-e", "--min-score", dest="min_score", type=htools_double("min score"), default=1e-9,
        metavar="EPSILON", help=f"{scope}stop at this score above the optimum (default 1e-9)",
    )  # fmt: skip
    p.add_argument(
        "-g", "--min-gain", dest="min_gain", type=htools_double("min gain"), default=0.01,
        metavar="DELTA",
        help=f"{scope}below --min-gain-limit, a move must gain at least DELTA (default 0.01)",
    )  # fmt: skip
    p.add_argument(
        "--min-gain-limit", dest="min_gain_limit", type=htools_double("min gain limit"),
        default=0.1, metavar="SCORE",
        help=f"{scope}the score under which --min-gain applies (default 0.1)",
    )  # fmt: skip
    p.add_argument(
        "--no-disk-moves", dest="disk_moves", action="store_false", help=f"{scope}failovers only"
    )
    p.add_argument(
        "--no-instance-moves", dest="instance_moves", action="store_false",
        help=f"{scope}secondary replacements only",
    )  # fmt: skip
    p.add_argument(
        "--ignore-soft-errors", dest="ignore_soft_errors", action="store_true",
        help=f"{scope}moves may break soft limits (N+1, cpu, disk, spindles, tags)",
    )  # fmt: skip
    p.add_argument(
        "-E", "--evac-mode", dest="evac_mode", action="store_true",
        help=f"{scope}only move instances off offline or drained nodes",
    )  # fmt: skip


def hbal_loader_options(p: argparse.ArgumentParser, scope: str = "") -> None:
    """What hbal applies while it loads (`loadExternalData`, `setNodeStatus`): the nodes' vCPU
    ratio and disk reserve, exclusion tag prefixes, the instances that may move, -U's loads."""
    from programs.space_options import htools_double, max_cpu_ratio

    p.add_argument(
        "--max-cpu", dest="max_cpu", type=max_cpu_ratio, metavar="RATIO",
        help=f"{scope}the vCPU ratio every node may reach",
    )  # fmt: skip
    p.add_argument(
        "--min-disk", dest="min_disk", type=htools_double("min free disk space", finite=True),
        default=0.0, metavar="RATIO", help=f"{scope}the free disk ratio every node keeps",
    )  # fmt: skip
    p.add_argument(
        "--exclusion-tags", dest="exclusion_tags", type=instance_names, metavar="TAG,...",
        help=f"{scope}instance tag prefixes that must not share a node (besides "
        "htools:iextags:)",
    )  # fmt: skip
    p.add_argument(
        "--select-instances", dest="select_instances", type=instance_names, default=(),
        metavar="INSTS", help=f"{scope}only these instances move",
    )  # fmt: skip
    p.add_argument(
        "--exclude-instances", dest="exclude_instances", type=instance_names, default=(),
        metavar="INSTS", help=f"{scope}these instances do not move",
    )  # fmt: skip
    p.add_argument(
        "-U", "--dynu-file", dest="dynu_file", metavar="FILE",
        help=f"{scope}instances' dynamic utilisation: NAME CPU MEM DSK NET per line",
    )  # fmt: skip
