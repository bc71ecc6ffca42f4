"""Whether two results files of `exalloc batch` hold the same answers, times aside.

    python benchmarks/same_results.py BEFORE.jsonl AFTER.jsonl

The proof that a change of structure changed no behaviour (issue 35, docs/architecture.md
"Behaviour unchanged"): run the main job (`exalloc batch data --compare --out FILE`) on the
commit before and after, then compare. Records are matched by (input, problem); every key
that is a time (`*_s`: build, solve and wall seconds, at any depth) is left out, and so is a
time inside a text (`0.0123 s`, as a hail info line quotes its solver's times). Anything else
that differs is printed, one line per key, and the exit code is 1; the same answers exit 0.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

SECONDS = re.compile(r"\b\d+(\.\d+)?(e-?\d+)? ?s\b")


def timeless(value: Any) -> Any:
    """The value without its times."""
    if isinstance(value, dict):
        return {k: timeless(v) for k, v in value.items() if not k.endswith("_s")}
    if isinstance(value, list):
        return [timeless(v) for v in value]
    if isinstance(value, str):
        return SECONDS.sub("<time>", value)
    return value


def records(path: Path) -> dict[tuple[str, str], Any]:
    out = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            record = json.loads(line)
            key = (record["input"], record["problem"])
            if key in out:
                raise SystemExit(f"{path}:{number}: {key} twice")
            out[key] = timeless(record)
    return out


def differences(before: Any, after: Any, where: str = "") -> list[str]:
    if isinstance(before, dict) and isinstance(after, dict):
        found = []
        for key in sorted(set(before) | set(after)):
            if key not in after:
                found.append(f"{where}.{key}: only before")
            elif key not in before:
                found.append(f"{where}.{key}: only after")
            else:
                found += differences(before[key], after[key], f"{where}.{key}")
        return found
    if before != after:
        return [f"{where}: {json.dumps(before)[:120]} != {json.dumps(after)[:120]}"]
    return []


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    before, after = (records(Path(p)) for p in argv)
    lines = [f"{k}: only in {argv[0]}" for k in sorted(set(before) - set(after))]
    lines += [f"{k}: only in {argv[1]}" for k in sorted(set(after) - set(before))]
    for key in sorted(set(before) & set(after)):
        lines += [f"{key[0]} {key[1]}{d}" for d in differences(before[key], after[key])]
    for line in lines:
        print(line)
    print(f"{len(set(before) & set(after))} records compared, {len(lines)} difference(s)")
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
