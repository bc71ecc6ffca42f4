"""`exalloc report`: plots and a summary table from `exalloc batch` results.

One self-contained HTML file (SVG plots inline, their text kept as text so the series names
can be searched), or a folder of PNG files plus `summary.html`. Per problem: exact against
greedy by the problem's metric (nodes freed, instances placed, MiB lost); then solve time
against cluster size for every problem and tool.
"""

from __future__ import annotations

import argparse
import html
import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from model.errors import InputError, OutputError
from model.files import write_files
from programs.batch import TOTALS, read_results, summarise
from programs.judging import metric_value, value_cell, verdict

SUMMARY_COLUMNS = (
    ("problem", "problem"),
    ("metric", "metric"),
    ("inputs", "inputs"),
    ("ok", "ok"),
    ("failed", "failed"),
    ("optimal", "optimal"),
    ("exact_better", "exact better"),
    ("same", "same"),
    ("greedy_better", "greedy better"),
    ("exact_total", "exalloc total"),
    ("greedy_total", "greedy total"),
    ("median_s", "median exact s"),
)


@dataclass(frozen=True)
class Figure:
    """One plot: its file stem, title, and the names of the series it draws."""

    stem: str
    title: str
    series: tuple[str, ...]
    content: str | bytes  # SVG text, or PNG bytes


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # no display: files only
    import matplotlib.pyplot as plt

    plt.rcParams["svg.fonttype"] = "none"  # keep labels as text in the SVG
    return plt


def _render(fig: Any, plt: Any, fmt: str) -> str | bytes:
    """SVG text (from the opening <svg> tag, to inline in HTML) or PNG bytes."""
    if fmt == "png":
        png = io.BytesIO()
        fig.savefig(png, format="png", dpi=110, bbox_inches="tight")
        plt.close(fig)
        return png.getvalue()
    svg = io.StringIO()
    fig.savefig(svg, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = svg.getvalue()
    return text[text.find("<svg") :]


def short_names(paths: list[str]) -> list[str]:
    """Paths without their common folder, so equal file names in two folders stay apart."""
    if len(paths) < 2:
        return [Path(p).name for p in paths]
    base = os.path.commonpath([os.path.dirname(p) or "." for p in paths])
    return [os.path.relpath(p, base) if base else p for p in paths]


def _exact_vs_greedy(
    problem: str, records: list[dict[str, Any]], plt: Any, fmt: str
) -> Figure | None:
    """Per input (ordered by size), the metric of exalloc's answer and of the greedy tool's."""
    pairs = [
        (r, a, b)
        for r in records
        if r["problem"] == problem
        and (a := metric_value(problem, r)) is not None
        and (b := metric_value(problem, r.get("greedy") or {})) is not None
    ]
    if not pairs:
        return None
    pairs.sort(key=lambda p: (p[0].get("size") or 0, p[0]["input"]))
    metric = TOTALS.get(problem, "value")
    tool = pairs[0][0]["greedy"].get("tool", "greedy")
    xs = list(range(len(pairs)))
    fig, ax = plt.subplots(figsize=(7, 3.6))
    width = 0.4
    ax.bar([x - width / 2 for x in xs], [a for _, a, _ in pairs], width, label="exalloc")
    ax.bar([x + width / 2 for x in xs], [b for _, _, b in pairs], width, label=tool)
    names = short_names([r["input"] for r, _, _ in pairs])
    ax.set_xticks(xs, names, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel(metric)
    title = f"{problem}: {metric}, exalloc vs {tool}"
    ax.set_title(title)
    ax.legend()
    content = _render(fig, plt, fmt)
    return Figure(f"{problem}-exact-vs-greedy", title, ("exalloc", tool), content)


# Sizes mean nodes for the Ganeti problems and disks for layouts: one time plot per unit.
TIME_PLOTS = (
    (
        "time-vs-size",
        "solve time vs cluster size",
        "nodes",
        (
            "squeeze",
            "allocate",
            "multi-allocate",
            "n1",
            "redistribute",
            "compress",
            "evacuate",
            "space",
            "balance",
            "roll",
        ),  # fmt: skip
    ),
    ("partition-time-vs-disks", "partition solve time vs disks", "disks", ("partition",)),
)


def _time_vs_size(
    records: list[dict[str, Any]], plt: Any, fmt: str, plot: tuple[str, str, str, tuple[str, ...]]
) -> Figure | None:
    """Time against input size, one series per (problem, exalloc or greedy tool)."""
    stem, title, unit, problems = plot
    series: dict[str, list[tuple[float, float]]] = {}
    for r in records:
        size = r.get("size")
        if r["problem"] not in problems or not isinstance(size, int | float) or r.get("error"):
            continue
        solver_s = [r.get(k) for k in ("build_s", "solve_s")]
        exact_s = None
        if all(isinstance(t, int | float) for t in solver_s):
            exact_s = float(sum(solver_s))  # type: ignore[arg-type]
        if not exact_s:  # no model built (a bound met, e.g. roll's clique): the whole run
            exact_s = r.get("wall_s")
        if isinstance(exact_s, int | float) and exact_s > 0:
            series.setdefault(f"exalloc {r['problem']}", []).append((size, exact_s))
        g = r.get("greedy") or {}
        if isinstance(g.get("wall_s"), int | float) and not g.get("error"):
            series.setdefault(f"{g.get('tool')} {r['problem']}", []).append((size, g["wall_s"]))
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for name, points in sorted(series.items()):
        marker = "o" if name.startswith("exalloc") else "x"
        ax.scatter([p[0] for p in points], [p[1] for p in points], label=name, marker=marker, s=18)
    ax.set_xlabel(unit)
    ax.set_ylabel("s (exalloc: build + solve, else its run; greedy: tool run)")
    ax.set_yscale("log")
    ax.set_title(title)
    ax.legend(fontsize=7)
    return Figure(stem, title, tuple(sorted(series)), _render(fig, plt, fmt))


def figures(records: list[dict[str, Any]], fmt: str = "svg") -> list[Figure]:
    plt = _pyplot()
    out = []
    for problem in sorted({r["problem"] for r in records}):
        fig = _exact_vs_greedy(problem, records, plt, fmt)
        if fig is not None:
            out.append(fig)
    for plot in TIME_PLOTS:
        fig = _time_vs_size(records, plt, fmt, plot)
        if fig is not None:
            out.append(fig)
    return out


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}"
    return html.escape(str(value))


def _summary_table(rows: list[dict[str, Any]]) -> str:
    head = "".join(f"<th>{html.escape(label)}</th>" for _, label in SUMMARY_COLUMNS)
    body = "".join(
        "<tr>" + "".join(f"<td>{_cell(row[key])}</td>" for key, _ in SUMMARY_COLUMNS) + "</tr>"
        for row in rows
    )
    return f'<table class="summary"><tr>{head}</tr>{body}</table>'


def _results_table(records: list[dict[str, Any]]) -> str:
    """Every answered input: both judged values, the verdict and both times."""
    done = [r for r in records if not r.get("error")]
    if not done:
        return ""
    names = short_names([r["input"] for r in done])
    head = "".join(
        f"<th>{h}</th>"
        for h in ("input", "problem", "status", "exalloc", "greedy", "tool", "verdict",
                  "exalloc s", "greedy s")
    )  # fmt: skip
    body = []
    for name, r in zip(names, done, strict=True):
        g = r.get("greedy") or {}
        cells = (
            name, r["problem"], r.get("status"), value_cell(r), value_cell(g),
            g.get("tool"), verdict(r), r.get("wall_s"), g.get("wall_s"),
        )  # fmt: skip
        body.append("<tr>" + "".join(f"<td>{_cell(c)}</td>" for c in cells) + "</tr>")
    return f"<h2>results</h2><table><tr>{head}</tr>{''.join(body)}</table>"


def _errors_table(records: list[dict[str, Any]]) -> str:
    bad = [r for r in records if r.get("error")]
    if not bad:
        return ""
    body = "".join(
        f"<tr><td>{html.escape(r['input'])}</td><td>{html.escape(r['problem'])}</td>"
        f"<td>{html.escape(str(r['error']))}</td></tr>"
        for r in bad
    )
    head = "<tr><th>input</th><th>problem</th><th>error</th></tr>"
    return f"<h2>failures</h2><table>{head}{body}</table>"


_STYLE = (
    "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
    "td,th{border:1px solid #bbb;padding:2px 8px;text-align:right}"
    "td:first-child,th:first-child{text-align:left}figure{margin:1.5em 0}"
)


def _page(title: str, rows: list[dict[str, Any]], body: str, tables: str) -> str:
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
        f"<h2>summary</h2>{_summary_table(rows)}{body}{tables}</body></html>\n"
    )


