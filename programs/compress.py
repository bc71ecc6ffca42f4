"""`exalloc compress`: every group that can be emptied into its peer groups, proven, and the
plan for the one that frees the most (docs/groups.md). The work is in programs/groups.py."""

from programs.groups import run_compress as run

__all__ = ["run"]
