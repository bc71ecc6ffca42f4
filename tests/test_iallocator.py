"""IAllocator JSON: every hail-*.json request, hail's own errors, hail's exact response lines."""

from __future__ import annotations

import copy
import json
import random
import re
import subprocess
from pathlib import Path

import pytest

from model.backends.iallocator import (
    AllocateRequest,
    AllocateSecondaryRequest,
    ChangeGroupRequest,
    MultiAllocateRequest,
    NodeEvacuateRequest,
    RelocateRequest,
    load_request,
    new_instance,
    parse_request,
)
from model.backends.iallocator_response import (
    evacuate_response,
    format_failure_counts,
    migrate_opcode,
    multi_allocate_response,
    replace_disks_opcode,
    response_json,
)
from model.backends.text import dump_text
from model.cluster import DEFAULT_IPOLICY, Disk
from model.errors import InputError

TYPES = {
    "allocate": AllocateRequest,
    "multi-allocate": MultiAllocateRequest,
    "relocate": RelocateRequest,
    "node-evacuate": NodeEvacuateRequest,
    "change-group": ChangeGroupRequest,
    "allocate-secondary": AllocateSecondaryRequest,
}
INVALID = {"hail-invalid-reloc.json"}


def requests(ganeti) -> list[Path]:
    return sorted(ganeti.data_dir.glob("hail-*.json"))


def valid_requests(ganeti) -> list[Path]:
    return [p for p in requests(ganeti) if p.name not in INVALID]


def hail(htools, *args: object, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [str(htools.hail), *(str(a) for a in args)]
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=60)


def hail_error(htools, text: str) -> str | None:
    out = hail(htools, "-", stdin=text)
    if out.returncode == 0:
        return None
    return out.stderr.strip().splitlines()[0].removeprefix("Error: ")


def our_error(text: str) -> str | None:
    try:
        parse_request(text)
    except InputError as exc:
        return re.sub(r" \(at [^)]*\)$", "", exc.message)
    return None


# --------------------------------------------------------------------------- the test requests


@pytest.mark.reference
def test_every_request_loads_into_its_type(ganeti):
    files = valid_requests(ganeti)
    assert len(files) >= 18
    for path in files:
        raw = json.loads(path.read_text())
        req = raw["request"]
        loaded = load_request(path)
        assert type(loaded.request) is TYPES[req["type"]], path.name
        assert loaded.request.type == req["type"]
        cluster = loaded.cluster
        assert [g.uuid for g in cluster.groups] == list(raw["nodegroups"])  # key order kept
        assert [n.name for n in cluster.nodes] == list(raw["nodes"])
        assert [i.name for i in cluster.instances] == list(raw["instances"])
        assert cluster.cluster_tags == tuple(raw["cluster_tags"])
        assert cluster.cluster_policy == DEFAULT_IPOLICY  # the top-level ipolicy is ignored
        assert all(i.auto_balance for i in cluster.instances)
        for inst in cluster.instances:
            spec = raw["instances"][inst.name]
            assert inst.memory_mib == spec["memory"]
            assert inst.disk_mib == spec["disk_space_total"]
            assert [d.size_mib for d in inst.disks] == [d["size"] for d in spec["disks"]]
            assert [inst.primary, inst.secondary][: len(spec["nodes"])] == spec["nodes"][:2]
        check_request_fields(loaded.request, req, cluster)


def check_request_fields(request, req: dict, cluster) -> None:
    if isinstance(request, AllocateRequest):
        assert request.name == req["name"]
        assert request.memory == req["memory"]
        assert request.vcpus == req["vcpus"]
        assert request.disk_template == req["disk_template"]
        assert request.required_nodes == req["required_nodes"]
        assert request.disk_space_total == req["disk_space_total"]
        assert request.tags == tuple(req["tags"])
        assert request.group_name == req.get("group_name")
        restrict = req.get("restrict-to-nodes")
        assert request.restrict_to_nodes == (tuple(restrict) if restrict else None)
        inst = new_instance(request)
        assert (inst.name, inst.primary, inst.secondary) == (req["name"], "", None)
        assert inst.disk_mib == req["disk_space_total"]
    elif isinstance(request, MultiAllocateRequest):
        assert [r.name for r in request.instances] == [i["name"] for i in req["instances"]]
        assert [r.memory for r in request.instances] == [i["memory"] for i in req["instances"]]
        assert request.group_name == req.get("group_name")
    elif isinstance(request, RelocateRequest):
        assert request.name == req["name"]
        assert request.required_nodes == req["required_nodes"]
        assert request.relocate_from == tuple(req["relocate_from"])
    elif isinstance(request, NodeEvacuateRequest):
        assert request.instances == tuple(req["instances"])
        assert request.evac_mode == req["evac_mode"]
    elif isinstance(request, ChangeGroupRequest):
        assert request.instances == tuple(req["instances"])
        assert request.target_groups == tuple(req["target_groups"])
        assert len(request.target_group_uuids) == len(req["target_groups"])
    else:
        assert request.name == req["name"]
        assert cluster.instance_index[request.name].secondary is None


