"""An exalloc-hail call imports Pyomo and the solver backends only when its answer builds a
model (issue 40, item 12): most of Ganeti's requests need none, and the shell tests call
exalloc-hail hundreds of times. Module sets, not timings (timing belongs in benchmarks/)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
HEAVY = ("pyomo.core", "highspy", "ortools")

PROBE = f"""
import atexit, json, sys
def report():  # at exit: a command line's process ends in os._exit after the atexit handlers
    print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)), file=sys.stderr)
atexit.register(report)
sys.argv = ["exalloc-hail", *sys.argv[1:]]
from cli import hail_console
hail_console()
"""


def _heavy_modules(request: Path, *options: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *options, str(request)],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["success"] is True
    return json.loads(done.stderr.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "name", ["hail-alloc-drbd.json", "hail-reloc-drbd.json", "hail-alloc-secondary.json"]
)
def test_a_request_that_builds_no_model_imports_no_solver(ganeti_data, name):
    assert _heavy_modules(ganeti_data.data_dir / name) == []


def test_a_dedicated_allocate_compares_every_choice_without_pyomo():
    """Its single model's optimum is found by exhaustion unless a solver is named."""
    request = REPO / "data" / "requests" / "dedicated-12-nodes-allocate.json"
    assert _heavy_modules(request) == []
    assert _heavy_modules(request, "--solver", "highs") == ["highspy", "pyomo.core"]


def test_a_request_that_builds_a_model_imports_its_backend():
    request = REPO / "data" / "requests" / "dedicated-12-nodes-multi.json"
    assert _heavy_modules(request) == ["highspy", "pyomo.core"]
