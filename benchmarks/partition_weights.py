"""Partition weight ratios 1 to 1e15 through HiGHS and CP-SAT (issue 40, item 1).

    python benchmarks/partition_weights.py [--exponents 0,1,...,15] [--disks 1000,100000,10000000]
                                           [--solvers highs,cpsat,default] [--time-limit 60]

Each case is one Bareon schema of lv spaces with min_size 0 on one disk: weights (1, r) or
(1, r, r) for r = 10^k, so the spaces form one fairness group whose integer weight sum is
r + 1 or 2r + 1. It runs through the CLI in process (`exalloc --json partition --schema F
--solver S`; `default` leaves --solver out, so exalloc chooses) and is judged here, apart from
exalloc's checker, with the weights as the schema writes them (their decimal text, exact
fractions): an answer (exit 0) must give every space a total within 1 MiB of its weighted
share of the group's total, |T_s - w_s T / W| < 1 (docs/partition.md, "Fairness"), and the
objective it reports must be what model/bareon/check.py recomputes from the layout and the
schema read again. A refusal must be one line naming the weights as given and the limit
(2^53 for the product of the weight sum and the disks' MiB, any solver; 2^19 for the weight
sum under --solver highs, a usage error). Anything else is a fault. One JSON line per run,
then a table per shape: for each ratio, what each solver choice did.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import cli  # noqa: E402
from model.bareon.check import check_layout  # noqa: E402
from model.bareon.schema import ALLOCATOR_OVERHEADS, Layout, read_problem  # noqa: E402

SHAPES = {"1:r": lambda r: (1, r), "1:r:r": lambda r: (1, r, r)}


def schema(weights: tuple[float, ...], disk_mib: int) -> dict:
    return {
        "dynamic_schema": [
            {"id": f"s{k}", "type": "lv", "min_size": 0, "weight": w} for k, w in enumerate(weights)
        ],
        "hw_info": {"disks": [{"id": "sda", "size": disk_mib}]},
    }


def as_written(weight: float) -> Fraction:
    """The weight as the schema's text writes it (JSON: Python's shortest repr)."""
    return Fraction(json.dumps(weight))


def fair_faults(weights: tuple[float, ...], totals: list[int]) -> list[str]:
    """Spaces whose total is 1 MiB or more off their weighted share of the group's total."""
    ws = [as_written(w) for w in weights]
    whole, total = sum(ws), sum(totals)
    return [
        f"s{k}: {t} MiB, share {float(w * total / whole):.6g}"
        for k, (w, t) in enumerate(zip(ws, totals, strict=True))
        if abs(t - w * total / whole) >= 1
    ]


def run_case(path: Path, weights: tuple[float, ...], solver: str, limit: float) -> dict:
    argv = ["--json", "partition", "--schema", str(path), "--time-limit", str(limit)]
    if solver != "default":
        argv += ["--solver", solver]
    out, err = io.StringIO(), io.StringIO()
    began = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as stop:  # argparse's usage errors
            code = int(stop.code or 0)
    row: dict = {"solver": solver, "exit": code, "s": round(time.perf_counter() - began, 3)}
    lines = [x for x in err.getvalue().splitlines() if x.strip()]
    if code == 0:
        doc = json.loads(out.getvalue())
        problem = read_problem(str(path), None)
        (disk,) = doc["layout"]
        sizes = {sp["space_id"]: sp["size"] for sp in disk["spaces"]}
        totals = [sizes[s.space_id] for s in problem.spaces]
        report = check_layout(problem, Layout(sizes_mib=(tuple(totals),)), ALLOCATOR_OVERHEADS)
        faults = fair_faults(weights, totals)
        if not report.ok:
            faults += list(report.violations)
        if any(report.stage_values.get(k) != v for k, v in doc["objective"].items()):
            faults.append(f"objective {doc['objective']} != checker's {report.stage_values}")
        row.update(
            used=doc["solver"],
            status=doc["status"],
            totals=totals,
            faults=faults,
            fault=bool(faults),
        )
        return row
    line = lines[-1] if lines else ""
    given = ", ".join(f"{float(w):g}" for w in weights)
    limit_named = "2^53" if code == 1 else "2^19"
    clean = (
        code in (1, 2)
        and len([x for x in lines if x.startswith("exalloc: error")]) == 1
        and given in line
        and limit_named in line
    )
    if code == 2:  # the option's refusal, with the weights and the limit
        clean = given in line and "--solver highs" in line and "2^19" in line
    row.update(refusal=line, fault=not clean)
    return row


def outcome(row: dict) -> str:
    if row["fault"]:
        return "FAULT"
    if row["exit"] == 0:
        return f"{row['used']} {row['status']}"
    return "refused 2^53" if row["exit"] == 1 else "usage error 2^19"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--exponents", default=",".join(str(k) for k in range(16)))
    p.add_argument("--disks", default="1000,100000,10000000")
    p.add_argument("--solvers", default="highs,cpsat,default")
    p.add_argument("--time-limit", type=float, default=60.0)
    args = p.parse_args()
    solvers = args.solvers.split(",")
    table: dict[tuple[str, int], dict[int, list[str]]] = {}
    faults = runs = 0
    slowest = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for shape, make in SHAPES.items():
            for disk in (int(x) for x in args.disks.split(",")):
                for k in (int(x) for x in args.exponents.split(",")):
                    weights = tuple(float(w) for w in make(10.0**k))
                    path = Path(tmp) / "schema.json"
                    path.write_text(json.dumps(schema(weights, disk)))
                    cells = []
                    for solver in solvers:
                        row = run_case(path, weights, solver, args.time_limit)
                        runs += 1
                        faults += row["fault"]
                        slowest = max(slowest, row["s"])
                        print(
                            json.dumps({"shape": shape, "disk_mib": disk, "ratio": f"1e{k}", **row})
                        )
                        cells.append(outcome(row))
                    table.setdefault((shape, disk), {})[k] = cells
    print(f"\n{runs} runs, {faults} faults, slowest {slowest:.2f} s")
    for (shape, disk), rows in table.items():
        print(f"\nweights {shape}, one disk of {disk} MiB")
        print("| ratio | " + " | ".join(solvers) + " |")
        print("|---|" + "---|" * len(solvers))
        for k, cells in rows.items():
            print(f"| 1e{k} | " + " | ".join(cells) + " |")
    return 1 if faults else 0


if __name__ == "__main__":
    sys.exit(main())
