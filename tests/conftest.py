"""Shared fixtures: the real htools (`htools`), Ganeti's test data (`ganeti_data`), both (`ganeti`);
scripts/get-ganeti-reference installs them."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from solvers.aside import Aside

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "data"
TESTSUITE = (
    Path(os.environ.get("EXALLOC_GANETI_TESTSUITE", REPO / ".cache" / "ganeti-testsuite"))
    / "usr/share/ganeti/testsuite"
)


#: The marks of a test CI runs and the default run does not (.ci/run: `not slow or ci`).
CI_ONLY = (pytest.mark.slow, pytest.mark.ci)


def sampled(values, every: int = 2, *, unpack: bool = False) -> list:  # noqa: ANN001
    """Parameters for a test whose cases are the same claim on other inputs: every `every`-th
    (the first, then each `every`-th after it) in the default run, all of them in CI (`slow`,
    `ci`), so the default stays quick (README, "Development") and each sampled case can still
    fail. `unpack` spreads a tuple value over several argument names; a `pytest.param` keeps
    its id and marks."""
    out = []
    for k, value in enumerate(values):
        if k % every == 0:
            out.append(value)
        elif isinstance(value, type(pytest.param(None))):
            out.append(pytest.param(*value.values, marks=(*value.marks, *CI_ONLY), id=value.id))
        else:
            out.append(pytest.param(*(value if unpack else (value,)), marks=CI_ONLY))
    return out


# A missing reference fails the tests that need it; set this to 1 to make them skip instead
# (README, "Development"): a machine without the real htools or Ganeti's data then runs the rest.
ALLOW_MISSING = "EXALLOC_ALLOW_MISSING_REFERENCE"


@dataclass(frozen=True)
class Htools:
    """Paths of the real htools 3.0 binaries (Debian's ganeti-htools)."""

    hail: Path
    hinfo: Path
    hbal: Path
    hspace: Path
    hsqueeze: Path
    hroller: Path


@dataclass(frozen=True)
class GanetiData:
    """Ganeti's own htools test data (Debian's ganeti-testsuite, unpacked into .cache/)."""

    data_dir: Path  # test/data/htools: *.data snapshots and hail-*.json requests
    shelltests_dir: Path  # test/hs/shelltests: htools-*.test


@dataclass(frozen=True)
class Ganeti(Htools, GanetiData):
    """Both: for the tests that run the real htools on Ganeti's test data."""


def find_htools() -> Htools | None:
    hail = Path("/usr/lib/ganeti/iallocators/hail")
    names = ("hinfo", "hbal", "hspace", "hsqueeze", "hroller")
    tools = {name: shutil.which(name) for name in names}
    if not hail.exists() or None in tools.values():
        return None
    return Htools(hail=hail, **{k: Path(v) for k, v in tools.items()})  # type: ignore[arg-type]


def find_data() -> GanetiData | None:
    data_dir = TESTSUITE / "test/data/htools"
    if not data_dir.is_dir():
        return None
    return GanetiData(data_dir=data_dir, shelltests_dir=TESTSUITE / "test/hs/shelltests")


def missing_reference(what: str) -> None:
    """A test that needs a reference the machine lacks fails, naming the fix; it skips only where
    EXALLOC_ALLOW_MISSING_REFERENCE=1 says so (docs: README, "Development")."""
    message = f"{what} missing: run scripts/get-ganeti-reference (or set {ALLOW_MISSING}=1 to skip)"
    if os.environ.get(ALLOW_MISSING) == "1":
        pytest.skip(message)
    pytest.fail(message)


@pytest.fixture(scope="session")
def htools() -> Htools:
    """The real htools binaries alone (random requests and generated clusters need no test data)."""
    found = find_htools()
    if found is None:
        missing_reference("the real htools 3.0 (ganeti-htools)")
    assert found is not None
    return found


@pytest.fixture(scope="session")
def ganeti_data() -> GanetiData:
    """Ganeti's htools test data alone (snapshots and requests read without running htools)."""
    found = find_data()
    if found is None:
        missing_reference(f"Ganeti's test data ({TESTSUITE})")
    assert found is not None
    return found


@pytest.fixture(scope="session")
def ganeti(htools: Htools, ganeti_data: GanetiData) -> Ganeti:
    """The real htools and Ganeti's test data together."""
    return Ganeti(**vars(htools), **vars(ganeti_data))


@pytest.fixture(autouse=True)
def _aside_failures_fail(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A forked child beside the model that raised (solvers/aside.py) fails the test, unless
    the test is marked `aside_failure`: the answer stands without the child, so nothing else
    shows such a bug (one hid for a session: docs/placement.md, "No time for the model")."""
    if request.node.get_closest_marker("aside_failure"):
        return
    original = Aside.result

    def checked(self: Aside):  # noqa: ANN202
        value = original(self)
        if self.failure is not None:
            pytest.fail(f"a child beside the model failed: {self.failure}")
        return value

    monkeypatch.setattr(Aside, "result", checked)


class Ticks:
    """An injected clock for model/htools/hbal.py: each look at it is one second later."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        self.now += 1.0
        return self.now
