"""Against a running two-node Ganeti 3.0.2 cluster: real choices between nodes, real power jobs.

`tests/live/ganeti-master.sh up2` builds it on this one machine with Ganeti's own virtual
cluster mode (tools/vcluster-setup: each node's daemons under their own root and on their own
address; node2 joined as `gnt-node add` joins a node, tests/live/join-node.py), the fake
hypervisor, and an out-of-band power program that records what Ganeti asks (tests/live/oob).
Every command here runs as node1, the master (GANETI_ROOTDIR and GANETI_HOSTNAME set for the
module: gnt-*, htools' and exalloc's `-L` all follow them). DRBD cannot be tested: this
machine's kernel has no DRBD (docs/live.md). Marked `live`, like tests/test_ganeti_master.py.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_ganeti_master import (
    BIN,
    IALLOCATORS,
    SCRIPT,
    Master,
    add,
    calls,
    instances,
    remove,
    run,
    selected,
    steady,
)

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def cluster() -> Iterator[Master]:
    up = subprocess.run(
        ["bash", str(SCRIPT), "up2"], capture_output=True, text=True, timeout=900, check=False
    )
    if up.returncode == 77:
        pytest.skip(up.stderr.strip().splitlines()[-1])
    try:
        assert up.returncode == 0, f"ganeti-master.sh up2 failed:\n{up.stderr}"
        found = dict(line.split("=", 1) for line in up.stdout.split())
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("GANETI_ROOTDIR", found["ROOTDIR"])
            patch.setenv("GANETI_HOSTNAME", found["HOSTNAME"])
            yield Master(found["HOSTNAME"], found["OS"], found["RAPI"], found["LUXI"])
    finally:
        down = subprocess.run(
            ["bash", str(SCRIPT), "down"], capture_output=True, text=True, timeout=600, check=False
        )
        assert down.returncode == 0, f"ganeti-master.sh down failed:\n{down.stderr}"


@pytest.fixture
def capture(cluster: Master, tmp_path: Path) -> Iterator[Path]:
    """exalloc-hail installed by docs/hail.md's command, behind the capturing wrapper."""
    link = IALLOCATORS / "exalloc-hail"
    link.unlink(missing_ok=True)
    link.symlink_to(BIN / "exalloc-hail")
    folder = tmp_path / "calls"
    folder.mkdir()
    wrapper = IALLOCATORS / "exalloc-capture"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'd="{folder}/$(date +%s%N)-$$"\n'
        'mkdir "$d" && cp "$1" "$d/request.json" && printf "%s\\n" "$@" >"$d/args"\n'
        f'"{link}" "$@" >"$d/answer"\n'
        'rc=$?\ncat "$d/answer"\nexit $rc\n'
    )
    wrapper.chmod(0o755)
    yield folder
    wrapper.unlink(missing_ok=True)
    link.unlink(missing_ok=True)


def nodes() -> dict[str, tuple[str, str, str]]:
    """name -> (offline, tags, powered) as `gnt-node list` shows them."""
    done = run("gnt-node", "list", "--no-headers", "--separator=|", "-o",
               "name,offline,tags,powered")  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = [line.split("|") for line in done.stdout.splitlines() if line]
    return {row[0]: (row[1], row[2], row[3]) for row in rows}


def node2_back() -> None:
    """node2 powered on, online (`-f`: without it gnt-node asks whether to go on and, with no
    terminal to answer, exits 1 without a word) and untagged, as the tests after need it."""
    run("gnt-node", "power", "-f", "on", "node2")
    run("gnt-node", "modify", "-f", "-O", "no", "node2")
    run("gnt-node", "remove-tags", "node2", "htools:standby:auto")
    assert nodes()["node2"] == ("N", "", "Y")


def test_the_nodes_are_two(cluster):
    listed = nodes()
    assert sorted(listed) == ["node1", "node2"]
    assert listed["node2"] == ("N", "", "Y")