@pytest.mark.reference
def test_cluster_is_what_hail_saves(ganeti, tmp_path):
    """hail -S writes FILE.pre-ialloc: its loaded cluster in the text format."""
    for path in valid_requests(ganeti):
        prefix = tmp_path / path.stem
        hail(ganeti, "-S", prefix, path)
        reference = Path(f"{prefix}.pre-ialloc").read_text()
        assert dump_text(load_request(path).cluster) == reference, path.name


@pytest.mark.reference
@pytest.mark.parametrize("static", [None, 0, 100])
def test_static_kvm_node_memory(ganeti, tmp_path, static):
    raw = json.loads((ganeti.data_dir / "hail-alloc-drbd.json").read_text())
    raw["enabled_hypervisors"] = ["kvm", "xen-pvm"]
    raw["nodes"]["node1"]["offline"] = True
    raw["nodes"]["node2"]["vm_capable"] = False
    raw["nodes"]["node3"]["drained"] = True
    text = json.dumps(raw)
    args = [] if static is None else [f"--static-kvm-node-memory={static}"]
    hail(ganeti, "-S", tmp_path / "k", *args, "-", stdin=text)
    kwargs = {} if static is None else {"static_kvm_node_memory": static}
    loaded = parse_request(text, **kwargs)
    assert dump_text(loaded.cluster) == (tmp_path / "k.pre-ialloc").read_text()
    nodes = loaded.cluster.node_index
    expected = {None: 4096, 0: raw["nodes"]["node4"]["reserved_memory"], 100: 100}[static]
    assert nodes["node4"].node_memory_mib == expected
    assert nodes["node4"].hypervisor == "kvm"
    assert nodes["node1"].offline and nodes["node1"].total_memory_mib == 0
    assert nodes["node2"].offline and not nodes["node2"].vm_capable
    assert nodes["node3"].offline and nodes["node3"].drained
    assert nodes["node3"].total_memory_mib == raw["nodes"]["node3"]["total_memory"]


@pytest.mark.reference
def test_invalid_request_file(ganeti):
    path = ganeti.data_dir / "hail-invalid-reloc.json"
    expected = hail(ganeti, path).stderr.strip().removeprefix("Error: ")
    with pytest.raises(InputError) as info:
        load_request(path)
    assert info.value.source == str(path)
    assert info.value.message.startswith(expected)
    assert "key 'name': Unable to read String" in info.value.message  # htools-hail.test
    assert "request.name" in info.value.message


# --------------------------------------------------------------------------- errors as hail

SHELLTEST_INPUTS = {
    "": "Invalid JSON",
    "[]": "Unable to read JSObject",
    "{}": "key 'request' not found",
    '{"request": 0}': "key 'request'",
}


@pytest.mark.parametrize("text", sorted(SHELLTEST_INPUTS))
def test_shelltest_inputs(text):
    with pytest.raises(InputError, match=re.escape(SHELLTEST_INPUTS[text])):
        parse_request(text, "-")


def test_json_syntax_error_has_line_and_column():
    with pytest.raises(InputError) as info:
        parse_request('{\n  "request": {,\n}', "r.json")
    assert info.value.line == 2
    assert "column" in info.value.message and info.value.source == "r.json"
    with pytest.raises(InputError, match="NaN"):
        parse_request('{"a": NaN}')


def _pop(*keys):
    def edit(d):
        for k in keys[:-1]:
            d = d[k]
        d.pop(keys[-1])

    return edit


def _set(value, *keys):
    def edit(d):
        for k in keys[:-1]:
            d = d[k]
        d[keys[-1]] = value

    return edit


