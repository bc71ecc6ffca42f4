"""Numbers up to the readers' limit through every problem and every solver (issue 40, item 2).

    python benchmarks/large_numbers.py [--exponents 20,40,41,50,53] [--solvers highs,cpsat]
                                       [--problems hail-evacuate,squeeze,...] [--time-limit 20]

For each problem, one input (Ganeti's test data where it has one) has one field set to 2^k
(a node's memory or disk, total and free together so the used part stays; its CPUs; an
instance's memory, disk or CPUs), and runs through the CLI in process with each solver. A run
is one JSON line: the exit code, the last stderr line and the solver statuses it names. It
is a fault ("fault": true) when the run neither answers (exit 0, the checker passed) nor
refuses cleanly (exit 1 naming the readers' range, or 2 naming the option), or when an answer
names a solver status that says the model went wrong ("unbounded", "error", "infeasible"
where the input with the field unchanged is not). The last line counts the faults.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import cli  # noqa: E402

HTOOLS = REPO / ".cache/ganeti-testsuite/usr/share/ganeti/testsuite/test/data/htools"
REQUESTS = REPO / "data" / "requests"

#: Statuses that, in an answer's note, say the solver did not solve the model it was given.
BAD_STATUS = ("unbounded", "error", "infeasible", "not solved")
#: A clean refusal of a number at reading: the readers name their range.
RANGE = re.compile(r"it must be from -?[0-9^]+ to 2\^\d+")


# --- inputs: (problem, text of the unchanged input, how to run it) ---------------------------


def _request(name: str) -> dict:
    path = HTOOLS / name if (HTOOLS / name).exists() else REQUESTS / name
    return json.loads(path.read_text())


def _normal_multi() -> dict:
    """Ganeti's hail-alloc-drbd.json asked for two instances at once: a normal-group
    multi-allocate (Ganeti's test data has only a dedicated one)."""
    doc = _request("hail-alloc-drbd.json")
    one = {k: v for k, v in doc["request"].items() if k != "type"}
    doc["request"] = {
        "type": "multi-allocate",
        "instances": [{**one, "name": "new-a"}, {**one, "name": "new-b"}],
    }
    return doc


REQUEST_PROBLEMS: dict[str, Callable[[], dict]] = {
    "hail-allocate": lambda: _request("hail-alloc-drbd.json"),
    "hail-multi-allocate": _normal_multi,
    "hail-relocate": lambda: _request("hail-reloc-drbd.json"),
    "hail-node-evacuate": lambda: _request("normal-node-evacuate.json"),
    "hail-node-evacuate-ganeti": lambda: _request("hail-node-evac.json"),
    "hail-change-group": lambda: _request("hail-change-group.json"),
    "hail-dedicated-allocate": lambda: _request("hail-alloc-dedicated-1.json"),
    "hail-dedicated-multi": lambda: _request("dedicated-greedy-trap.json"),
}

#: Text-snapshot problems: the file and the command line before the snapshot.
TEXT_PROBLEMS: dict[str, tuple[str, list[str]]] = {
    "squeeze": ("data/squeeze/greedy-gap.data", ["squeeze"]),
    "squeeze-drbd": ("hsqueeze-mixed-instances.data", ["squeeze", "--move", "drbd"]),
    "n1": ("n1-failure.data", ["n1"]),
    "space": ("hspace-tiered.data", ["space"]),
    "balance": ("hbal-location-1.data", ["balance"]),
    "roll": ("hroller-online.data", ["roll"]),
}

SOLVER_OPTION = {"balance": False}  # problems whose command has no --solver


def _request_variants(doc: dict, k: int) -> Iterator[tuple[str, dict]]:
    value = 2**k
    for name in sorted(doc["nodes"]):
        for total, free in (("total_memory", "free_memory"), ("total_disk", "free_disk")):
            grown = json.loads(json.dumps(doc))
            node = grown["nodes"][name]
            if total not in node:
                continue
            used = node[total] - node[free]
            node[total], node[free] = value, value - used
            yield f"node {name} {total}", grown
        grown = json.loads(json.dumps(doc))
        if "total_cpus" in grown["nodes"][name]:
            grown["nodes"][name]["total_cpus"] = value
            yield f"node {name} total_cpus", grown
    for iname in sorted(doc["instances"])[:2]:
        for field in ("memory", "vcpus", "disk"):
            grown = json.loads(json.dumps(doc))
            inst = grown["instances"][iname]
            if field == "disk":
                inst["disks"][0]["size"] = value
                inst["disk_space_total"] = value
            else:
                inst[field] = value
            yield f"instance {iname} {field}", grown
    req = doc["request"]
    for field in ("memory", "vcpus", "disk"):
        grown = json.loads(json.dumps(doc))
        targets = grown["request"].get("instances")
        listed = isinstance(targets, list) and targets[:1] and isinstance(targets[0], dict)
        asked = targets if listed else None
        for r in asked or ([grown["request"]] if "memory" in req else []):
            if field == "disk":
                r["disks"][0]["size"] = value
                r["disk_space_total"] = value
            else:
                r[field] = value
        if asked or "memory" in req:
            yield f"request {field}", grown


#: Text snapshot fields: (section, index, description); node: tm 1, fm 3 (kept used), td 4, fd 5,
#: tc 6; instance: mem 1, disk 2, vcpus 3.
def _text_variants(text: str, k: int) -> Iterator[tuple[str, str]]:
    value = 2**k
    sections = text.split("\n\n")
    nodes = [line for line in sections[1].splitlines() if line]
    instances = [line for line in sections[2].splitlines() if line]
    for line in (nodes[0], nodes[-1]):
        fields = line.split("|")
        for what, total, free in (("memory", 1, 3), ("disk", 4, 5), ("cpus", 6, None)):
            changed = list(fields)
            if free is not None:
                used = float(fields[total]) - float(fields[free])
                changed[free] = str(int(value - used))
            changed[total] = str(value)
            yield f"node {fields[0]} {what}", text.replace(line, "|".join(changed), 1)
    for line in instances[:2]:
        fields = line.split("|")
        for what, index in (("memory", 1), ("disk", 2), ("vcpus", 3)):
            changed = list(fields)
            changed[index] = str(value)
            yield f"instance {fields[0]} {what}", text.replace(line, "|".join(changed), 1)


def _partition_variants(k: int) -> Iterator[tuple[str, dict]]:
    value = 2**k
    base = {
        "dynamic_schema": [
            {"id": "vg1", "type": "vg", "contains": [{"id": "lv1"}, {"id": "lv2"}]},
            {"id": "lv1", "type": "lv", "min_size": 10, "weight": 1},
            {"id": "lv2", "type": "lv", "min_size": 10, "weight": 3},
        ],
        "hw_info": {"disks": [{"id": "sda", "size": 100}, {"id": "sdb", "size": 200}]},
    }
    grown = json.loads(json.dumps(base))
    grown["hw_info"]["disks"][0]["size"] = value
    yield "disk size", grown
    grown = json.loads(json.dumps(base))
    grown["hw_info"]["disks"][0]["size"] = value
    grown["hw_info"]["disks"][1]["size"] = value
    yield "both disk sizes", grown
    grown = json.loads(json.dumps(base))
    grown["hw_info"]["disks"][0]["size"] = value
    grown["dynamic_schema"][1]["min_size"] = value // 2
    yield "disk size, half as a min_size", grown


# --- running -------------------------------------------------------------------------------


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.TextIOWrapper(io.BytesIO()), io.TextIOWrapper(io.BytesIO())
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    out.seek(0)
    err.seek(0)
    return code, out.read(), err.read()


def statuses(text: str) -> list[str]:
    return sorted({s for s in BAD_STATUS if s in text.lower()})


def judge(code: int, out: str, err: str, baseline: list[str]) -> tuple[str, bool]:
    last = err.strip().splitlines()[-1] if err.strip() else ""
    if code == 0:
        bad = [s for s in statuses(out + err) if s not in baseline]
        return ("answered" if not bad else "answered, " + ",".join(bad)), bool(bad)
    if code == 1 and RANGE.search(last):
        return "refused at reading", False
    if code == 2 and "--solver" in last:
        return "refused the option", False
    if code == 2 and last.startswith("exalloc: error:") and "continuous" in last:
        return "refused the option", False
    return f"exit {code}", True


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--exponents", default="20,40,41,50,53,54")
    p.add_argument("--solvers", default="highs,cpsat")
    p.add_argument("--problems", default="")
    p.add_argument("--time-limit", default="20")
    args = p.parse_args()
    exponents = [int(x) for x in args.exponents.split(",") if x]
    solvers = [s for s in args.solvers.split(",") if s]
    chosen = set(args.problems.split(",")) - {""}
    limit = ["--time-limit", args.time_limit]
    faults = runs = 0
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        cases: list[tuple[str, Callable[[int], Iterator[tuple[str, list[str]]]]]] = []

        def request_case(problem: str, make: Callable[[], dict]):
            def variants(k: int):
                doc = make()
                for field, grown in [("unchanged", doc), *_request_variants(doc, k)]:
                    path = tmp / f"{problem}.json"
                    path.write_text(json.dumps(grown))
                    yield field, ["hail", *limit, str(path)]

            return variants

        def text_case(problem: str, name: str, argv: list[str]):
            def variants(k: int):
                text = (REPO / name if name.startswith("data/") else HTOOLS / name).read_text()
                for field, grown in [("unchanged", text), *_text_variants(text, k)]:
                    path = tmp / f"{problem}.data"
                    path.write_text(grown)
                    yield field, [*argv, "-t", str(path), *limit]

            return variants

        def partition_variants(k: int):
            for field, doc in _partition_variants(k):
                path = tmp / "partition.yaml"
                path.write_text(json.dumps(doc))
                yield field, ["partition", "--schema", str(path), *limit]

        for problem, make in REQUEST_PROBLEMS.items():
            cases.append((problem, request_case(problem, make)))
        for problem, (name, argv) in TEXT_PROBLEMS.items():
            cases.append((problem, text_case(problem, name, argv)))
        cases.append(("partition", partition_variants))
        for problem, variants in cases:
            if chosen and problem not in chosen:
                continue
            for solver in solvers:
                option = ["--solver", solver] if SOLVER_OPTION.get(problem, True) else []
                if not option and solver != solvers[0]:
                    continue
                baseline: list[str] = []
                for k in exponents:
                    for field, argv in variants(k):
                        if field == "unchanged" and k != exponents[0]:
                            continue
                        full = [argv[0], *option, *argv[1:]]
                        code, out, err = run_cli(full)
                        if field == "unchanged":
                            baseline = statuses(out + err)
                        verdict, fault = judge(code, out, err, baseline)
                        runs += 1
                        faults += fault
                        last = err.strip().splitlines()[-1][:160] if err.strip() else ""
                        row = {
                            "problem": problem,
                            "solver": solver if option else "-",
                            "k": k if field != "unchanged" else None,
                            "field": field,
                            "exit": code,
                            "verdict": verdict,
                            "fault": fault,
                        }
                        if fault or code != 0:
                            row["last"] = last
                        print(json.dumps(row), flush=True)
    print(json.dumps({"runs": runs, "faults": faults}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
