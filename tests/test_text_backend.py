"""The htools text backend: every test data file, htools' error messages, the exact -S format."""

from __future__ import annotations

import math
import re
import subprocess
from pathlib import Path

import pytest

from model.backends.text import (
    alias,
    cluster_suffix,
    common_suffix,
    dump_text,
    load_text,
    parse_text,
    printf_0f,
    printf_f,
    read_double,
    read_int,
    save_text,
    show_double,
)
from model.check import Move, check_moves
from model.cluster import DEFAULT_IPOLICY, Disk, ISpec, read_name
from model.errors import InputError
from model.score import cluster_score

# each names an instance twice: htools and exalloc read them (model.cluster.OCCURRENCE_MARK)
DUPLICATE_NAMES = {"hroller-full.data": "inst-00", "multiple-tags.data": "new-1"}
INVALID = {"invalid-node.data", *DUPLICATE_NAMES}
GROUP = "g|u|preferred|\n\n"
NODE = "n1|1024|0|1024|100|100|4|N|u\n"
POLICY = "|1,1,1,1,1,1|1,1,1,1,1,1;2,2,2,2,2,2|plain,drbd|4.0|32.0\n"


def data_files(ganeti) -> list[Path]:
    return sorted(ganeti.data_dir.glob("*.data"))


def valid_files(ganeti) -> list[Path]:
    return [p for p in data_files(ganeti) if p.name not in INVALID]


def run(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=60)


def htools_error(text: str, tmp_path: Path) -> str | None:
    """What the real hinfo says about `text` (None when it loads)."""
    path = tmp_path / "probe.data"
    path.write_text(text)
    out = run("hinfo", "-t", path)
    match = re.search(r"Error: failed to load data, aborting: (.*)", out.stderr)
    return match.group(1) if match else None


# --------------------------------------------------------------------------- real test data


@pytest.mark.reference
def test_every_valid_file_loads_and_round_trips(ganeti):
    files = valid_files(ganeti)
    assert len(files) > 40
    for path in files:
        cluster = load_text(path)
        assert cluster.groups, path.name
        assert parse_text(dump_text(cluster), "rt") == cluster, path.name


@pytest.mark.reference
def test_dump_is_byte_identical_to_htools_save(ganeti, tmp_path):
    """hsqueeze -S writes FILE.original: the loaded cluster in htools' own serialisation."""
    for path in valid_files(ganeti):
        prefix = tmp_path / path.stem
        run(ganeti.hsqueeze, "-t", path, "-S", prefix)
        reference = Path(f"{prefix}.original").read_text()
        assert dump_text(load_text(path)) == reference, path.name


@pytest.mark.reference
def test_hinfo_reads_our_files_identically(ganeti, tmp_path):
    for path in valid_files(ganeti):
        ours = tmp_path / path.name
        save_text(load_text(path), ours)
        original = run(ganeti.hinfo, "-t", path, "-v", "-v", "-v")
        rewritten = run(ganeti.hinfo, "-t", ours, "-v", "-v", "-v")
        assert rewritten.returncode == original.returncode == 0, path.name
        assert rewritten.stdout == original.stdout, path.name
        assert rewritten.stderr == original.stderr, path.name
        assert "Cluster score:" in original.stdout


@pytest.mark.reference
def test_ganeti_files_naming_an_instance_twice_are_read_as_htools(ganeti, tmp_path):
    """htools keeps every instance of a repeated name (by index): exalloc too, keyed apart.
    The score is hinfo's, the -S snapshot hroller's byte for byte; a plan that would have to
    name one of them is refused with one line."""
    for name, instance in DUPLICATE_NAMES.items():
        path = ganeti.data_dir / name
        cluster = load_text(path)
        assert cluster.ambiguous_instances == (instance,)
        assert [read_name(i.name) for i in cluster.instances].count(instance) == 2
        real = run("hinfo", "-v", "-v", "-v", "-t", path).stdout
        assert f"Cluster score: {cluster_score(cluster):.8f}" in real
        run("hroller", "-t", path, "-S", tmp_path / name)
        assert dump_text(cluster) == (tmp_path / f"{name}.original").read_text()
        twin = next(
            i for i in cluster.instances if i.name != instance and read_name(i.name) == instance
        )
        for key in (instance, twin.name):
            with pytest.raises(InputError, match=f"several instances '{instance}'"):
                check_moves(cluster, [Move(key, twin.primary)])
    others = load_text(ganeti.data_dir / "multiple-tags.data")
    assert check_moves(others, [Move("new-0", "node-01-003", "node-01-004")]) is not None


