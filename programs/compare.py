"""`exalloc compare`: every input's problems answered by exalloc and by the greedy tool, side by
side, in one table (programs/tasks.py does the work, as for `exalloc batch`)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any

from programs.judging import answer_text, format_value, value_cell, verdict
from programs.options import greedy_timeout_option, json_option, live_source_options, solver_options
from programs.runners import solve_task
from programs.tasks import (
    INSTALL_HINT,
    METRICS,
    discover,
    freeze,
    input_name,
    live_tasks,
    options_from,
    plan,
    require_inputs,
)


@dataclass(frozen=True)
class CompareReport:
    records: tuple[dict[str, Any], ...]
    notes: tuple[str, ...] = field(default=())

    def text(self) -> str:
        head = (
            "input",
            "problem",
            "metric",
            "exalloc",
            "status",
            "gap",
            "time_s",
            "greedy",
            "tool",
            "time_s",
            "verdict",
        )
        rows = [head]
        for r in self.records:
            g = r.get("greedy") or {}
            metric = METRICS.get(r["problem"], ("-", ""))[0]
            rows.append(
                (
                    input_name(r["input"]),
                    r["problem"],
                    metric,
                    value_cell(r),
                    format_value(r.get("status")),
                    format_value(r.get("gap")),
                    format_value(r.get("wall_s")),
                    value_cell(g),
                    g.get("tool", "-"),
                    format_value(g.get("wall_s")) if g else "-",
                    verdict(r),
                )
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
        lines = [
            "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
        ]
        errors = [f"{input_name(r['input'])}: {r['error']}" for r in self.records if r.get("error")]
        errors += [
            f"{input_name(r['input'])} ({r['greedy']['tool']}): {r['greedy']['error']}"
            for r in self.records
            if (r.get("greedy") or {}).get("error") and r["greedy"]["error"] != INSTALL_HINT
        ]
        out = "\n".join(lines) + "\n"
        answers = [
            f"  {input_name(r['input'])} {who}: {text}"
            for r in self.records
            for who, part in (
                ("exalloc", r),
                ((r.get("greedy") or {}).get("tool"), r.get("greedy")),
            )
            if who and part and not part.get("error")
            for text in [answer_text(part.get("answer"))]
            if text
        ]
        if answers:
            out += "\nanswers:\n" + "\n".join(answers) + "\n"
        notes = [f"{input_name(r['input'])}: {r['note']}" for r in self.records if r.get("note")]
        if notes:
            out += "\ninfeasible:\n" + "".join(f"  {n}\n" for n in notes)
        if errors:
            out += "\nerrors:\n" + "".join(f"  {e}\n" for e in errors)
        for note in self.notes:
            out += f"\n{note}\n"
        return out

    def to_json(self) -> dict[str, Any]:
        return {"results": list(self.records), "notes": list(self.notes)}

    @property
    def exit_code(self) -> int:
        return 1 if any(r.get("error") for r in self.records) else 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "inputs",
        nargs="*",
        metavar="INPUT",
        help=".data, IAllocator .json, Bareon .yaml files, or folders or globs of them",
    )
    live_source_options(parser, repeatable=True)
    greedy_timeout_option(parser)
    solver_options(parser)
    json_option(parser)


def run(args: Any) -> CompareReport:
    options = options_from(args, compare=True)
    inputs: list[str] = []
    for spec in args.inputs:  # files, folders or globs, as for exalloc batch
        inputs.extend(p for p in discover(spec) if p not in inputs)
    live = live_tasks(args)
    require_inputs(inputs, live, args.inputs)
    tasks = plan(inputs) + [freeze(t) for t in live]
    records = tuple(solve_task(t, options) for t in tasks)
    missing = any((r.get("greedy") or {}).get("error") == INSTALL_HINT for r in records)
    notes = (INSTALL_HINT + "; showing exalloc alone",) if missing else ()
    return CompareReport(records, notes)
