"""Against a running Ganeti 3.0.2 master: Ganeti itself calls exalloc and runs its plans.

`tests/live/ganeti-master.sh up` creates a one-node cluster with Ganeti's built-in fake
hypervisor (Debian's `ganeti` package; ../shared/specs/live-ganeti.md has the traps), the
module fixture below tears it down whatever the tests did (tests/test_ganeti_nodes.py
brings up two nodes after it). Every test here talks to the real
daemons: noded runs exalloc-hail as Ganeti's iallocator, luxid answers `-L`, the RAPI daemon
`-m`, and the job queue runs what `-X` submits. Marked `live`, outside the default run
(`python -m pytest -m live -rs tests/test_ganeti_master.py`, .ci/run); where the machine refuses
(not root, no right to add an address) every test is skipped with the script's reason.
docs/live.md, "Against a running Ganeti", says how to reproduce them.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "tests" / "live" / "ganeti-master.sh"
IALLOCATORS = Path("/usr/lib/ganeti/iallocators")
BIN = Path(sys.executable).parent

pytestmark = pytest.mark.live


@dataclass(frozen=True)
class Master:
    """The settings `ganeti-master.sh up` printed."""

    node: str
    os: str
    rapi: str
    luxi: str


@pytest.fixture(scope="module")
def master() -> Iterator[Master]:
    up = subprocess.run(
        ["bash", str(SCRIPT), "up"], capture_output=True, text=True, timeout=900, check=False
    )
    if up.returncode == 77:
        pytest.skip(up.stderr.strip().splitlines()[-1])
    try:
        assert up.returncode == 0, f"ganeti-master.sh up failed:\n{up.stderr}"
        found = dict(line.split("=", 1) for line in up.stdout.split())
        yield Master(found["NODE"], found["OS"], found["RAPI"], found["LUXI"])
    finally:
        down = subprocess.run(
            ["bash", str(SCRIPT), "down"], capture_output=True, text=True, timeout=600, check=False
        )
        assert down.returncode == 0, f"ganeti-master.sh down failed:\n{down.stderr}"


def run(*words: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(list(words), capture_output=True, text=True, timeout=timeout, check=False)


def add(
    master: Master, name: str, *extra: str, memory: str = "128M", vcpus: int = 1
) -> subprocess.CompletedProcess:
    """`gnt-instance add` of a diskless instance (extra words first: template, -I, ...)."""
    return run(
        "gnt-instance", "add", "-t", "diskless", *extra, "-o", master.os, "--no-nics",
        "--no-name-check", "--no-ip-check", "-B", f"memory={memory},vcpus={vcpus}", name,
    )  # fmt: skip


def selected(done: subprocess.CompletedProcess, name: str, iallocator: str) -> list[str]:
    """The nodes Ganeti says the iallocator chose (LUInstanceCreate's INFO line)."""
    found = re.search(
        rf"Selected nodes for instance {name} via iallocator {iallocator}: (\S+)",
        done.stdout + done.stderr,
    )
    assert found, f"no iallocator line for {name}:\n{done.stdout}{done.stderr}"
    return found.group(1).split(",")


def instances() -> dict[str, tuple[str, str, str]]:
    """name -> (primary node, disk template, status) as `gnt-instance list` shows them."""
    done = run("gnt-instance", "list", "--no-headers", "--separator=|", "-o",
               "name,pnode,disk_template,status")  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = [line.split("|") for line in done.stdout.splitlines() if line]
    return {row[0]: (row[1], row[2], row[3]) for row in rows}


def remove(*names: str) -> None:
    for name in names:
        if name in instances():
            done = run("gnt-instance", "remove", "-f", name)
            assert done.returncode == 0, done.stderr


@pytest.fixture
def exalloc_hail(master: Master) -> Iterator[Path]:
    """exalloc-hail installed as Ganeti's iallocator by docs/hail.md's own command."""
    doc = (REPO / "docs" / "hail.md").read_text()
    command = next(line for line in doc.splitlines() if line.startswith("ln -s "))
    link = IALLOCATORS / "exalloc-hail"
    link.unlink(missing_ok=True)
    env = {"PATH": f"{BIN}:/usr/sbin:/usr/bin:/sbin:/bin"}
    done = subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert link.resolve() == (BIN / "exalloc-hail").resolve()
    yield link
    link.unlink(missing_ok=True)


@dataclass(frozen=True)
class Call:
    """One call Ganeti made to the capturing iallocator."""

    request: Path
    args: list[str]
    answer: str


@pytest.fixture
def capture(exalloc_hail: Path, tmp_path: Path) -> Iterator[Path]:
    """An iallocator `exalloc-capture` that keeps the request Ganeti wrote (noded deletes it),
    the arguments and exalloc-hail's answer, then answers with exalloc-hail's output."""
    folder = tmp_path / "calls"
    folder.mkdir()
    wrapper = IALLOCATORS / "exalloc-capture"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'd="{folder}/$(date +%s%N)-$$"\n'
        'mkdir "$d" && cp "$1" "$d/request.json" && printf "%s\\n" "$@" >"$d/args"\n'
        f'"{exalloc_hail}" "$@" >"$d/answer"\n'
        'rc=$?\ncat "$d/answer"\nexit $rc\n'
    )
    wrapper.chmod(0o755)
    yield folder
    wrapper.unlink(missing_ok=True)


