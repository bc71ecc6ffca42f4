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
