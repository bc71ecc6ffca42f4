"""htools' simulation backend (model/backends/simu.py): SPEC strings read as Backend/Simu.hs
and Utils.parseUnit read them (hail's answers on simulated clusters: test_hail_htools.py)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model.backends.simu import parse_unit, simulated_cluster
from model.errors import InputError

SMALL = settings(max_examples=200, derandomize=True, deadline=None, database=None)


def test_parse_unit_as_htools():
    """MiB by default, m/g/t and MiB/GiB/TiB binary, M/G/T and MB/GB/TB decimal, truncated;
    spaces before the unit."""
    cases = {"100": 100, "16g": 16384, "8 mib": 8, "4GiB": 4096, "1t": 1048576}
    cases |= {"8T": 7629394, "1TB": 953674, "500G": 476837, "1M": 0, "3MB": 2, "-5": -5}
    assert {text: parse_unit(text) for text in cases} == cases
    with pytest.raises(ValueError, match="Unknown unit 'q'"):
        parse_unit("100q")


@SMALL
@given(st.integers(0, 10**9), st.sampled_from(["", "m", " MiB", "g", "GIB", "t", "TiB"]))
def test_binary_units_scale_by_1024(value, unit):
    power = {"": 0, "m": 0, " MiB": 0, "g": 1, "GIB": 1, "t": 2, "TiB": 2}[unit]
    assert parse_unit(f"{value}{unit}") == value * 1024**power


@SMALL
@given(st.integers(0, 10**9), st.sampled_from(["M", "MB", "G", "gb", "T", "TB"]))
def test_decimal_units_are_truncated_mib(value, unit):
    power = "MGT".index(unit[0].upper())
    assert parse_unit(f"{value}{unit}") == value * 1000 ** (power + 2) // 1024**2


@SMALL
@given(st.lists(st.text(max_size=40), min_size=1, max_size=3))
def test_any_spec_is_a_cluster_or_one_input_error(specs):
    """Whatever the text, a cluster or an InputError naming the problem, nothing else."""
    try:
        cluster = simulated_cluster(specs)
    except InputError as err:
        assert str(err).startswith("--simulate")  # the CLI prints it on one line (printable)
    else:
        assert len(cluster.groups) == len(specs) and not cluster.instances


@SMALL
@given(
    st.lists(
        st.tuples(st.sampled_from("pau"), st.integers(0, 12), st.integers(1, 64)),
        min_size=1,
        max_size=4,
    )
)
def test_groups_of_identical_empty_nodes(groups):
    """Group k is group-0k with its nodes node-0k-001...; the first node of the first group
    is the only master."""
    specs = [f"{policy},{count},1t,{memory}g,8" for policy, count, memory in groups]
    cluster = simulated_cluster(specs)
    assert [g.name for g in cluster.groups] == [f"group-{k:02d}" for k in range(1, len(specs) + 1)]
    assert len(cluster.nodes) == sum(count for _, count, _ in groups)
    masters = [n.name for n in cluster.nodes if n.master]
    assert masters == (["node-01-001"] if groups[0][1] else [])
    for node in cluster.nodes:
        k = int(node.name[5:7])
        assert node.group_uuid == f"fake-uuid-{k:02d}"
        assert node.total_memory_mib == groups[k - 1][2] * 1024 == node.free_memory_mib
        assert math.isclose(node.total_disk_mib, 1024**2)
