"""`exalloc-hail -v -v` prints on stderr what the real hail 3.0.2 prints (model/htools/show.py):
the data warnings, `Received request: ` and `Received cluster data: ` with Haskell's `show` of
the request and the loaded cluster, and the dedicated-allocation line, byte for byte.

Judged against the real hail on Ganeti's own hail-*.json (all but hail-invalid-reloc.json,
an input error, whose message is exalloc's one-line error naming the file and key), with
`-t FILE` and `--simulate`, and on generated requests of every type (offline and drained
nodes, forthcoming instances, exclusion, location and migration tags, auto-repair tags,
names htools escapes). Needs the real hail and Ganeti's test data (scripts/get-ganeti-reference).
"""

from __future__ import annotations

import json
import random
import subprocess
import time
from pathlib import Path

import htools_gen as gen
import pytest
from test_hail_htools import NORMAL_REQUESTS

from cli import main as cli_main
from model.backends.iallocator import parse_request
from model.backends.text import show_string
from model.htools.loader import loading_warning
from model.htools.show import hail_dump, peer_map

# Ganeti's hail-*.json that hail answers: the normal ones and those on dedicated (or empty)
# clusters; hail-invalid-reloc.json is refused on reading
REQUESTS = tuple(
    sorted(
        (
            *NORMAL_REQUESTS,
            "hail-alloc-dedicated-1.json",
            "hail-alloc-drbd-restricted.json",
            "hail-alloc-ext.json",
            "hail-multialloc-dedicated.json",
        )
    )
)
NOTE = "exalloc: note: "


