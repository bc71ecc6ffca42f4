"""The command line of the sweep scripts: a range of generator seeds, and where to keep cases."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path


def seed_range(
    doc: str, keep: str | None = None, flags: Mapping[str, str] | None = None
) -> argparse.Namespace:
    """FIRST LAST (seeds FIRST..LAST-1) and, when `keep` says what, --keep DIR; `flags`: more
    on/off options, by name, with their help."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("first", type=int)
    parser.add_argument("last", type=int)
    if keep is not None:
        parser.add_argument("--keep", type=Path, help=f"write {keep} here")
    for name, help_text in (flags or {}).items():
        parser.add_argument(name, action="store_true", help=help_text)
    return parser.parse_args()
