"""tests/live/ganeti-master.sh's refusal, in the default run (it starts nothing).

Where the machine refuses, the live tests are skipped with the script's reason, never quietly
passed (tests/test_ganeti_master.py's fixtures skip on exit 77 with its last stderr line). Here
the script runs as an unprivileged user: `up` and `up2` must refuse with one `skip:` line and
exit 77 before touching anything.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent / "live" / "ganeti-master.sh"


def unprivileged(*words: str) -> subprocess.CompletedProcess:
    """The script as user 65534, from a copy that user can read (the checkout may not be)."""
    folder = Path(tempfile.mkdtemp(prefix="exl-script-", dir="/tmp"))
    folder.chmod(0o755)
    script = folder / SCRIPT.name
    shutil.copy(SCRIPT, script)
    script.chmod(0o755)
    command = ["bash", str(script), *words]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.fail("setpriv (util-linux) is needed to run the script as another user")
        command = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", *command]
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    finally:
        shutil.rmtree(folder)


@pytest.mark.parametrize("action", ["up", "up2", "down"])
def test_the_script_refuses_without_root(action):
    state = Path("/run/exalloc-live")
    existed = state.exists()
    done = unprivileged(action)
    assert done.returncode == 77
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "skip: ganeti-master.sh needs root"
        + (" (Ganeti's daemons run as root)" if action != "down" else "")
    ]
    assert state.exists() == existed


def test_the_script_refuses_an_unknown_action():
    done = subprocess.run(["bash", str(SCRIPT), "sideways"], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.startswith("usage: ")