def real_hail(htools, args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([str(htools.hail), *args], capture_output=True, text=True)


def exalloc_hail(args: list[str], capfd: pytest.CaptureFixture) -> tuple[int, str, str]:
    """`exalloc-hail ARGS` in this process: exit code, stdout, and stderr without exalloc's
    own `note:` lines (the solver's verdict, printed after hail's bytes)."""
    capfd.readouterr()
    code = cli_main(["hail", *args])
    out, err = capfd.readouterr()
    kept = "".join(line for line in err.splitlines(keepends=True) if not line.startswith(NOTE))
    return code, out, kept


def test_every_request_file_is_compared(ganeti) -> None:
    names = {p.name for p in ganeti.data_dir.glob("hail-*.json")}
    assert names == {*REQUESTS, "hail-invalid-reloc.json"}


@pytest.mark.parametrize("mode", [[], ["--greedy"]], ids=["exact", "greedy"])
@pytest.mark.parametrize("name", REQUESTS)
def test_dump_is_hails(ganeti, capfd, name, mode) -> None:
    """`-v -v` on each of Ganeti's requests: stderr is the real hail's, byte for byte, in the
    exact default and with --greedy (htools-hail.test:112 matches `runSt = StatusDown` in it),
    and stdout is hail's answer there as elsewhere (the exact default's differs on
    hail-multialloc-dedicated, docs/hail.md)."""
    args = ["-v", "-v", str(ganeti.data_dir / name)]
    real = real_hail(ganeti, args)
    code, out, err = exalloc_hail([*mode, *args], capfd)
    assert real.returncode == code == 0
    assert "Received cluster data: ClusterData {" in err
    assert err == real.stderr
    if mode or name != "hail-multialloc-dedicated.json":
        assert out == real.stdout


@pytest.mark.parametrize("verbosity", [0, 1, 3])
def test_verbosity_levels(ganeti, capfd, verbosity) -> None:
    """No `-v`: the data warnings alone; `-v`: the request too; `-v -v -v` as `-v -v` (hail
    shows nothing more)."""
    args = [*(["-v"] * verbosity), str(ganeti.data_dir / "hail-alloc-drbd.json")]
    real = real_hail(ganeti, args)
    code, _, err = exalloc_hail(["--greedy", *args], capfd)
    assert err == real.stderr
    assert err.startswith("Warning: cluster has inconsistent data:\n")
    assert ("Received request: Allocate (Instance {" in err) == (verbosity >= 1)
    assert ("Received cluster data:" in err) == (verbosity >= 2)


@pytest.mark.parametrize(
    "source",
    [
        ["-t", "$D/partly-used.data"],
        ["-t", "$D/common-suffix.data"],  # aliases without the common suffix
        ["-t", "$D/hroller-full.data"],  # instance names read twice
        ["-t", "$D/multiple-tags.data"],
        ["--simulate", "p,8,8T,16g,16"],  # Simu.hs indices from 1
        ["--simulate", "p,2,8T,16g,16", "--simulate", "u,1,1T,1g,1,2,True"],
    ],
)
def test_dump_of_another_cluster(ganeti, capfd, source) -> None:
    """With `-t FILE` or `--simulate`, the request's indices are its own cluster's and the
    cluster data the one put in its place; both clusters' warnings are printed."""
    words = [w.replace("$D", str(ganeti.data_dir)) for w in source]
    args = ["-v", "-v", *words, str(ganeti.data_dir / "hail-alloc-drbd.json")]
    real = real_hail(ganeti, args)
    code, out, err = exalloc_hail(["--greedy", *args], capfd)
    assert real.returncode == code == 0
    assert (err, out) == (real.stderr, real.stdout)


AUTO_REPAIR_TAGS = (
    "ganeti:watcher:autorepair:migrate",
    "ganeti:watcher:autorepair:reinstall",
    "ganeti:watcher:autorepair:fix-storage",
    "ganeti:watcher:autorepair:bogus",
    "ganeti:watcher:autorepair",
    "ganeti:watcher:autorepair:suspend",
    "ganeti:watcher:autorepair:suspend:",
    "ganeti:watcher:autorepair:suspend:12345",  # in the past: no suspension
    "ganeti:watcher:autorepair:suspend:-5",
    "x\u00e9\u0001\u007f\u00102 \x0eH",  # escapes: \233 \SOH \DEL \DLE, \& before 2 and H
)


def _with_odd_tags(data: dict, rng: random.Random) -> dict:
    """Auto-repair tags (a suspension until 30 days from now among them) and a tag Haskell
    escapes, on the cluster, groups and instances."""
    future = f"ganeti:watcher:autorepair:suspend:{int(time.time()) + 30 * 86400}"
    tags = (*AUTO_REPAIR_TAGS, future)
    data["cluster_tags"] = data["cluster_tags"] + rng.sample(tags, rng.randint(0, 2))
    for obj in (*data["nodegroups"].values(), *data["instances"].values()):
        obj["tags"] = obj.get("tags", []) + rng.sample(tags, rng.randint(0, 2))
    return data


@pytest.mark.parametrize("seed", range(0, 60, 3))
def test_dump_of_random_requests(htools, seed, tmp_path) -> None:
    """Generated requests of every type, every third with auto-repair and escaped tags: the
    warnings and the dump are the real hail's stderr (nothing else is printed there)."""
    data = gen.for_seed(seed)
    if seed % 2:
        data = _with_odd_tags(data, random.Random(seed))
    text = json.dumps(data)
    path = tmp_path / "request.json"
    path.write_text(text)
    real = real_hail(htools, ["-v", "-v", str(path)])
    inp = parse_request(text)
    ours = loading_warning(inp.cluster) + hail_dump(inp, inp.cluster, 3)
    assert ours == real.stderr, f"seed {seed}, {data['request']['type']}"


def test_peer_map_order() -> None:
    """PeerMap.accumArray: largest memory first, summed per node, a new or updated entry before
    the others of its memory (Ganeti's htools-hail data shows this order)."""
    loaded = [(1, 512), (2, 4096), (1, 3584), (3, 0), (4, 4096), (5, 512)]
    assert peer_map(loaded) == [(4, 4096), (1, 4096), (2, 4096), (5, 512), (3, 0)]


def test_show_string_is_haskells() -> None:
    """GHC's showLitString on what htools may read in a name or tag."""
    assert show_string('a"b\\c\n') == '"a\\"b\\\\c\\n"'
    assert show_string("\u00e92\u00e9x") == '"\\233\\&2\\233x"'
    assert show_string("\x01\x7f\x0eH\x0eI\x1b") == '"\\SOH\\DEL\\SO\\&H\\SOI\\ESC"'


def test_request_dump_names_the_requests_cluster(tmp_path, capfd) -> None:
    """A small request written here, read through the program: the relocate's instance and
    nodes by index, the change-group's instances first (IAlloc.hs builds it so)."""
    data = gen.for_seed(13)
    assert data["request"]["type"] == "change-group"
    path = Path(tmp_path / "r.json")
    path.write_text(json.dumps(data))
    code, _, err = exalloc_hail(["--greedy", "-v", str(path)], capfd)
    names = list(data["instances"])
    wanted = [names.index(n) for n in data["request"]["instances"]]
    assert (
        code == 0
        and f"Received request: ChangeGroup {json.dumps(wanted).replace(' ', '')} [" in err
    )