MUTATIONS = {
    "no enabled_hypervisors": ("hail-alloc-drbd.json", _pop("enabled_hypervisors")),
    "no cluster_tags": ("hail-alloc-drbd.json", _pop("cluster_tags")),
    "no total_memory": ("hail-alloc-drbd.json", _pop("nodes", "node1", "total_memory")),
    "offline, no total_memory": (
        "hail-alloc-drbd.json",
        lambda d: (
            _pop("nodes", "node1", "total_memory")(d),
            _set(True, "nodes", "node1", "offline")(d),
        ),
    ),
    "unknown group": ("hail-alloc-drbd.json", _set("nosuch", "nodes", "node1", "group")),
    "no ndparams": ("hail-alloc-drbd.json", _pop("nodes", "node1", "ndparams")),
    "no spindle_count": (
        "hail-alloc-drbd.json",
        _pop("nodes", "node1", "ndparams", "spindle_count"),
    ),
    "memory string": ("hail-alloc-drbd.json", _set("x", "nodes", "node1", "total_memory")),
    "no disks": ("hail-alloc-drbd.json", _pop("instances", "instance14", "disks")),
    "no disk size": ("hail-alloc-drbd.json", _pop("instances", "instance14", "disks", 0, "size")),
    "empty nodes": ("hail-alloc-drbd.json", _set([], "instances", "instance14", "nodes")),
    "unknown node": ("hail-alloc-drbd.json", _set(["zz"], "instances", "instance14", "nodes")),
    "bad admin_state": (
        "hail-alloc-drbd.json",
        _set("bogus", "instances", "instance14", "admin_state"),
    ),
    "bad nic mode": (
        "hail-alloc-drbd.json",
        _set("bogus", "instances", "instance14", "nics", 0, "mode"),
    ),
    "bad alloc_policy": (
        "hail-alloc-drbd.json",
        _set("bogus", "nodegroups", "uuid-group-1", "alloc_policy"),
    ),
    "no ipolicy": ("hail-alloc-drbd.json", _pop("nodegroups", "uuid-group-1", "ipolicy")),
    "no std": ("hail-alloc-drbd.json", _pop("nodegroups", "uuid-group-1", "ipolicy", "std")),
    "bad policy template": (
        "hail-alloc-drbd.json",
        _set(["plain", "bogus"], "nodegroups", "uuid-group-1", "ipolicy", "disk-templates"),
    ),
    "no name": ("hail-alloc-drbd.json", _pop("request", "name")),
    "type foo": ("hail-alloc-drbd.json", _set("foo", "request", "type")),
    "no type": ("hail-alloc-drbd.json", _pop("request", "type")),
    "bad template": ("hail-alloc-drbd.json", _set("bogus", "request", "disk_template")),
    "no required_nodes": ("hail-alloc-drbd.json", _pop("request", "required_nodes")),
    "relocate unknown instance": ("hail-reloc-drbd.json", _set("zz", "request", "name")),
    "relocate unknown node": ("hail-reloc-drbd.json", _set(["zz"], "request", "relocate_from")),
    "evacuate unknown instance": ("hail-node-evac.json", _set(["zz"], "request", "instances")),
    "bad evac_mode": ("hail-node-evac.json", _set("zz", "request", "evac_mode")),
    "unknown target group": ("hail-change-group.json", _set(["zz"], "request", "target_groups")),
    "secondary unknown instance": ("hail-alloc-secondary.json", _set("zz", "request", "name")),
    "multi no name": ("hail-multialloc-dedicated.json", _pop("request", "instances", 0, "name")),
}


@pytest.mark.reference
@pytest.mark.parametrize("case", sorted(MUTATIONS))
def test_errors_match_hail(ganeti, case):
    name, edit = MUTATIONS[case]
    raw = copy.deepcopy(json.loads((ganeti.data_dir / name).read_text()))
    edit(raw)
    text = json.dumps(raw)
    assert our_error(text) == hail_error(ganeti, text)


def test_error_names_the_key_path():
    raw = {
        "request": {"type": "allocate"},
        "nodegroups": {"g": {"name": "g", "alloc_policy": "preferred", "networks": [], "tags": []}},
        "nodes": {},
        "instances": {},
        "cluster_tags": [],
        "enabled_hypervisors": [],
    }
    with pytest.raises(InputError, match=re.escape("(at nodegroups.g.ipolicy)")):
        parse_request(json.dumps(raw))


# --------------------------------------------------------------------------- value rules


