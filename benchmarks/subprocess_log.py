"""A pytest plugin that logs every subprocess a test run starts: the test, the program, its wall
seconds and a key of (arguments, bytes of every file an argument names), so that runs of a real
htools program repeated on the same input can be counted (docs/reliability.md, "Test run
time"). Standard input is not in the key (no test here gives htools any).

    PYTHONPATH=benchmarks SUBPROCESS_LOG=runs.jsonl python -m pytest -p subprocess_log ...
    python benchmarks/subprocess_log.py runs.jsonl
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

_current: dict[str, str | None] = {"test": None}
_original_init = subprocess.Popen.__init__
_original_wait = subprocess.Popen.wait


def _key(args: object) -> tuple[list[str], str]:
    """The arguments and a hash of them with the bytes of each file they name (`-t FILE`,
    `--opt=FILE`, `FILE`)."""
    argv = [str(a) for a in (args if isinstance(args, (list, tuple)) else [args])]
    digest = hashlib.sha256()
    for arg in argv:
        digest.update(arg.encode() + b"\0")
        for part in {arg, arg.split("=", 1)[-1]}:
            try:
                path = Path(part)
                if path.is_file():
                    digest.update(path.read_bytes())
            except (OSError, ValueError):
                pass
    return argv, digest.hexdigest()[:16]


def _init(self, args, *rest, **kwargs) -> None:  # noqa: ANN001
    argv, key = _key(args)
    self._logged = (time.perf_counter(), argv, key, _current["test"])
    _original_init(self, args, *rest, **kwargs)


def _wait(self, *rest, **kwargs):  # noqa: ANN001, ANN202
    code = _original_wait(self, *rest, **kwargs)
    logged = getattr(self, "_logged", None)
    if logged is not None:
        self._logged = None
        start, argv, key, test = logged
        seconds = round(time.perf_counter() - start, 4)
        row = {"test": test, "prog": os.path.basename(argv[0]), "s": seconds, "key": key}
        with open(os.environ.get("SUBPROCESS_LOG", "subprocesses.jsonl"), "a") as log:
            log.write(json.dumps(row) + "\n")
    return code


def pytest_configure(config) -> None:  # noqa: ANN001
    """Wrap Popen once the plugin is loaded (subprocess.run goes through it)."""
    subprocess.Popen.__init__ = _init
    subprocess.Popen.wait = _wait


def pytest_runtest_setup(item) -> None:  # noqa: ANN001
    _current["test"] = item.nodeid


def summary(path: str) -> None:
    """Per program: seconds, runs, and the seconds of runs repeating an earlier run's key."""
    rows = [json.loads(line) for line in Path(path).read_text().splitlines()]
    seconds: Counter[str] = Counter()
    runs: Counter[str] = Counter()
    repeated: Counter[str] = Counter()
    seen: set[tuple[str, str]] = set()
    for row in rows:
        prog = row["prog"]
        seconds[prog] += row["s"]
        runs[prog] += 1
        if (prog, row["key"]) in seen:
            repeated[prog] += row["s"]
        seen.add((prog, row["key"]))
    print(f"{len(rows)} subprocesses, {sum(seconds.values()):.1f} s")
    for prog, total in seconds.most_common():
        print(f"{total:8.1f} s {runs[prog]:5d} runs, repeats {repeated[prog]:6.1f} s  {prog}")


if __name__ == "__main__":
    summary(sys.argv[1])