@dataclass(frozen=True)
class ReportResult:
    out: str
    files: tuple[str, ...]
    series: tuple[str, ...]
    records: int

    def text(self) -> str:
        return f"{self.out}: {len(self.files)} file(s) from {self.records} results\n"

    def to_json(self) -> dict[str, Any]:
        return {
            "out": self.out,
            "files": list(self.files),
            "series": list(self.series),
            "records": self.records,
        }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", metavar="RESULTS.jsonl", help="what exalloc batch wrote")
    parser.add_argument(
        "--out",
        required=True,
        metavar="REPORT.html|DIR",
        help="an HTML file (plots inline), or a folder for PNG files",
    )


def run(args: Any) -> ReportResult:
    records = read_results(args.results)
    if not records:
        raise InputError(f"{args.results}: no results to report")
    rows = summarise(records)
    html_out = Path(args.out).suffix.lower() in (".html", ".htm")
    figs = figures(records, "svg" if html_out else "png")
    title = f"exalloc report: {Path(args.results).name}"
    tables = _results_table(records) + _errors_table(records)
    out = Path(args.out)
    series = tuple(f"{f.stem}: {s}" for f in figs for s in f.series)
    if html_out:
        body = "".join(
            f"<figure id='{f.stem}'><figcaption>{html.escape(f.title)}</figcaption>"
            f"{f.content}</figure>"
            for f in figs
        )
        contents: dict[str, str | bytes] = {str(out): _page(title, rows, body, tables)}
        folder = out.parent
    else:
        contents = {str(out / f"{f.stem}.png"): f.content for f in figs}
        body = "".join(
            f"<figure><figcaption>{html.escape(f.title)}</figcaption>"
            f"<img src='{f.stem}.png' alt='{html.escape(f.title)}'></figure>"
            for f in figs
        )
        contents[str(out / "summary.html")] = _page(title, rows, body, tables)
        folder = out
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OutputError(f"cannot create the folder: {err.strerror}", source=str(folder)) from None
    write_files(contents)  # all the report's files, or none of them
    files = tuple(contents)
    return ReportResult(str(out), files, series, len(records))