def calls(folder: Path) -> list[Call]:
    return [
        Call(
            d / "request.json",
            (d / "args").read_text().split("\n")[1:-1],
            (d / "answer").read_text(),
        )
        for d in sorted(folder.iterdir())
    ]


# -- exalloc-hail as Ganeti's iallocator -----------------------------------------------------------


def test_gnt_instance_add_places_with_exalloc_hail(master, exalloc_hail):
    names = ["exl-diskless", "exl-file"]
    try:
        diskless = add(master, names[0], "-I", "exalloc-hail")
        assert diskless.returncode == 0, diskless.stderr
        file = run("gnt-instance", "add", "-t", "file", "--disk", "0:size=512M", "-I",
                   "exalloc-hail", "-o", master.os, "--no-nics", "--no-name-check",
                   "--no-ip-check", "-B", "memory=128M", names[1])  # fmt: skip
        assert file.returncode == 0, file.stderr
        assert selected(diskless, names[0], "exalloc-hail") == [master.node]
        assert selected(file, names[1], "exalloc-hail") == [master.node]
        listed = instances()
        assert listed[names[0]] == (master.node, "diskless", "running")
        assert listed[names[1]] == (master.node, "file", "running")
    finally:
        remove(*names)


def test_default_iallocator_exalloc_hail(master, exalloc_hail):
    done = run("gnt-cluster", "modify", "--default-iallocator", "exalloc-hail")
    assert done.returncode == 0, done.stderr
    try:
        plain = add(master, "exl-default")  # no -I, no -n: the cluster's default iallocator
        assert plain.returncode == 0, plain.stderr
        assert selected(plain, "exl-default", "exalloc-hail") == [master.node]
        assert instances()["exl-default"][0] == master.node
    finally:
        run("gnt-cluster", "modify", "--default-iallocator", "hail")
        remove("exl-default")


def test_the_request_ganeti_wrote_is_answered_offline_the_same(master, capture):
    try:
        done = add(master, "exl-captured", "-I", "exalloc-capture")
        assert done.returncode == 0, done.stderr
        [call] = calls(capture)
        # Ganeti calls `NAME REQUEST --no-capacity-checks` (the cluster's iallocator parameters).
        assert call.args == ["--no-capacity-checks"]
        request = json.loads(call.request.read_text())
        assert request["request"]["type"] == "allocate"
        assert request["request"]["name"] == "exl-captured"
        offline = run(str(BIN / "exalloc"), "hail", str(call.request), *call.args)
        assert offline.returncode == 0, offline.stderr
        assert offline.stdout == call.answer
        answer = json.loads(call.answer)
        assert answer["success"] is True and answer["result"] == [master.node]
        # The real hail, on the same request with the same parameters, chooses the same.
        hail = json.loads(run(str(IALLOCATORS / "hail"), str(call.request), *call.args).stdout)
        assert hail["result"] == answer["result"]
    finally:
        remove("exl-captured")


def test_a_refused_request_is_what_ganeti_reports(master, capture):
    done = add(master, "exl-too-big", "-I", "exalloc-capture", memory="256G")
    assert done.returncode != 0
    [call] = calls(capture)
    answer = json.loads(call.answer)
    assert answer["success"] is False
    assert "FailMem" in answer["info"]
    assert f"Can't compute nodes using iallocator 'exalloc-capture': {answer['info']}" in (
        done.stdout + done.stderr
    )
    assert "exl-too-big" not in instances()


