"""Where the real htools are: the reference exalloc compares itself with (README, "Quick start":
scripts/get-ganeti-reference installs them)."""

from __future__ import annotations

import os
from pathlib import Path

#: The real hail (Debian's ganeti-htools); EXALLOC_REAL_HAIL points elsewhere, read per call.
DEFAULT_HAIL = "/usr/lib/ganeti/iallocators/hail"


def real_hail() -> Path:
    return Path(os.environ.get("EXALLOC_REAL_HAIL", DEFAULT_HAIL))


def real_hspace() -> Path | None:
    """The real hspace (EXALLOC_REAL_HSPACE, else `hspace` on PATH); None when absent."""
    import shutil

    given = os.environ.get("EXALLOC_REAL_HSPACE")
    if given:
        return Path(given)
    found = shutil.which("hspace")
    return Path(found) if found else None


def run_tool(cmd: list[str], timeout: float) -> tuple[str, float]:
    """A greedy tool's stdout and wall time; a timeout or a failing exit is an ExallocError
    naming the tool and its last line of stderr."""
    import subprocess
    import time

    from model.errors import ExallocError

    start = time.perf_counter()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise ExallocError(f"{Path(cmd[0]).name} did not finish in {timeout:g} s") from None
    wall = time.perf_counter() - start
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise ExallocError(f"{Path(cmd[0]).name} failed: {last}")
    return done.stdout, wall