@pytest.mark.reference
def test_invalid_node_file_is_rejected_like_htools(ganeti):
    path = ganeti.data_dir / "invalid-node.data"
    with pytest.raises(InputError) as info:
        load_text(path)
    err = info.value
    assert err.source == str(path)
    lines = path.read_text().splitlines()
    assert "no-such-node" in lines[err.line - 1]
    assert re.search(r"Unknown node '.*' for instance new-0", err.message)  # htools-text-backend
    assert err.message in run(ganeti.hinfo, "-t", path).stderr
    assert str(err).startswith(f"{path}:{err.line}: ")


@pytest.mark.reference
def test_special_files(ganeti):
    masters = load_text(ganeti.data_dir / "multiple-master.data")
    assert sum(n.master for n in masters.nodes) == 2  # htools loads it; only hroller objects
    missing = load_text(ganeti.data_dir / "missing-resources.data")
    assert missing.node("node2").free_memory_mib == 0  # the warning is resource arithmetic's
    empty = load_text(ganeti.data_dir / "empty-cluster.data")
    assert (len(empty.groups), len(empty.nodes), len(empty.instances)) == (1, 0, 0)
    assert empty.cluster_policy.minmax[0].max.spindle_use == 12


@pytest.mark.reference
def test_common_suffix_matches_htools(ganeti):
    path = ganeti.data_dir / "common-suffix.data"
    cluster = load_text(path)
    out = run(ganeti.hinfo, "-t", path, "-v", "-v").stdout
    reported = re.search(r"Stripping common suffix of '(.*)' from names", out).group(1)
    assert cluster_suffix(cluster) == reported == ".example.com"
    assert cluster.nodes[0].name == "node1.example.com"  # names stay whole, as in htools
    assert alias(cluster.nodes[0].name, reported) == "node1"
    assert alias("other.org", reported) == "other.org"


@pytest.mark.reference
def test_hsqueeze_trap_policy_line_is_a_cluster_tag(ganeti):
    cluster = load_text(ganeti.data_dir / "hsqueeze-underutilized.data")
    assert any(t.startswith("|127,1,0,0,1,1|") for t in cluster.cluster_tags)
    assert cluster.cluster_policy == DEFAULT_IPOLICY
    assert all(g.ipolicy == DEFAULT_IPOLICY for g in cluster.groups)


# --------------------------------------------------------------------------- errors as htools

BAD_INPUTS = {
    "three sections": GROUP + NODE + "\n",
    "int with fraction": GROUP + "n1|1024|12.0|1024|100|100|4|N|u\n\n\n",
    "leading dot": GROUP + "n1|.5|0|1024|100|100|4|N|u\n\n\n",
    "trailing space": GROUP + "n1|1024 |0|1024|100|100|4|N|u\n\n\n",
    "unknown group": GROUP + "n1|1024|0|1024|100|100|4|N|u2\n\n\n",
    "bad alloc policy": "g|u|prefer|\n\n" + NODE + "\n\n",
    "short group": "g|u|preferred\n\n" + NODE + "\n\n",
    "short node": GROUP + "n1|1024|0|1024|100|100|4|N\n\n\n",
    "bad exclusive storage": GROUP + "n1|1024|0|1024|100|100|4|N|u|1||X\n\n\n",
    "drbd same nodes": GROUP + NODE + "\ni1|128|100|1|running|Y|n1|n1|drbd|\n\n",
    "bad status": GROUP + NODE + "\ni1|128|100|1|runnin|Y|n1||plain|\n\n",
    "bad auto balance": GROUP + NODE + "\ni1|128|100|1|running|X|n1||plain|\n\n",
    "bad template": GROUP + NODE + "\ni1|128|100|1|running|Y|n1||plai|\n\n",
    "short instance": GROUP + NODE + "\ni1|128|100|1|running|Y|n1||plain\n\n",
    "bad forthcoming": GROUP + NODE + "\ni1|128|100|1|running|Y|n1||plain||1|-|X\n\n",
    "bad secondary": GROUP + NODE + "\ni1|128|100|1|running|Y|n1|n9|drbd|\n\n",
    "bad spindles": GROUP + NODE + "\ni1|128|100|1|running|Y|n1||plain||1|x\n\n",
    "odd minmax": GROUP + NODE + "\n\n\n" + "|1,1,1,1,1,1|1,1,1,1,1,1|plain|4.0|3\n",
    "short ispec": GROUP + NODE + "\n\n\n" + "|1,1,1,1,1|1,1,1,1,1,1;1,1,1,1,1,1|plain|4.0|3\n",
    "policy template": GROUP + NODE + "\n\n\n" + "|1,1,1,1,1,1||plai|4.0|3\n",
    "short policy": GROUP + NODE + "\n\n\n" + "|1,1,1,1,1,1||plain|4.0\n",
    "unknown owner": GROUP + NODE + "\n\n\n" + "zz|1,1,1,1,1,1||plain|4.0|3\n",
    "bad ratio": GROUP + NODE + "\n\n\n" + "g|1,1,1,1,1,1||plain|4.0|x\n",
    "bad ispec number": GROUP + NODE + "\n\n\n" + "g|1,1,1.5,1,1,1||plain|4.0|3\n",
}


