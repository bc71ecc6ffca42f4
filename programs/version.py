"""exalloc's installed version (cli's --version, the comments of jobs it submits)."""

from __future__ import annotations


def version() -> str:
    # imported here: importlib.metadata costs 25 ms, and exalloc-hail starts once per request
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("exalloc")
    except PackageNotFoundError:  # running from a source tree that was not installed
        return "unknown"
