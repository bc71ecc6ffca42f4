"""One Ganeti operation on an instance, as a plan step: its gnt-instance command (what -C
prints) and its opcode (what -X submits), from one place so that the two always agree.

A step is (operation, node): ("migrate" | "failover", target or None for a DRBD instance's
own secondary), ("replace", new secondary), ("move", target: a copy, `gnt-instance move`).
"""

from __future__ import annotations

from typing import Any

from model.backends.iallocator_response import (
    failover_opcode,
    migrate_opcode,
    move_opcode,
    replace_disks_opcode,
)

Step = tuple[str, str | None]

_VERB = {"migrate": "migrate -f", "failover": "failover -f", "move": "move -f"}


def command(instance: str, step: Step) -> str:
    """The gnt-instance command of a step, without `gnt-instance` (hbal's -C words)."""
    op, node = step
    if op == "replace":
        return f"replace-disks -n {node} {instance}"
    return f"{_VERB[op]}{f' -n {node}' if node else ''} {instance}"


def opcode(instance: str, step: Step) -> dict[str, Any]:
    """The opcode of a step, in htools' iMoveToJob shapes."""
    op, node = step
    if op == "migrate":
        return migrate_opcode(instance, node)
    if op == "failover":
        return failover_opcode(instance, node)
    if op == "replace":
        return replace_disks_opcode(instance, node or "")
    return move_opcode(instance, node or "")