@pytest.mark.reference
@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_error_messages_match_htools(case, tmp_path, htools):
    text = BAD_INPUTS[case]
    expected = htools_error(text, tmp_path)
    assert expected is not None
    with pytest.raises(InputError) as info:
        parse_text(text, "f.data")
    assert info.value.message == expected
    assert info.value.source == "f.data"


def test_error_line_numbers():
    text = GROUP + NODE + "n2|1024|0|1024|100|100|4|N|u\n\ni1|128|1|1|running|Y|zz||plain|\n\n"
    with pytest.raises(InputError) as info:
        parse_text(text, "f.data")
    assert info.value.line == 6
    assert str(info.value) == "f.data:6: Unknown node 'zz' for instance i1"
    with pytest.raises(InputError, match="2 sections instead of 4 or more"):
        parse_text(GROUP + NODE, "f.data")
    with pytest.raises(InputError, match="0 sections"):
        parse_text("", "f.data")


# --------------------------------------------------------------------------- units


@pytest.mark.parametrize(
    ("text", "value"),
    [("1", 1), (" 12", 12), ("-3", -3), ("- 5", -5), ("(5)", 5), ("( -5 )", -5), ("0x10", 16)]
    + [("0o17", 15), ("00012", 12), ("99999999999999999999", 7766279631452241919)],
)
def test_read_int_accepts_what_haskell_reads(text, value):
    assert read_int(text) == value