@pytest.fixture
def hail_server(exalloc_hail: Path, tmp_path: Path) -> Iterator[Path]:
    """`exalloc hail-server` on a socket of its own, and an iallocator `exalloc-served` that is
    exalloc-hail with `EXALLOC_HAIL_SOCKET` naming it. On the default socket
    (/run/exalloc/hail.sock) the server would also answer every other exalloc-hail call made
    on this machine while the test runs; noded passes its own environment to the iallocator,
    so the variable is set by the wrapper. Yields the server's log."""
    folder = Path(tempfile.mkdtemp(prefix="exl-hs-", dir="/tmp"))  # a socket path is <= 107 bytes
    socket = folder / "hail.sock"
    log = tmp_path / "hail-server.log"
    wrapper = IALLOCATORS / "exalloc-served"
    wrapper.write_text(f'#!/bin/sh\nEXALLOC_HAIL_SOCKET="{socket}" exec "{exalloc_hail}" "$@"\n')
    wrapper.chmod(0o755)
    with log.open("w") as err:
        server = subprocess.Popen(
            [str(BIN / "exalloc"), "hail-server", "--socket", str(socket)],
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        deadline = time.monotonic() + 120
        while "listening on" not in log.read_text():
            assert server.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the hail server did not start in 120 s"
            time.sleep(0.2)
        yield log
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
        wrapper.unlink(missing_ok=True)
        shutil.rmtree(folder, ignore_errors=True)


def test_ganeti_calls_go_through_the_hail_server(master, hail_server):
    try:
        done = add(master, "exl-served", "-I", "exalloc-served")
        assert done.returncode == 0, done.stderr
        assert selected(done, "exl-served", "exalloc-served") == [master.node]
        # The server logs one line per call it answered (docs/hail.md): noded's request file,
        # then the cluster's iallocator parameters.
        served = [line for line in hail_server.read_text().splitlines() if ": hail " in line]
        assert len(served) == 1, hail_server.read_text()
        assert re.search(r": hail /\S+ --no-capacity-checks: exit 0 in ", served[0])
    finally:
        remove("exl-served")


# -- reading the live cluster as htools reads it -------------------------------------------------

#: Node fields of the text format that are the machine's own free memory and disk (the fake
#: hypervisor reports /proc/meminfo, file storage the file system's free space): they move
#: between any two reads, whoever reads. Everything else must be byte for byte htools'.
VOLATILE = {"mnode": 2, "mfree": 3, "dfree": 5}


def steady(snapshot: str) -> str:
    """The snapshot with the volatile node fields blanked (nodes are its second section)."""
    sections = snapshot.split("\n\n")
    nodes = []
    for line in sections[1].splitlines():
        fields = line.split("|")
        for index in VOLATILE.values():
            assert 0 <= int(fields[index]), line
            fields[index] = "*"
        nodes.append("|".join(fields))
    return "\n\n".join([sections[0], "\n".join(nodes), *sections[2:]])


def exalloc_read(source: str, folder: Path) -> tuple[str, str]:
    """`exalloc info SOURCE -S FILE`: its output and the snapshot it wrote."""
    path = folder / "exalloc.data"
    path.unlink(missing_ok=True)
    done = run(str(BIN / "exalloc"), "info", source, "-S", str(path))
    assert done.returncode == 0, done.stderr
    return done.stdout, path.read_text()


def hscan_read(source: str, folder: Path) -> str:
    """What `hscan SOURCE` writes (`-L`: LOCAL.data; an address: a file named after it)."""
    out = folder / "hscan"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    done = run("hscan", "-d", str(out), source)
    assert done.returncode == 0, done.stderr
    [written] = list(out.iterdir())
    return written.read_text()


def bracketed(source: str, address: str, folder: Path) -> tuple[str, str, str] | None:
    """exalloc, hscan, exalloc again: when both exalloc reads show the same cluster, hscan read
    that cluster too (nothing changed in between); None when an instance came in meanwhile."""
    _, first = exalloc_read(source, folder)
    theirs = hscan_read(address, folder)
    out, second = exalloc_read(source, folder)
    if steady(first) != steady(second):
        return None
    return out, second, theirs


@pytest.mark.parametrize("kind", ["luxi", "rapi"])
def test_info_reads_the_live_cluster_as_hscan_while_instances_are_added(
    master, exalloc_hail, tmp_path, kind
):
    source = "-L" if kind == "luxi" else f"-m{master.rapi}"
    address = "-L" if kind == "luxi" else master.rapi
    names = [f"exl-read-{kind}-{i}" for i in range(4)]
    added: list[subprocess.CompletedProcess] = []

    def adds() -> None:
        # a quiet spell after each creation but the last, so that a bracketed read (exalloc,
        # hscan, exalloc: a few seconds) can fall between two creations on a fast machine too
        for k, name in enumerate(names):
            added.append(add(master, name, "-I", "exalloc-hail"))
            if k < len(names) - 1:
                time.sleep(8)

    adder = threading.Thread(target=adds)
    adder.start()
    compared_during = 0
    try:
        while adder.is_alive():
            found = bracketed(source, address, tmp_path)
            if found is not None and adder.is_alive():
                _, ours, theirs = found
                assert steady(ours) == steady(theirs)
                compared_during += 1
        adder.join()
        assert [done.returncode for done in added] == [0] * len(names), added[0].stderr
        assert compared_during >= 1, "no read while the instances were being added"
        for _ in range(5):
            found = bracketed(source, address, tmp_path)
            if found is not None:
                break
        assert found is not None, "the cluster kept changing after the adds"
        out, ours, theirs = found
        assert steady(ours) == steady(theirs)
        assert all(f"\n{name}|128|0|1|running|Y|{master.node}||diskless|" in ours for name in names)
        # The score exalloc gives the cluster it read is hinfo's on that same snapshot.
        snapshot = tmp_path / "exalloc.data"
        hinfo = run("hinfo", "-t", str(snapshot))
        assert hinfo.returncode == 0, hinfo.stderr
        assert score_line(out) == score_line(hinfo.stdout)
    finally:
        adder.join()
        remove(*names)


def score_line(text: str) -> str:
    found = re.search(r"^Cluster score: \S+$", text, re.M)
    assert found, text
    return found.group(0)


# -- opportunistic locking for real --------------------------------------------------------------


def node_free_memory_mib(node: str) -> int:
    done = run("gnt-node", "list", "--no-headers", "--units=m", "-o", "mfree", node)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip())


