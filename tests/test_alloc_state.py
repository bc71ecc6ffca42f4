"""service.state and service.journal: requests, committed creations, replay after a crash."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from live_clusters import ONE_BIG_TWO_SMALL, roomy_text

from model.backends.text import parse_text
from model.errors import BadRequestError, InputError, ServiceError
from service.journal import JOURNAL_FILE, Journal
from service.state import CreateSpec, Creation, Limits, LiveCluster, parse_create

LIMITS = Limits.of(parse_text(ONE_BIG_TWO_SMALL))


def spec(name: str, memory: int = 6144, template: str = "plain") -> CreateSpec:
    return parse_create(
        {"name": name, "template": template, "memory": memory, "disks": [40960], "vcpus": 2},
        LIMITS,
    )


def test_create_spec_as_ganeti_builds_the_request() -> None:
    drbd = parse_create(
        {"name": "db", "template": "drbd", "memory": 4096, "disks": [1000, 2000], "vcpus": 2},
        LIMITS,
    )
    request = drbd.allocate_request(("big", "small-1"))
    assert request.required_nodes == 2
    assert request.disk_space_total == 1000 + 2000 + 2 * 128  # drbd metadata per disk
    assert request.restrict_to_nodes == ("big", "small-1")
    assert [d.spindles for d in request.disks] == [1, 1]
    plain = spec("web")
    assert plain.allocate_request(None).required_nodes == 1
    assert plain.disk_space_total_mib == 40960
    diskless = parse_create(
        {"name": "d", "template": "diskless", "memory": 1024, "vcpus": 1}, LIMITS
    )
    assert diskless.disk_space_total_mib == 0 and diskless.disks_mib == ()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"template": "floppy"}, "template: unknown disk template 'floppy'"),
        ({"memory": -1}, "memory: must be at least 1 MiB, not -1 MiB"),
        ({"memory": 0}, "memory: must be at least 1"),
        ({"memory": 10**15}, "memory: 1000000000000000 MiB is more than the whole cluster has"),
        ({"memory": True}, "memory: must be an integer, not True"),
        ({"memory": 1.5}, "memory: must be an integer, not 1.5"),
        ({"memory": "4096"}, "memory: must be an integer, not '4096'"),
        ({"disks": [-5]}, "disks[0]: must be at least 1 MiB"),
        ({"disks": [2**60]}, "disks[0]: 1152921504606846976 MiB is more than the whole cluster"),
        ({"disks": []}, "disks: a plain instance needs 1..16 disks, not 0"),
        ({"disks": [1] * 17}, "disks: a plain instance needs 1..16 disks, not 17"),
        ({"disks": "40960"}, "disks: must be a list of sizes in MiB"),
        ({"spindles": [1, 1]}, "spindles: must list one spindle count per disk (1)"),
        ({"vcpus": 10**6}, "vcpus: 1000000 is more than the whole cluster has"),
        ({"name": "a|b"}, "name: 'a|b' is not an instance name"),
        ({"name": ""}, "name: '' is not an instance name"),
        ({"name": "x" * 300}, "name: 'xxxxxxxx"),
        ({"template": "diskless"}, "disks: a diskless instance has no disks"),
    ],
)
def test_bad_create_requests_name_the_key(change: dict, message: str) -> None:
    obj = {"name": "web", "template": "plain", "memory": 4096, "disks": [40960], "vcpus": 2}
    obj.update(change)
    with pytest.raises(BadRequestError) as err:
        parse_create(obj, LIMITS)
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)


def creation(live: LiveCluster, name: str, node: str, request_id: str = "r") -> Creation:
    return Creation(live.seq + 1, request_id, spec(name), node, None, 1.0)


def test_live_cluster_applies_creations_strictly() -> None:
    live = LiveCluster.start(parse_text(ONE_BIG_TWO_SMALL))
    live = live.with_creation(creation(live, "a", "big"))
    live = live.with_creation(creation(live, "b", "big"))
    assert [i.name for i in live.cluster.instances] == ["a", "b"]
    assert live.check().ok
    with pytest.raises(InputError, match="does not fit on big"):
        live.with_creation(creation(live, "c", "big"))
    with pytest.raises(InputError, match="does not fit on small-1"):
        live.with_creation(creation(live, "c", "small-1"))
    with pytest.raises(InputError, match="exists already"):
        live.with_creation(creation(live, "a", "small-1"))
    assert live.dedicated
    before = LiveCluster.start(parse_text(ONE_BIG_TWO_SMALL)).allocation_vector()
    after = live.allocation_vector()
    assert all(a <= b for a, b in zip(after, before, strict=True)) and after != before


def test_journal_replays_after_restart(tmp_path: Path) -> None:
    journal = Journal.open(tmp_path, ONE_BIG_TWO_SMALL)
    live = journal.live
    for name in ("a", "b"):
        record = creation(live, name, "big", request_id=f"id-{name}")
        live = live.with_creation(record)
        journal.append(record)
    journal.close()
    again = Journal.open(tmp_path, None)  # -t may be left out on a restart
    assert [c.spec.name for c in again.live.creations] == ["a", "b"]
    assert again.live.cluster == live.cluster
    assert again.cut_bytes == 0
    again.close()
    with pytest.raises(ServiceError, match="another snapshot"):
        Journal.open(tmp_path, roomy_text())


def test_journal_cuts_a_torn_last_record(tmp_path: Path) -> None:
    journal = Journal.open(tmp_path, ONE_BIG_TWO_SMALL)
    record = creation(journal.live, "a", "big")
    journal.append(record)
    journal.close()
    path = tmp_path / JOURNAL_FILE
    whole = path.read_bytes()
    second = json.dumps(creation(journal.live.with_creation(record), "b", "big").to_json())
    path.write_bytes(whole + second.encode()[:40])  # killed in the middle of a write
    again = Journal.open(tmp_path, ONE_BIG_TWO_SMALL)
    assert [c.spec.name for c in again.live.creations] == ["a"]
    assert again.cut_bytes == 40
    assert path.read_bytes() == whole
    again.close()


def test_journal_refuses_a_corrupt_record_before_the_end(tmp_path: Path) -> None:
    journal = Journal.open(tmp_path, ONE_BIG_TWO_SMALL)
    journal.close()
    path = tmp_path / JOURNAL_FILE
    good = json.dumps(creation(journal.live, "a", "big").to_json())
    path.write_text("{not json}\n" + good + "\n")
    with pytest.raises(InputError, match=r"journal.jsonl:1: not a journal record"):
        Journal.open(tmp_path, None)
    path.write_text(good.replace('"big"', '"nowhere"') + "\n")
    with pytest.raises(InputError, match=r"journal.jsonl:1: .*unknown node nowhere"):
        Journal.open(tmp_path, None)


def test_one_service_per_state_directory(tmp_path: Path) -> None:
    first = Journal.open(tmp_path, ONE_BIG_TWO_SMALL)
    with pytest.raises(ServiceError, match="another allocation service"):
        Journal.open(tmp_path, ONE_BIG_TWO_SMALL)
    first.close()
    Journal.open(tmp_path, None).close()


def test_a_new_state_directory_needs_a_snapshot(tmp_path: Path) -> None:
    with pytest.raises(ServiceError, match="give the cluster snapshot with -t"):
        Journal.open(tmp_path / "new", None)
    with pytest.raises(InputError):
        Journal.open(tmp_path / "bad", "not|a|cluster\n")
    assert not (tmp_path / "bad" / "base.data").exists()
