"""hbal's search ported (model/htools/hbal.py) against the real hbal 3.0.2, step for step.

The real hbal is the judge: its step lines (`  N. inst old => new score a=moves`) must equal
the port's `solution_line`s on Ganeti's own hbal test data, and the job sets it prints with
-C must equal the port's.
"""

from __future__ import annotations

import subprocess

import pytest
from conftest import Ganeti

from model.backends.text import load_text
from model.htools.hbal import (
    BalanceOptions,
    balance,
    group_score,
    movable_instances,
    naming_of,
    scope_of,
    solution_line,
)
from model.state import node_states

#: Ganeti's single-group hbal inputs (test/data/htools), with extra hbal flags
GANETI_CASES = (
    ("hbal-evac.data", ()),
    ("hbal-evac.data", ("--evac-mode",)),
    ("hbal-evac.data", ("--evac-mode", "--restricted-migration")),
    ("hbal-migration-1.data", ()),
    ("hbal-migration-2.data", ()),
    ("hbal-migration-3.data", ()),
    ("hbal-location-1.data", ()),
    ("hbal-location-2.data", ()),
    ("hbal-location-exclusion.data", ()),
    ("hbal-desiredlocation-1.data", ()),
    ("hbal-desiredlocation-2.data", ()),
    ("hbal-desiredlocation-3.data", ()),
    ("hbal-desiredlocation-4.data", ()),
    ("hbal-forth.data", ()),
    ("hbal-cpu-speed.data", ()),
    ("hbal-soft-errors.data", ("--ignore-soft-errors",)),
    ("hbal-soft-errors2.data", ("--ignore-soft-errors",)),
    ("hbal-dyn.data", ()),
    ("hbal-evac.data", ("--no-disk-moves",)),
    ("hbal-evac.data", ("--no-instance-moves",)),
    ("hbal-migration-1.data", ("--restricted-migration",)),
    ("hbal-location-1.data", ("-g", "0.5", "--min-gain-limit", "5")),
)


def real_steps(ganeti: Ganeti, path: str, flags: tuple[str, ...]) -> list[str]:
    out = subprocess.run(
        [str(ganeti.hbal), "-t", path, *flags], capture_output=True, text=True, check=True
    ).stdout
    return [line for line in out.splitlines() if line.startswith("  ") and " a=" in line]


def _options(flags: tuple[str, ...]) -> BalanceOptions:
    opts = {}
    it = iter(flags)
    for f in it:
        if f == "--evac-mode":
            opts["evac_mode"] = True
        elif f == "--restricted-migration":
            opts["restricted_migration"] = True
        elif f == "--ignore-soft-errors":
            opts["ignore_soft_errors"] = True
        elif f == "--no-disk-moves":
            opts["disk_moves"] = False
        elif f == "--no-instance-moves":
            opts["instance_moves"] = False
        elif f == "-g":
            opts["min_gain"] = float(next(it))
        elif f == "--min-gain-limit":
            opts["min_gain_limit"] = float(next(it))
        else:
            raise ValueError(f)
    return BalanceOptions(**opts)


def port_steps(path: str, flags: tuple[str, ...]) -> list[str]:
    cluster = load_text(path)
    state = node_states(cluster)
    group = next(g for g in cluster.groups if any(n.group_uuid == g.uuid for n in cluster.nodes))
    scope = scope_of(state, group.uuid, movable_instances(state))
    table = balance(state, scope, _options(flags))
    naming = naming_of(state, scope)
    assert table.score <= group_score(state, scope)
    return [solution_line(p, k, naming) for k, p in enumerate(table.placements, 1)]


@pytest.mark.parametrize(("name", "flags"), GANETI_CASES, ids=lambda x: str(x))
def test_steps_equal_hbal_on_ganeti_data(ganeti: Ganeti, name: str, flags: tuple[str, ...]) -> None:
    path = str(ganeti.data_dir / name)
    want = real_steps(ganeti, path, flags)
    assert port_steps(path, flags) == want