def test_exalloc_hail_chooses_between_the_nodes_as_hail(cluster, capture):
    names = ["exl-two-0", "exl-two-1", "exl-two-2"]
    templates = [[], ["-t", "file", "--disk", "0:size=256M"], []]
    try:
        placed = []
        for name, template in zip(names, templates, strict=True):
            done = add(cluster, name, "-I", "exalloc-capture", *template, memory="2G")
            assert done.returncode == 0, done.stderr
            placed.append(selected(done, name, "exalloc-capture"))
        made = calls(capture)
        assert len(made) == len(names)
        for call, where in zip(made, placed, strict=True):
            ours = json.loads(call.answer)
            hail = run(str(IALLOCATORS / "hail"), str(call.request), *call.args)
            theirs = json.loads(hail.stdout)
            assert ours == theirs  # the same node and the same info as the real hail
            assert ours["result"] == where
        listed = instances()
        assert [listed[n][0] for n in names] == [w[0] for w in placed]
        # Each instance goes to the emptier node: both nodes are used.
        assert {w[0] for w in placed} == {"node1", "node2"}
    finally:
        remove(*names)


def test_info_reads_the_two_nodes_as_hscan(cluster, capture, tmp_path):
    names = ["exl-read2-0", "exl-read2-1"]
    try:
        for name in names:
            assert add(cluster, name, "-I", "exalloc-capture").returncode == 0
        for source, address in [("-L", "-L"), (f"-m{cluster.rapi}", cluster.rapi)]:
            ours = tmp_path / "exalloc.data"
            done = run(str(BIN / "exalloc"), "info", source, "-S", str(ours))
            assert done.returncode == 0, done.stderr
            out = tmp_path / f"hscan{len(source)}"
            out.mkdir()
            assert run("hscan", "-d", str(out), address).returncode == 0
            [theirs] = list(out.iterdir())
            assert steady(ours.read_text()) == steady(theirs.read_text())
            assert "\nnode1|" in ours.read_text() and "\nnode2|" in ours.read_text()
    finally:
        remove(*names)


def squeeze(*words: str) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    return run(str(BIN / "exalloc"), "squeeze", "-L", *words), run("hsqueeze", "-L", *words)


EXPAND = ("--minimal-resources=200", "--target-resources=210")  # 200 x 128 MiB fits no node


def _loader_warning(line: str) -> bool:
    """A line of htools' warning on inconsistent data (`checkData`): its heading or an item."""
    return line == "Warning: cluster has inconsistent data:" or line.startswith("  - node ")


def test_squeeze_powers_the_empty_node_off_and_on(cluster, capture):
    """The plan is known: node2 holds nothing and is not the master, so shrink powers it off
    (tag `htools:standby:auto`, offline, OOB power-off); a minimal probe no node can host then
    asks for every standby node back (expand: online, power-on). Ganeti 3.0.2 refuses the
    expand jobs htools builds for a node it powered off: htools sets the node online before
    powering it on, and LUNodeSetParams answers "Node node2 needs to be turned on before its
    offline status can be reset"; hsqueeze 3.0.2 fails the same way. On a node that is offline
    but powered (set offline by hand), the same jobs succeed."""
    try:
        assert add(cluster, "exl-sq-0", "-n", "node1").returncode == 0
        ours, theirs = squeeze("-C")
        assert ours.returncode == theirs.returncode == 0, ours.stderr + theirs.stderr
        assert ours.stdout == theirs.stdout
        assert ours.stdout.startswith("'Nodes to offline'\nnode2\n")
        done = run(str(BIN / "exalloc"), "squeeze", "-L", "-X")
        assert done.returncode == 0, done.stderr
        assert done.stdout.count("Got job IDs") == 2
        assert nodes()["node2"] == ("Y", "htools:standby:auto", "N")
        assert nodes()["node1"][0] == "N"

        # Expand from powered off: Ganeti refuses htools' order, for both tools.
        ours, theirs = squeeze(*EXPAND, "-C")
        assert ours.stdout == theirs.stdout
        assert ours.stdout.startswith("'Nodes to online'\nnode2\n")
        refused = run(str(BIN / "exalloc"), "squeeze", "-L", "-X", *EXPAND)
        assert refused.returncode == 1
        assert "not all jobs of 'Powering on nodes' completed successfully" in refused.stderr
        # one line of exalloc's own; before it, htools' loader warning when the node's
        # reported memory or disk moved under the instances (the host's, beside other work)
        own = [ln for ln in refused.stderr.splitlines() if ln and not _loader_warning(ln)]
        assert len(own) == 1 and own[0].startswith("exalloc: error: "), refused.stderr
        job = refused.stderr.split("job ")[-1].split()[0]
        info = run("gnt-job", "info", job)
        assert "needs to be turned on before its offline status can be reset" in info.stdout
        hsq = run("hsqueeze", "-L", "-X", *EXPAND)
        assert hsq.returncode != 0 and "Not all jobs completed successfully" in hsq.stderr
        assert nodes()["node2"] == ("Y", "htools:standby:auto", "N")

        # Powered on by hand, still offline and standby: expand brings it back online.
        assert run("gnt-node", "power", "-f", "on", "node2").returncode == 0
        assert nodes()["node2"] == ("Y", "htools:standby:auto", "Y")
        done = run(str(BIN / "exalloc"), "squeeze", "-L", "-X", *EXPAND)
        assert done.returncode == 0, done.stderr
        assert nodes()["node2"] == ("N", "htools:standby:auto", "Y")
    finally:
        node2_back()
        remove("exl-sq-0")