@pytest.mark.parametrize(
    ("text", "message"),
    [("12.0", "cannot parse string '12.0'"), ("1e3", "cannot parse string '1e3'")]
    + [("+3", "cannot parse string '+3'"), ("", "cannot parse string ''")]
    + [("1 ", "leftover characters when parsing '1 ': ' '"), ("0b1", "parsing '0b1': 'b1'")]
    + [("1_0", "'1_0': '_0'"), ("((5)", "cannot parse string")],
)
def test_read_int_rejects(text, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        read_int(text, "n1")


@pytest.mark.parametrize(
    ("text", "value"),
    [("1", 1.0), ("1.0", 1.0), ("1e3", 1000.0), ("1E3", 1000.0), ("1e+3", 1000.0)]
    + [("1e-1", 0.1), ("0x10", 16.0), ("-0", -0.0), ("1e400", math.inf), ("Infinity", math.inf)],
)
def test_read_double_accepts_what_haskell_reads(text, value):
    assert read_double(text) == value


@pytest.mark.parametrize(("text", "rest"), [(".5", None), ("1.", "."), ("1.e3", ".e3")])
def test_read_double_rejects(text, rest):
    with pytest.raises(ValueError) as info:
        read_double(text, "n1")
    if rest is None:
        assert str(info.value) == f"n1: cannot parse string '{text}'"
    else:
        assert str(info.value) == f"n1: leftover characters when parsing '{text}': '{rest}'"


def test_read_double_nan():
    assert math.isnan(read_double("NaN"))


def test_number_formats_as_haskell():
    assert [show_double(x) for x in (4.0, 32.0, 0.1, 0.01, 1e7, 9999999.0, 1.5)] == [
        "4.0",
        "32.0",
        "0.1",
        "1.0e-2",
        "1.0e7",
        "9999999.0",
        "1.5",
    ]
    assert [printf_f(x) for x in (1.0, 0.001, 1e22, 2.5)] == [
        "1.0",
        "0.001",
        "10000000000000000000000.0",
        "2.5",
    ]
    # %.0f rounds the shortest decimal digits half to even (checked against hbal -S)
    assert [printf_0f(x) for x in (2.5, 3.5, 0.5, 1.5, 4.5, 1.49999, -0.0)] == [
        "2",
        "4",
        "0",
        "2",
        "4",
        "1",
        "-0",
    ]
    assert printf_0f(1e23) == "100000000000000000000000"
    assert printf_0f(math.inf) == "Infinity"


def test_sections_split_at_every_blank_line():
    four = parse_text(GROUP + NODE + "\n\n" + POLICY, "f")  # 4 sections: the line is a tag
    assert four.cluster_tags == (POLICY.strip(),)
    assert four.cluster_policy == DEFAULT_IPOLICY
    five = parse_text(GROUP + NODE + "\n\n\n" + POLICY, "f")
    assert five.cluster_tags == ()
    assert five.cluster_policy.std == ISpec(1, 1, 1, 1, 1, 1)
    assert five.groups[0].ipolicy == DEFAULT_IPOLICY  # no group line: default, not the cluster's
    extra = parse_text(GROUP + NODE + "\n\n\n" + POLICY + "\nignored\n\nmore", "f")
    assert extra == five
    no_newline = parse_text(GROUP + NODE + "\n\n\n" + POLICY.rstrip("\n"), "f")
    assert no_newline == five


def test_group_policy_by_name_or_uuid():
    text = GROUP + NODE + "\n\n\n" + POLICY + "u" + POLICY
    cluster = parse_text(text, "f")
    assert cluster.groups[0].ipolicy.disk_templates == ("plain", "drbd")
    assert cluster.groups[0].ipolicy.minmax[0].max == ISpec(2, 2, 2, 2, 2, 2)


def test_defaults_padding():
    short = parse_text(GROUP + NODE + "\ni1|128|100|1|running|Y|n1||plain|\n\n", "f")
    full_text = (
        GROUP
        + "n1|1024|0|1024|100|100|4|N|u|1||N|0|1|1.0\n\n"
        + "i1|128|100|1|running|Y|n1||plain||1|-|N\n\n"
    )
    assert parse_text(full_text, "f") == short
    node = short.nodes[0]
    assert (node.spindles, node.tags, node.exclusive_storage) == (1, (), False)
    assert (node.free_spindles, node.reserved_cpus, node.cpu_speed) == (0, 1, 1.0)
    inst = short.instances[0]
    assert inst.disks == (Disk(100, None),)
    assert (inst.spindle_use, inst.forthcoming, inst.secondary) == (1, False, None)
    extra = parse_text(GROUP + NODE.strip() + "|1||N|0|1|1.0|x|y\n\n\n", "f")
    assert extra.nodes == short.nodes


def test_unknown_resources_make_an_offline_empty_node():
    text = GROUP + "n1|?|0|1024|100|100|4|M|u|7|a,b|Y|3|2|2.0\n\n\n"
    node = parse_text(text, "f").nodes[0]
    assert node.offline and not node.master and node.tags == ()
    assert (node.total_memory_mib, node.free_disk_mib, node.spindles, node.reserved_cpus) == (
        0,
        0,
        0,
        0,
    )
    assert node.group_uuid == "u"
    assert "n1|0|0|0|0|0|0|Y|u|0||N|0|0|1.0" in dump_text(parse_text(text, "f"))


def test_flags_tags_and_lists():
    text = (
        "g|u|last_resort|t1,,t2|net1,net2\n\n"
        + "n1|1024|0|1024|100|100|4|Y|u|2|a:b,c|Y|2|2|1.5\n"
        + "n2|1024|0|1024|100|100|4|M|u\n\n"
        + "i1|128|100|1|ADMIN_down|N|n1|n2|drbd|x,y|2|3|Y\n"
        + "i2|128|100|1|running|Y|n2||plain|\n\n"
        + "htools:iextags:x\n"
    )
    cluster = parse_text(text, "f")
    group = cluster.groups[0]
    assert (group.alloc_policy, group.tags, group.networks) == (
        "last_resort",
        ("t1", "", "t2"),
        ("net1", "net2"),
    )
    n1, n2 = cluster.nodes
    assert n1.offline and not n1.master and n1.total_memory_mib == 1024  # Y keeps resources
    assert n1.tags == ("a:b", "c") and n1.exclusive_storage and n1.cpu_speed == 1.5
    assert n2.master and not n2.offline
    i1, i2 = cluster.instances
    assert (i1.auto_balance, i1.forthcoming, i1.disks, i1.tags) == (
        False,
        True,
        (Disk(100, 3),),
        ("x", "y"),
    )
    assert i2.secondary is None
    assert cluster.cluster_tags == ("htools:iextags:x",)
    assert parse_text(dump_text(cluster), "rt") == cluster


def test_common_suffix_rules():
    assert common_suffix(["a.x.com", "b.y.com", "c.x.com"]) == ".com"
    assert common_suffix(["a.x.com", "b.x.com"]) == ".x.com"
    assert common_suffix(["a", "b.x"]) == ""
    assert common_suffix([]) == ""


def test_save_text_is_atomic(tmp_path):
    cluster = parse_text(GROUP + NODE + "\n\n\n" + POLICY, "f")
    target = tmp_path / "out.data"
    target.write_text("old")
    save_text(cluster, target)
    assert load_text(target) == cluster
    assert [p.name for p in tmp_path.iterdir()] == ["out.data"]


def test_load_text_missing_file(tmp_path):
    with pytest.raises(InputError) as info:
        load_text(tmp_path / "nope.data")
    assert info.value.source == str(tmp_path / "nope.data")