@pytest.mark.reference
def test_instance_value_rules(ganeti):
    raw = json.loads((ganeti.data_dir / "hail-alloc-drbd.json").read_text())
    inst = raw["instances"]["instance14"]
    states = {"up": "running", "down": "ADMIN_down", "offline": "ADMIN_offline", "bogus": "running"}
    for state, status in states.items():
        inst["admin_state"] = state
        assert parse_request(json.dumps(raw)).cluster.instance_index["instance14"].status == status
    inst.pop("admin_state")
    inst["forthcoming"] = True
    loaded = parse_request(json.dumps(raw)).cluster.instance_index["instance14"]
    assert loaded.status == "running" and loaded.forthcoming
    raw["request"]["memory"] = 1025.5  # Text.JSON rounds half to even
    assert parse_request(json.dumps(raw)).request.memory == 1026
    raw["request"]["disks"] = [{"size": 10, "spindles": 2}, {"size": 5}]
    assert parse_request(json.dumps(raw)).request.disks == (Disk(10, 2), Disk(5, None))


@pytest.mark.reference
def test_one_pass_readers_equal_the_checked_readers(ganeti, monkeypatch):
    """The fast readers of well-formed nodes and instances give exactly what the checked,
    key-by-key readers give: on Ganeti's requests, on odd but valid values, and on a
    generated 200-node cluster."""
    import dedicated_gen as gen

    import model.backends.iallocator as ia

    raw = json.loads((ganeti.data_dir / "hail-alloc-drbd.json").read_text())
    inst = raw["instances"]["instance14"]
    inst.update(admin_state=["not", "a", "string"], forthcoming=True)
    inst["disks"] = [{"size": 10, "spindles": 2}, {"size": 5.5}]  # Decimal: checked reader
    node = next(iter(raw["nodes"].values()))
    node.update(total_memory=1000.25, vm_capable=None)
    node.pop("tags", None)
    texts = [p.read_text() for p in valid_requests(ganeti)]
    texts += [
        json.dumps(raw),
        json.dumps(gen.allocate(random.Random(3), 200, template="drbd", fits=True)),
    ]
    for text in texts:
        fast = parse_request(text)
        with monkeypatch.context() as m:
            m.setattr(ia, "_quick_node", lambda *_: None)
            m.setattr(ia, "_quick_base", lambda *_: None)
            checked = parse_request(text)
        assert fast == checked
    assert parse_request(json.dumps(raw)).cluster.instance_index["instance14"].status == "running"


# --------------------------------------------------------------------------- responses


@pytest.mark.reference
def test_responses_are_byte_identical_to_hail(ganeti):
    seen = set()
    for path in valid_requests(ganeti):
        line = hail(ganeti, path).stdout.rstrip("\n")
        parsed = json.loads(line)
        prefix = "Request successful: " if parsed["success"] else "Request failed: "
        info = parsed["info"].removeprefix(prefix)
        assert response_json(parsed["success"], info, parsed["result"]) == line, path.name
        kind = load_request(path).request.type
        seen.add(kind)
        if kind == "multi-allocate" and parsed["success"]:
            allocated, failed = parsed["result"]
            assert multi_allocate_response(allocated, failed) == (info, parsed["result"])
        if kind in ("node-evacuate", "change-group"):
            moved, failed, jobs = parsed["result"]
            assert evacuate_response(moved, failed, jobs) == (info, parsed["result"])
            for job in jobs:
                for op in job:
                    if op["OP_ID"] == "OP_INSTANCE_REPLACE_DISKS":
                        assert op == replace_disks_opcode(op["instance_name"], op["remote_node"])
                    else:
                        assert op == migrate_opcode(op["instance_name"], op.get("target_node"))
    assert seen == set(TYPES)


def test_response_format():
    assert response_json(True, "success", ["node1"]) == (
        '{"success":true,"info":"Request successful: success","result":["node1"]}'
    )
    assert response_json(False, 'bad "x"', ["ignored"]) == (
        '{"success":false,"info":"Request failed: bad \\"x\\"","result":[]}'
    )
    assert response_json(True, "s", "node-2-2").endswith(',"result":"node-2-2"}')


def test_failure_counts_in_hail_order():
    counts = {"FailSpindles": 2, "FailMem": 12, "FailTags": 0, "FailN1": 1, "FailDisk": 3}
    assert format_failure_counts(counts) == "FailMem: 12, FailDisk: 3, FailN1: 1, FailSpindles: 2"
    assert format_failure_counts({}) == ""
    with pytest.raises(ValueError):
        format_failure_counts({"FailBogus": 1})


def test_load_request_from_text_and_stdin_marker(monkeypatch):
    import io

    text = '{"request": 0}'
    with pytest.raises(InputError, match="key 'request'"):
        load_request(text)
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    with pytest.raises(InputError) as info:
        load_request("-")
    assert info.value.source == "-"