def unallocated_mib(request: dict, node: str) -> int:
    """htools' unallocated memory of NODE in an IAllocator request (Node.hs, unallocatedMem):
    the memory of record (total less the node's own less its instances') less the memory
    nobody accounts for, i.e. the smaller of that and the reported free memory."""
    facts = request["nodes"][node]
    used = sum(
        i["memory"] for i in request["instances"].values() if i["nodes"] and i["nodes"][0] == node
    )
    of_record = facts["total_memory"] - facts["reserved_memory"] - used
    return min(of_record, facts["free_memory"])


def test_concurrent_opportunistic_creations(master, capture):
    """Eight clients at once, each `gnt-instance add --opportunistic-locking`, 4 GiB each on a
    node with room for a few. Ganeti 3.0.2 (lib/cmdlib/instance_create.py, lib/mcpu.py): when
    the iallocator fails on the opportunistically locked nodes the error is temporary
    (ECODE_TEMP_NORES, "failed on opportunistically acquired nodes"), and the job processor
    retries it at once with every node locked (`PrepareRetry`: "falling back to full lock
    allocation"), where a refusal is final."""
    clients = 8
    names = [f"exl-opp-{i}" for i in range(clients)]
    free_before = node_free_memory_mib(master.node)
    try:
        with ThreadPoolExecutor(clients) as pool:
            runs = list(
                pool.map(
                    lambda n: add(
                        master, n, "--opportunistic-locking", "-I", "exalloc-capture", memory="4G"
                    ),  # fmt: skip
                    names,
                )
            )
        created = [n for n, done in zip(names, runs, strict=True) if done.returncode == 0]
        refused = [done for done in runs if done.returncode != 0]
        for done in refused:
            text = done.stdout + done.stderr
            assert "failed on opportunistically acquired nodes" in text, text
            assert "falling back to full lock allocation" in text, text
            assert "error type: insufficient_resources" in text, text
            assert "FailMem" in text, text
        listed = instances()
        # Nothing placed twice, nothing lost: exactly the creations that succeeded exist, each
        # once, running on the node, and together they fit in what the node had free.
        assert sorted(n for n in listed if n.startswith("exl-opp-")) == sorted(created)
        assert all(listed[n] == (master.node, "diskless", "running") for n in created)
        assert 1 <= len(created) and len(created) * 4096 <= free_before
        assert refused, "the node had room for all eight: the test needs some refused"
        # Every answer exalloc gave is the real hail's on the same request (opportunistic
        # requests name the locked nodes in restrict-to-nodes), and each refusal was given on
        # a request whose node had no room for 4 GiB.
        made = calls(capture)
        assert len(made) == len(created) + 2 * len(refused)
        for call in made:
            ours = json.loads(call.answer)
            theirs = run(str(IALLOCATORS / "hail"), str(call.request), *call.args)
            assert json.loads(theirs.stdout) == ours
            if not ours["success"]:
                assert unallocated_mib(json.loads(call.request.read_text()), master.node) <= 4096
    finally:
        remove(*names)