def test_squeeze_move_all_moves_a_diskless_instance_off_and_powers_the_node_off(cluster):
    """`--move all` (exalloc's, not hsqueeze's): node2's diskless instance moves to node1 by
    `gnt-instance move` (OP_INSTANCE_MOVE), then node2 is powered off. A file instance cannot
    be moved on this cluster: both virtual nodes keep their files in the one folder, so the
    copy finds its own source in the way (docs/live.md)."""
    try:
        assert add(cluster, "exl-mv-0", "-n", "node2").returncode == 0
        plan = run(str(BIN / "exalloc"), "squeeze", "-L", "-C", "--move", "all")
        assert plan.returncode == 0, plan.stderr
        assert "gnt-instance move -f -n node1 exl-mv-0" in plan.stdout
        done = run(str(BIN / "exalloc"), "squeeze", "-L", "-X", "--move", "all")
        assert done.returncode == 0, done.stderr
        assert instances()["exl-mv-0"] == ("node1", "diskless", "running")
        assert nodes()["node2"] == ("Y", "htools:standby:auto", "N")
    finally:
        node2_back()
        remove("exl-mv-0")


# -- capacity: space against the live cluster ----------------------------------------------------

#: A spec the vCPU ratio bounds (8 vCPUs, 128 MiB, no disk): the answer does not depend on the
#: free memory and disk the fake hypervisor reports (the machine's own, moving between reads).
SPACE = ("--disk-template", "diskless", "--standard-alloc", "0,128,8", "--tiered-alloc", "0,128,8")


def steady_space(text: str) -> str:
    """hspace's report with the figures of the volatile node fields blanked: the scores (free
    memory spread) and the disk usage efficiency (the file system's free space); the counts,
    specs, failure reasons and memory and vCPU efficiencies are kept."""
    text = re.sub(r"(cluster score: )\S+", r"\1*", text)
    return re.sub(r"(disk usage efficiency: +)\S+", r"\1*", text)


def notes(text: str) -> list[str]:
    """The exact mode's notes on stderr, without their build and solve times."""
    found = [line for line in text.splitlines() if line.startswith("exalloc: note: ")]
    return [re.sub(r"build \S+ s, solve \S+ s", "build * s, solve * s", line) for line in found]


