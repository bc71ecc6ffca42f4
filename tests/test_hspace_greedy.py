"""`exalloc space --greedy` beside the real hspace 3.0.2, byte for byte (issue 36).

Generated heterogeneous clusters (tests/space_cases.py: 1-3 groups, existing drbd, plain and
shared-storage instances, offline and drained nodes, group policies, hspace's options at
random) with new instances of drbd, plain or a shared template; each case runs one of four
output variants (human, machine-readable, `-S` files with `-p` and `-v -v`, `-l`). stdout,
stderr, the exit code and every file written must be the real hspace's. More seeds:
benchmarks/sweep_hspace.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import CI_ONLY
from space_cases import case, greedy_flags, run_both

from model.backends.text import dump_text

#: one of each output variant (greedy_flags: human, machine-readable, -S with -p and -v -v,
#: the tiered phase with -l), drbd, plain and shared templates among them
SEEDS = (0, 2, 4, 7)


@pytest.mark.parametrize("seed", SEEDS)
def test_port_is_hspace(ganeti, tmp_path: Path, seed: int) -> None:  # noqa: ANN001
    c = case(seed)
    path = tmp_path / "cluster.data"
    path.write_text(dump_text(c.cluster))
    flags = greedy_flags(c, seed)
    real, port = run_both(path, flags, tmp_path)
    assert (port.code, port.stdout, port.stderr) == (real.code, real.stdout, real.stderr), flags
    assert port.files == real.files


def test_saved_files_load_in_hinfo(ganeti, tmp_path: Path) -> None:  # noqa: ANN001
    """The -S files are what hspace writes: the real hinfo reads them, and they hold the new
    instances."""
    import subprocess

    c = case(6)  # drbd, -S: 69 instances placed
    path = tmp_path / "cluster.data"
    path.write_text(dump_text(c.cluster))
    real, port = run_both(path, greedy_flags(c, 6), tmp_path)
    assert port.files == real.files and "saved.standard" in port.files
    saved = tmp_path / "port" / "saved.standard"
    proc = subprocess.run(["hinfo", "-t", str(saved)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "new-68|" in port.files["saved.standard"]


#: Bad option values (BAD_VALUES) and `-l` at or below 0, each as the real hspace answers it: its
#: `Error while parsing command line arguments:` message and exit 1 (the first bad value on
#: the command line; Haskell's `reads` for the numbers: hex, parentheses, leftovers), and
#: `-l 0` / `-l -2`, where hspace's human output dies in `head []` after the tiered block
#: (`hspace: Prelude.head: empty list`, exit 1, the tiered -S file written).
ACCEPTED = [  # the first two exit 0, the others die in head []
    ["--standard-alloc=0x10g,(1)g,1"],  # 16 GiB, 1 GiB: Haskell reads hex and parentheses
    ["-l", "-2", "--machine-readable"],
    ["-l", "0"],
    ["-l", "-2", "-S", "saved"],
]
BAD_VALUES = [
    ["--standard-alloc=1,2"],
    ["--standard-alloc=a,1,1"],
    ["--standard-alloc=1,a,1"],
    ["--standard-alloc=1,1,1.5"],
    ["--standard-alloc=1,1,1,"],
    ["--standard-alloc=1x,1,1"],
    ["--standard-alloc=1e3,1,1"],
    ["--tiered-alloc=1,1,b"],
    ["--max-cpu=1x"],
    ["--max-cpu=0"],
    ["--spindle-use=x"],
    ["--spindle-use=-1"],
    ["--machine-readable=maybe"],
    ["-l", "1.5"],
    ["--static-kvm-node-memory=x"],
    ["--max-cpu=x", "--standard-alloc=1,2"],
    ["--standard-alloc=1,2", "--max-cpu=x"],
    ["--disk-template=nosuch"],  # argparse's choices made these a usage error, exit 2
    ["--disk-template", "DRBD"],
]


@pytest.mark.parametrize("flags", BAD_VALUES + ACCEPTED, ids=" ".join)
def test_bad_values_and_short_limits_as_hspace(ganeti, tmp_path: Path, flags) -> None:  # noqa: ANN001
    path = ganeti.data_dir / "hspace-tiered.data"
    real, port = run_both(path, flags, tmp_path)
    assert (port.code, port.stdout, port.stderr) == (real.code, real.stdout, real.stderr)
    assert port.files == real.files
    refused = real.stderr.startswith("Error while parsing command line arguments:\n")
    assert refused == (flags not in ACCEPTED)  # the list holds what it says it holds
    assert real.code == (0 if flags in ACCEPTED[:2] else 1)


#: Ganeti's IAllocator requests as hspace's `-I` input (hspace merges them twice: every
#: instance on its nodes twice, each merge's inconsistency warning, the instance list once in
#: `-S`), with the outputs that show it: human, machine-readable (hspace's "internal
#: inconsistency" on hail-alloc-drbd.json), -S with -v -v (the allocation maps, the metrics
#: table: its header alone when no node is online, hail-alloc-ext.json).
REQUESTS = [
    "hail-alloc-drbd.json",
    "hail-alloc-ext.json",
    "hail-invalid-reloc.json",  # hspace's own words for a bad request
    "hail-node-evac.json",
    "hail-alloc-dedicated-1.json",
    "hail-alloc-secondary.json",
    "hail-change-group.json",
    "hail-multialloc-dedicated.json",
]
OUTPUTS = [[], ["--machine-readable"], ["-S", "saved", "-pname,pcnt", "-v", "-v", "-v", "-v"]]
#: The default run's cases (2-6 s each, loaded); the others (up to 33 s: the port's tiered
#: phase on hail-change-group.json) run in CI
DEFAULT = {
    ("hail-alloc-drbd.json", 1),
    ("hail-alloc-drbd.json", 2),
    ("hail-alloc-ext.json", 2),
    ("hail-invalid-reloc.json", 0),
    ("hail-alloc-secondary.json", 0),
}


def _request_params() -> list:
    return [
        pytest.param(r, f, marks=() if (r, k) in DEFAULT else CI_ONLY)
        for r in REQUESTS
        for k, f in enumerate(OUTPUTS)
    ]


@pytest.mark.parametrize(
    ("request_file", "flags"),
    _request_params(),
    ids=lambda v: v if isinstance(v, str) else " ".join(v) or "human",
)
def test_iallocator_input_as_hspace(ganeti, tmp_path: Path, request_file: str, flags) -> None:  # noqa: ANN001
    path = ganeti.data_dir / request_file
    real, port = run_both(path, flags, tmp_path, option="-I")
    assert (port.code, port.stdout, port.stderr) == (real.code, real.stdout, real.stderr)
    assert port.files == real.files


#: --simulate clusters: Simu.parseData numbers their nodes from 1, which -pidx, the peermap
#: field and -v -v -v -v's "Allocatable nodes" show (a reduced find of
#: benchmarks/greedy_diff.py: the port numbered them from 0); drbd pairs and single nodes
SIMULATED = [
    [
        "--simulate=preferred,3,500G,64g,8",
        "--simulate=p,2,1T,32g,4",
        "--disk-template=drbd",
        "--standard-alloc=102400,8192,4",
        "--tiered-alloc=204800,16384,4",
        "-l",
        "3",
        "-pidx,peermap,plist,slist,name",
        *("-v",) * 4,
    ],
    ["--simulate=p,1,50G,128g,4", *("-v",) * 4, "--standard-alloc=102400,8192,4", "-p+idx"],
]


@pytest.mark.parametrize("flags", SIMULATED, ids=lambda f: f[0])
def test_simulated_cluster_as_hspace(ganeti, tmp_path: Path, flags) -> None:  # noqa: ANN001
    import subprocess

    from shelltests import exalloc_scripts

    exalloc = str(exalloc_scripts()["exalloc"])
    runs = []
    for name, argv in (("real", [str(ganeti.hspace)]), ("port", [exalloc, "space", "--greedy"])):
        where = tmp_path / name
        where.mkdir()
        proc = subprocess.run([*argv, *flags], capture_output=True, text=True, cwd=where)
        runs.append((proc.returncode, proc.stdout, proc.stderr))
    assert runs[1] == runs[0]
    assert "Allocatable nodes: " in runs[0][2]


#: a node reporting 1,536 MiB less free memory than its instances leave: the loader warns
INCONSISTENT = """\
default|uuid-g|preferred||

