"""`exalloc redistribute`: the fewest relocations into healthy peer groups that make every group
healthy again, proven (docs/groups.md). The work is in programs/groups.py."""

from programs.groups import run_redistribute as run

__all__ = ["run"]