@pytest.mark.parametrize("kind", ["luxi", "rapi"])
def test_space_answers_the_live_cluster_as_its_snapshot_and_as_hspace(cluster, tmp_path, kind):
    """`exalloc space -L` (or `-m https://USER:PASS@...`) gives the answer `exalloc space -t`
    gives on the snapshot `exalloc info` writes from the same source, proven; `space --greedy`
    on the live cluster prints what the real `hspace` prints reading it the same way. Two
    4-vCPU instances on node1 make the nodes unequal."""
    source = "-L" if kind == "luxi" else f"-m{cluster.rapi}"
    names = [f"exl-space-{kind}-{i}" for i in range(2)]
    try:
        for name in names:
            assert add(cluster, name, "-n", "node1", vcpus=4).returncode == 0
        live = run(str(BIN / "exalloc"), "space", source, *SPACE)
        assert live.returncode == 0, live.stderr
        snapshot = tmp_path / "snapshot.data"
        done = run(str(BIN / "exalloc"), "info", source, "-S", str(snapshot))
        assert done.returncode == 0, done.stderr
        offline = run(str(BIN / "exalloc"), "space", "-t", str(snapshot), *SPACE)
        assert offline.returncode == 0, offline.stderr
        assert steady_space(live.stdout) == steady_space(offline.stdout)
        assert notes(live.stderr) == notes(offline.stderr)
        assert "There are 2 initial instances on the cluster." in live.stdout
        assert "optimal" in notes(live.stderr)[0] and "the vCPU ratio" in notes(live.stderr)[0]

        greedy = run(str(BIN / "exalloc"), "space", "--greedy", source, *SPACE)
        hspace = run("hspace", "-L" if kind == "luxi" else f"-m{cluster.rapi}", *SPACE)
        assert (greedy.returncode, hspace.returncode) == (0, 0), greedy.stderr + hspace.stderr
        assert steady_space(greedy.stdout) == steady_space(hspace.stdout)
        assert "most likely failure reason: FailCPU" in hspace.stdout
    finally:
        remove(*names)


# -- balancing with moves --------------------------------------------------------------------------

#: A step of hbal's table: number, instance, from, to, score, the move (`a=fa:node2`).
STEP = re.compile(r"^ +\d+\. (\S+) +(\S+) +=> (\S+) +\S+ a=(\S+)$", re.M)


def steady_steps(text: str) -> str:
    """hbal's output with its scores blanked (the free memory spread moves between reads)."""
    text = re.sub(r"^(Initial score: )\S+$", r"\1*", text, flags=re.M)
    text = re.sub(r"^(Cluster score improved from )\S+ to \S+$", r"\1* to *", text, flags=re.M)
    return STEP.sub(lambda m: f"  {m[1]} {m[2]} => {m[3]} a={m[4]}", text)


def job_statuses() -> dict[int, str]:
    done = run("gnt-job", "list", "--no-headers", "-o", "id,status")
    assert done.returncode == 0, done.stderr
    return {int(row.split()[0]): row.split()[1] for row in done.stdout.splitlines() if row}


@pytest.mark.parametrize("mode", [["--greedy"], []], ids=["greedy", "exact"])
def test_balance_migrates_instances_to_the_empty_node(cluster, mode):
    """Four shared-file instances of 1 GiB, all on node1 (`-n node1`): hbal moves two to node2
    (`gnt-instance migrate -n node2`, one job set each). `exalloc balance --greedy -L -C`
    plans what `hbal -L -C` plans, the exact mode (K = hbal's 2 steps) a plan it proves;
    `-X` runs the plan it printed, every job succeeds, and `gnt-instance list` shows the
    placement the plan promised; the real hbal then has nothing left to do. (htools moves no
    diskless or file instance: Instance.movableDiskTemplates; sharedfile fails over to any
    node, and both virtual nodes share the folder as a shared file system would.)"""
    names = [f"exl-bal-{i}" for i in range(4)]
    shared = ["-t", "sharedfile", "--disk", "0:size=128M", "-n", "node1"]
    try:
        for name in names:
            done = add(cluster, name, *shared, memory="1G")
            assert done.returncode == 0, done.stderr
        plan = run(str(BIN / "exalloc"), "balance", *mode, "-L", "-C")
        assert plan.returncode == 0, plan.stderr
        if mode:
            hbal = run("hbal", "-L", "-C")
            assert hbal.returncode == 0, hbal.stderr
            assert steady_steps(plan.stdout) == steady_steps(hbal.stdout)
        else:
            assert re.search(r"^exact \(score, K=2\): optimal,", plan.stderr, re.M), plan.stderr
        steps = STEP.findall(plan.stdout)
        assert len(steps) == 2 and {(s[2], s[3]) for s in steps} == {("node2", "fa:node2")}
        assert f"gnt-instance migrate -f -n node2 {steps[0][0]}" in plan.stdout

        before = set(job_statuses())
        done = run(str(BIN / "exalloc"), "balance", *mode, "-L", "-X")
        assert done.returncode == 0, done.stderr
        ran_steps = STEP.findall(done.stdout)  # the plan -X printed, then ran
        if mode:
            assert ran_steps == steps  # hbal's ties go to the first instance: the same plan
        else:  # the solver may pick any two of the four equal instances
            assert [s[1:] for s in ran_steps] == [s[1:] for s in steps]
        assert done.stdout.count("Got job IDs") == 2
        ran = {job: status for job, status in job_statuses().items() if job not in before}
        assert sorted(ran.values()) == ["success", "success"], ran
        promised = {name: "node1" for name in names} | {s[0]: s[2] for s in ran_steps}
        listed = instances()
        assert {n: listed[n][0] for n in names} == promised
        assert all(listed[n][1:] == ("sharedfile", "running") for n in names)
        after = run("hbal", "-L")
        assert after.returncode == 0, after.stderr
        assert "No solution found" in after.stdout or "Nothing to do" in after.stdout
    finally:
        remove(*names)


