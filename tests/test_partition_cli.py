"""`exalloc partition` end to end: exit codes, one-line errors, formats, JSON, SVG, baseline."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

import cli

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data" / "bareon"
CEPH = DATA / "fixtures" / "three_disks_ceph_example.yaml"
SCHEMA = DATA / "examples" / "server_lvm_schema.yaml"
HW = DATA / "examples" / "server_2ssd_4hdd_hw.yaml"


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(["partition", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_json_has_the_issue_keys_and_the_allocator_list(capsys):
    code, out, err = run_cli(capsys, "--schema", str(CEPH), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert {"status", "objective", "unallocated_mib", "layout", "bound", "gap", "build_s",
            "solve_s"} <= set(doc)  # fmt: skip
    assert doc["layout"] == yaml.safe_load(CEPH.read_text())["expected"]
    assert doc["status"] == "optimal" and doc["unallocated_mib"] == 0
    assert doc["objective"]["allocated_mib"] == 210


def test_text_output_has_status_layout_and_unallocated(capsys):
    code, out, _ = run_cli(capsys, "--schema", str(DATA / "fixtures" / "single_disk_max_only.yaml"))
    assert code == 0
    assert out.startswith("status: optimal")
    assert "unallocated: 50 MiB" in out and "is at its max_size" in out


@pytest.mark.parametrize("fmt", ["bareon", "ironic"])
def test_bareon_and_ironic_formats(capsys, fmt):
    code, out, err = run_cli(
        capsys, "--schema", str(SCHEMA), "--hw-info", str(HW), "--format", fmt, "--json"
    )
    assert code == 0, err
    layout = json.loads(out)["layout"]
    if fmt == "bareon":
        assert set(layout) == {"parteds", "pvs", "vgs", "lvs", "fss", "mds"}
        assert {vg["name"] for vg in layout["vgs"]} == {"os", "images"}
        assert all(p["partitions"][0]["flags"] == ["bios_grub"] for p in layout["parteds"])
    else:
        kinds = [p["type"] for p in layout["partitions"]]
        assert kinds.count("disk") == 6 and kinds.count("vg") == 2
        pv = [v for p in layout["partitions"] if p["type"] == "disk" for v in p["volumes"]
              if v["type"] == "pv"]  # fmt: skip
        assert pv and all(v["size"].endswith(" MiB") for v in pv)


def test_svg_is_valid_and_written_atomically(capsys, tmp_path):
    svg = tmp_path / "layout.svg"
    code, _, err = run_cli(capsys, "--schema", str(CEPH), "--svg", str(svg))
    assert code == 0, err
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg")
    texts = [t.text for t in root.iter() if t.tag.endswith("text")]
    assert "sda size=100" in texts and "ceph size=100" in texts
    assert [p.name for p in tmp_path.iterdir()] == ["layout.svg"]


def test_baseline_reports_lost_mib(capsys):
    code, out, _ = run_cli(capsys, "--schema", str(DATA / "probes" / "x07.yaml"),
                           "--baseline", "lp-floor", "--json")  # fmt: skip
    assert code == 0
    doc = json.loads(out)
    assert doc["unallocated_mib"] == 0
    assert doc["baseline"]["lost_mib"] == 1 and doc["baseline"]["unallocated_mib"] == 1


def test_infeasible_schema_is_one_line_exit_1_and_no_svg(capsys, tmp_path):
    svg = tmp_path / "x.svg"
    code, out, err = run_cli(
        capsys, "--schema", str(DATA / "probes" / "x08.yaml"), "--svg", str(svg)
    )
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "exceed the disks' capacity (100 MiB) by 10 MiB" in err
    assert not svg.exists()


def test_bad_yaml_is_one_line_with_file_and_line(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("dynamic_schema:\n  - {id: a, type: lv\nhw_info: {disks: []}\n")
    code, _, err = run_cli(capsys, "--schema", str(bad))
    assert code == 1 and err.count("\n") == 1
    assert f"{bad}:" in err and "invalid YAML" in err


def test_yaql_error_is_one_line(capsys, tmp_path):
    schema = tmp_path / "s.yaml"
    schema.write_text("- {id: root, type: lv, size: 'yaql=$.nope * 2'}\n")
    code, _, err = run_cli(capsys, "--schema", str(schema), "--hw-info", str(HW))
    assert code == 1 and err.count("\n") == 1 and "space 'root'" in err


def test_leave_preferred_empty_flag(capsys):
    code, out, _ = run_cli(capsys, "--schema", str(DATA / "probes" / "y06.yaml"),
                           "--leave-preferred-empty", "--json")  # fmt: skip
    assert code == 0 and json.loads(out)["unallocated_mib"] == 90


def test_cpsat_through_the_cli(capsys):
    code, out, _ = run_cli(capsys, "--schema", str(CEPH), "--solver", "cpsat", "--json")
    assert code == 0
    assert json.loads(out)["layout"] == yaml.safe_load(CEPH.read_text())["expected"]


def test_subprocess_entry_point():
    done = subprocess.run(
        [sys.executable, "-m", "cli", "partition", "--schema", str(DATA / "probes" / "x01.yaml"),
         "--json"],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert [s["size"] for s in doc["layout"][0]["spaces"]] == [34, 33, 33, 0]


def test_empty_schema_and_a_disk_too_small_for_bareon(capsys, tmp_path):
    fixture = tmp_path / "f.yaml"
    fixture.write_text("dynamic_schema: []\nhw_info: {disks: [{id: sda, size: 10}]}\n")
    code, out, _ = run_cli(capsys, "--schema", str(fixture), "--json")
    assert code == 0 and json.loads(out)["unallocated_mib"] == 10
    schema = tmp_path / "s.yaml"
    schema.write_text("- {id: a, type: lv, min_size: 5}\n")
    hw = tmp_path / "hw.yaml"
    hw.write_text("disks: [{id: sda, size: 10}, {id: sdb, size: 100}]\n")
    code, out, err = run_cli(capsys, "--schema", str(schema), "--hw-info", str(hw),
                             "--format", "ironic", "--json")  # fmt: skip
    assert code == 0, err
    disks = [p for p in json.loads(out)["layout"]["partitions"] if p["type"] == "disk"]
    assert [d["id"]["value"] for d in disks] == ["sdb"]
    assert disks[0]["volumes"] == [{"type": "partition", "size": "76 MiB"}]