nodeA|32768|1024|17408|512000|307200|8|N|uuid-g|1||N|1|1|1.0
nodeB|32768|1024|30720|512000|307200|8|N|uuid-g|1||N|1|1|1.0

inst1|8192|102400|2|running|Y|nodeA|nodeB|drbd||1|-|N
inst2|4096|102400|2|running|Y|nodeA|nodeB|drbd||1|-|N
inst4|512|1024|1|running|Y|nodeA|nodeB|drbd||1|-|N


|1024,1,10240,1,1,1|128,1,1024,1,1,1;32768,8,1048576,16,8,12|plain,drbd|4.0|32.0
"""


@pytest.mark.parametrize("quiet", [["-q"], ["-q", "-q"], ["-q", "-q", "-v"]], ids=" ".join)
def test_loader_warning_as_hspace(ganeti, tmp_path: Path, quiet) -> None:  # noqa: ANN001
    """htools warns unless the verbosity is exactly 0: one -q (or -q -q -v) silences it,
    -q -q (-1) does not (a reduced find of benchmarks/greedy_diff.py: the port was silent
    below 1)."""
    path = tmp_path / "inconsistent.data"
    path.write_text(INCONSISTENT)
    flags = [*quiet, "--standard-alloc=10240,1024,1", "--tiered-alloc=10240,1024,1"]
    real, port = run_both(path, flags, tmp_path)
    assert (port.code, port.stdout, port.stderr) == (real.code, real.stdout, real.stderr)
    verbosity = 1 + quiet.count("-v") - quiet.count("-q")
    assert ("Warning: cluster has inconsistent data" in real.stderr) == (verbosity != 0)


@pytest.mark.parametrize("template", ["drbd", "plain"])
def test_no_allocatable_node_as_hspace(ganeti, tmp_path: Path, template: str) -> None:  # noqa: ANN001
    """Every node offline: -v -v -v -v shows the empty AllocNodes as hspace does, `Right []`
    for drbd's pairs and `Left []` for one node (the port said `Left []` for both: a reduced
    find of benchmarks/greedy_diff.py)."""
    path = tmp_path / "inconsistent.data"
    path.write_text(INCONSISTENT)
    flags = ["-O", "nodeA", "-O", "nodeB", f"--disk-template={template}", *("-v",) * 4]
    flags += ["--standard-alloc=10240,1024,1", "--tiered-alloc=10240,1024,1"]
    real, port = run_both(path, flags, tmp_path)
    assert (port.code, port.stdout, port.stderr) == (real.code, real.stdout, real.stderr)
    assert "Allocatable nodes: " in real.stderr
