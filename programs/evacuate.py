"""`exalloc evacuate --nodes A,B`: instances off nodes, inside their group first, then across
groups, proven (docs/groups.md). The work is in programs/groups.py."""

from programs.groups import run_evacuate as run

__all__ = ["run"]
