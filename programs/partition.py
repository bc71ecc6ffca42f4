"""exalloc partition: integer Bareon disk layout from a dynamic schema (docs/partition.md).

read -> solve and check (solvers/strategies/partition.py) -> write documents -> report.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from model.bareon.outputs import (
    allocator_document,
    bareon_document,
    ironic_document,
    layout_svg,
)
from model.bareon.schema import OVERHEADS_BY_FORMAT, read_problem
from model.errors import InputError, about
from model.files import write_file
from programs.options import json_option, solver_options

if TYPE_CHECKING:  # the strategy imports Pyomo: loaded by `run`, not by the parser
    from solvers.strategies.partition import Baseline


@dataclass(frozen=True)
class PartitionReport:
    """What `exalloc partition` prints, as text or as one JSON object."""

    status: str
    objective: dict[str, int]
    bound: dict[str, float | None]
    gap: dict[str, float | None]
    build_s: float
    solve_s: float
    solver: str
    output_format: str
    layout: Any
    unallocated_mib: int
    unallocated_why: tuple[tuple[str, int, str], ...]
    notes: tuple[str, ...] = ()
    baseline: Baseline | None = None
    svg_path: str | None = None
    sizes_mib: tuple[tuple[int, ...], ...] = field(default=(), repr=False)

    @property
    def exit_code(self) -> int:
        return 0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "status": self.status,
            "objective": self.objective,
            "unallocated_mib": self.unallocated_mib,
            "layout": self.layout,
            "bound": self.bound,
            "gap": self.gap,
            "build_s": round(self.build_s, 6),
            "solve_s": round(self.solve_s, 6),
            "solver": self.solver,
        }
        if self.baseline is not None:
            out["baseline"] = self.baseline.to_json()
        return out

    def text(self) -> str:
        stage_text = " ".join(f"{k}={v}" for k, v in self.objective.items())
        gaps = [g for g in self.gap.values() if g is not None]
        lines = [
            f"status: {self.status} ({self.solver}); objective: {stage_text}; "
            f"gap: {max(gaps, default=0.0):g}; build {self.build_s:.3f} s, "
            f"solve {self.solve_s:.3f} s",
            f"layout ({self.output_format}):",
            _yaml(self.layout).rstrip(),
            f"unallocated: {self.unallocated_mib} MiB",
        ]
        lines += [f"  {disk}: {mib} MiB: {why}" for disk, mib, why in self.unallocated_why]
        if self.baseline is not None:
            b = self.baseline
            lines.append("baseline lp-floor (bareon-allocator: LP, sizes rounded down):")
            if b.layout is None:
                lines.append(f"  status: {b.status}")
            else:
                lines.append(_yaml(b.layout).rstrip())
                lines.append(
                    f"  unallocated: {b.unallocated_mib} MiB; lost against exalloc: "
                    f"{b.lost_mib} MiB; constraints broken: {len(b.broken)}"
                )
                lines += [f"    broken: {v}" for v in b.broken]
        if self.svg_path:
            lines.append(f"svg: {self.svg_path}")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines) + "\n"


def _yaml(document: Any) -> str:
    import yaml

    return yaml.safe_dump(document, sort_keys=False, default_flow_style=None, width=100)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--schema",
        required=True,
        metavar="SCHEMA.yaml",
        help="bareon-allocator dynamic schema, or a fixture file with dynamic_schema/hw_info",
    )
    parser.add_argument(
        "--hw-info",
        dest="hw_info",
        metavar="HW.yaml",
        help="hardware information (not needed with a fixture file)",
    )
    parser.add_argument(
        "--format",
        dest="output_format",
        choices=("allocator", "bareon", "ironic"),
        default="allocator",
        help="output document (default: allocator)",
    )
    parser.add_argument("--svg", metavar="FILE", help="also draw the layout as an SVG picture")
    parser.add_argument(
        "--baseline",
        choices=("lp-floor",),
        help="also solve as bareon-allocator does (LP, rounded down) and compare",
    )
    parser.add_argument(
        "--leave-preferred-empty",
        action="store_true",
        help="like bareon-allocator: spaces without disk preference never use a preferred disk",
    )
    solver_options(parser)
    json_option(parser)


#: The seconds --time-limit keeps for the documents and the output after the layout's solve.
OUTPUT_RESERVE_S = 0.3


def run(args: Any) -> PartitionReport:
    """The `partition` command: read, solve and check, write the documents."""
    from solvers.strategies.partition import lp_floor_baseline, solve_layout

    output_format = args.output_format
    if output_format not in OVERHEADS_BY_FORMAT:
        raise InputError(f"unknown format {output_format!r}")
    overheads = OVERHEADS_BY_FORMAT[output_format]
    problem = read_problem(args.schema, args.hw_info)
    with about(args.schema):
        solved = solve_layout(
            problem,
            overheads,
            leave_preferred_empty=args.leave_preferred_empty,
            # what the start-up and the reading (yaql) left, less the documents' making
            options=args.solver_options.left(OUTPUT_RESERVE_S),
        )
    layout = solved.layout
    if output_format == "allocator":
        document: Any = allocator_document(problem, layout, overheads)
    elif output_format == "bareon":
        document = bareon_document(problem, layout, overheads)
    else:
        document = ironic_document(problem, layout, overheads)
    baseline = None
    if args.baseline == "lp-floor":
        baseline = lp_floor_baseline(problem, solved.check.unallocated_mib)
    if args.svg:
        write_file(args.svg, layout_svg(problem, layout, overheads))
    return PartitionReport(
        status=solved.status,
        objective=solved.objective,
        bound=solved.bound,
        gap=solved.gap,
        build_s=solved.build_s,
        solve_s=solved.solve_s,
        solver=solved.solver,
        output_format=output_format,
        layout=document,
        unallocated_mib=solved.check.unallocated_mib,
        unallocated_why=solved.check.unallocated_by_disk,
        notes=problem.notes,
        baseline=baseline,
        svg_path=args.svg,
        sizes_mib=layout.sizes_mib,
    )