# -- rolling reboots ------------------------------------------------------------------------------

#: hroller's option sets compared: the default (node1's non-redundant instances must move to
#: node2 first), with the moves printed, the instances ignored, the first round alone.
ROLL_OPTIONS = {
    "default": (),
    "print-moves": ("--print-moves",),
    "ignore-non-redundant": ("--ignore-non-redundant",),
    "one-step-only": ("--one-step-only", "--print-moves"),
}


@pytest.mark.parametrize("kind", ["luxi", "rapi"])
def test_roll_answers_the_live_cluster_as_its_snapshot_and_as_hroller(cluster, tmp_path, kind):
    """Two diskless instances on node1 (non-redundant: hroller moves them before node1 may
    reboot). For each option set, `exalloc roll --greedy` on the live cluster prints what the
    real `hroller` prints reading it the same way, with its exit code, and the exact `roll`
    on the live cluster prints what it prints on the snapshot `exalloc info` writes from the
    same source; the exact plan is never longer than hroller's."""
    source = "-L" if kind == "luxi" else f"-m{cluster.rapi}"
    names = [f"exl-roll-{kind}-{i}" for i in range(2)]
    try:
        for name in names:
            assert add(cluster, name, "-n", "node1", memory="256M").returncode == 0
        snapshot = tmp_path / "snapshot.data"
        done = run(str(BIN / "exalloc"), "info", source, "-S", str(snapshot))
        assert done.returncode == 0, done.stderr
        for label, options in ROLL_OPTIONS.items():
            greedy = run(str(BIN / "exalloc"), "roll", "--greedy", source, *options)
            hroller = run("hroller", source, *options)
            assert (greedy.returncode, greedy.stdout) == (hroller.returncode, hroller.stdout), (
                label, greedy.stderr, hroller.stderr)  # fmt: skip
            assert hroller.returncode == 0, (label, hroller.stderr)
            live = run(str(BIN / "exalloc"), "roll", source, *options)
            offline = run(str(BIN / "exalloc"), "roll", "-t", str(snapshot), *options)
            assert live.returncode == offline.returncode == 0, (label, live.stderr)
            assert live.stdout == offline.stdout, label
            if label != "one-step-only":
                rounds = [line for line in live.stdout.splitlines()[1:] if "," in line
                          or line.startswith("node")]  # fmt: skip
                greedy_rounds = [line for line in hroller.stdout.splitlines()[1:] if "," in line
                                 or line.startswith("node")]  # fmt: skip
                assert 1 <= len(rounds) <= len(greedy_rounds), (label, live.stdout)
        as_json = run(str(BIN / "exalloc"), "roll", source, "--json")
        assert as_json.returncode == 0, as_json.stderr
        answer = json.loads(as_json.stdout)
        assert answer["status"] == "optimal"
        assert sorted(n for group in answer["groups"] for n in group) == ["node1", "node2"]
    finally:
        remove(*names)