# -- running plans -------------------------------------------------------------------------------


def job_ids() -> list[int]:
    done = run("gnt-job", "list", "--no-headers", "-o", "id")
    assert done.returncode == 0, done.stderr
    return [int(word) for word in done.stdout.split()]


def cluster_state(master: Master) -> tuple[dict, str]:
    nodes = run("gnt-node", "list", "--no-headers", "-o", "name,offline,drained,pinst_cnt,tags")
    assert nodes.returncode == 0, nodes.stderr
    return instances(), nodes.stdout


@pytest.mark.parametrize("resources", [[], ["--minimal-resources=20", "--target-resources=30"]])
def test_squeeze_runs_its_plan_on_one_node(master, exalloc_hail, resources):
    """On one node the plan is known: the master is never powered off (hsqueeze's candidates
    exclude it, docs/squeeze.md) and there is no standby node to power on, so both the shrink
    and the expand (a minimal probe that fits nowhere) plan nothing: hsqueeze's 'No action',
    no job submitted, nothing changed."""
    names = ["exl-squeeze-0", "exl-squeeze-1"]
    try:
        for name in names:
            assert add(master, name, "-I", "exalloc-hail", memory="1G").returncode == 0
        before, jobs = cluster_state(master), job_ids()
        ours = run(str(BIN / "exalloc"), "squeeze", "-L", "-X", "-C", *resources)
        theirs = run("hsqueeze", "-L", "-X", "-C", *resources)
        assert ours.returncode == 0, ours.stderr
        assert theirs.returncode == 0, theirs.stderr
        assert ours.stdout == theirs.stdout
        assert ours.stdout.startswith("'No action'\n")
        assert job_ids() == jobs
        assert cluster_state(master) == before
    finally:
        remove(*names)


@pytest.mark.parametrize("mode", [[], ["--greedy"]], ids=["exact", "greedy"])
def test_balance_runs_its_plan_on_one_node(master, exalloc_hail, mode):
    """On one node hbal has no move to make (every move needs a second node): its answer is
    'Cluster is already well balanced ... Nothing to do, exiting'. `exalloc balance -L -X`
    must print what `hbal -L -X` prints, with its exit code, in both modes; the exact mode
    says on stderr that no step is proven optimal. Neither submits a job or changes
    anything (tests/test_ganeti_nodes.py runs plans with moves on two nodes)."""
    names = ["exl-balance-0", "exl-balance-1"]
    try:
        for name in names:
            assert add(master, name, "-I", "exalloc-hail", memory="1G").returncode == 0
        before, jobs = cluster_state(master), job_ids()
        ours = run(str(BIN / "exalloc"), "balance", *mode, "-L", "-X")
        theirs = run("hbal", "-L", "-X")
        assert theirs.returncode == 0, theirs.stderr
        assert theirs.stdout.endswith("Nothing to do, exiting\n")
        # both print hbal's verdict (the exact mode since 6481501: its frame is hbal's)
        assert (ours.returncode, ours.stdout) == (0, theirs.stdout), ours.stderr
        if not mode:
            assert re.search(r"^exact \(score, K=\d+\): optimal,", ours.stderr, re.M), ours.stderr
        assert job_ids() == jobs
        assert cluster_state(master) == before
    finally:
        remove(*names)
