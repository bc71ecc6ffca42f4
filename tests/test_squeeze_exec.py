"""`exalloc squeeze -X`: the plan's jobs run on a live cluster through LUXI, as hsqueeze -X.

The real hsqueeze and exalloc each run against a LUXI responder that takes jobs (Ganeti's
`SubmitManyJobs` and `QueryJobs`); what they submit, in which job sets and in which order, and
what they print, is compared. Failures (a job that fails, a refused submission, an interrupt)
end with one line and leave FILE.squeezed unwritten. docs/squeeze.md, "Running the plan (-X)".
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ganeti_live import JobResponder, RapiAnswers
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import cli
from model.backends.jobs import Annotation, JobSet, run_job_sets
from model.backends.text import load_text
from model.errors import ExallocError, JobError

pytestmark = pytest.mark.reference
REPO = Path(__file__).resolve().parent.parent
ANNOTATIONS = ("comment", "reason")


@pytest.fixture
def sock() -> Iterator[Path]:
    """A short socket path (at most 107 bytes)."""
    with tempfile.TemporaryDirectory(prefix="exl-", dir="/tmp") as folder:
        yield Path(folder) / "master.sock"


def answers(ganeti, name: str) -> RapiAnswers:  # noqa: ANN001
    return RapiAnswers.of_cluster(load_text(ganeti.data_dir / name))


def bare(jobs: list) -> list:
    """Submitted jobs without the annotations that name the tool."""
    return [
        [[{k: v for k, v in op.items() if k not in ANNOTATIONS} for op in job] for job in call]
        for call in jobs
    ]


def hsqueeze_run(htools, data: RapiAnswers, sock: Path, *words: str):  # noqa: ANN001, ANN201
    with JobResponder(sock, data) as responder:
        proc = subprocess.run(
            [str(htools.hsqueeze), f"-L{sock}", "-X", *words],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    return proc, responder.jobs


def exalloc_run(capsys, data: RapiAnswers, sock: Path, *words: str, **kw: Any):  # noqa: ANN001, ANN201
    with JobResponder(sock, data, **kw) as responder:
        code = cli.main(["squeeze", f"-L{sock}", "-X", *words])
        out, err = capsys.readouterr()
    return code, out, err, responder


@pytest.mark.parametrize(
    "snapshot", ["hsqueeze-underutilized.data", "hsqueeze-mixed-instances.data"]
)
def test_same_jobs_as_hsqueeze_where_the_plans_agree(ganeti, capsys, sock, snapshot) -> None:  # noqa: ANN001
    data = answers(ganeti, snapshot)
    theirs, their_jobs = hsqueeze_run(ganeti, data, sock, "-C")
    code, out, err, ours = exalloc_run(capsys, data, sock, "-C", "--move", "ext")
    assert theirs.returncode == 0 and code == 0, (theirs.stderr, err)
    plan_lines = [line for line in out.splitlines() if not line.startswith("Got job IDs")]
    their_plan = [line for line in theirs.stdout.splitlines() if not line.startswith("Got job")]
    if plan_lines != their_plan:  # the exact plan differs (it frees more, or elsewhere)
        assert snapshot == "hsqueeze-mixed-instances.data"
        assert [len(call) for call in ours.jobs] == [len(call) for call in their_jobs]
        return
    assert out == theirs.stdout  # the plan, the commands, then "Got job IDs 1,2" per set
    assert bare(ours.jobs) == bare(their_jobs)
    first = ours.jobs[0][0][0]
    assert first["comment"].startswith("condensing by 2 nodes (exalloc) version ")
    assert first["reason"][0][:1] == ["exalloc"] and first["priority"] == 0


def test_expand_powers_on_then_moves(ganeti, capsys, sock) -> None:  # noqa: ANN001
    """Expanding: one job marks the nodes online and powers them on, as hsqueeze's (for the
    nodes exalloc chose), then the moves' job sets, each job the migration -C prints."""
    data = answers(ganeti, "hsqueeze-overutilized.data")
    theirs, their_jobs = hsqueeze_run(ganeti, data, sock)
    assert theirs.returncode == 0
    code, _, _, ours = exalloc_run(capsys, data, sock)
    assert code == 0
    plan = json.loads(_json_plan(capsys, data, sock))
    assert plan["mode"] == "online"
    their_power = {op.get("node_name"): op for op in bare(their_jobs)[0][0]}
    power = bare(ours.jobs)[0][0]
    assert power[:-1] == [their_power[n] for n in plan["nodes"]]
    assert power[-1] == {**their_power[None], "node_names": plan["nodes"]}
    moves = {m["instance"]: m for m in plan["moves"]}
    assert [[op["instance_name"] for job in call for op in job] for call in ours.jobs[1:]] == (
        plan["jobsets"]
    )
    for call in bare(ours.jobs)[1:]:
        for (op,) in call:
            assert op["OP_ID"] == "OP_INSTANCE_MIGRATE"
            assert op["target_node"] == moves[op["instance_name"]]["to"]


def _json_plan(capsys, data: RapiAnswers, sock: Path) -> str:  # noqa: ANN001
    with JobResponder(sock, data) as responder:
        assert cli.main(["--json", "squeeze", f"-L{sock}"]) == 0
        assert responder.jobs == []  # without -X nothing is submitted
    return capsys.readouterr().out


def test_drbd_moves_submit_what_the_commands_say(ganeti, capsys, sock) -> None:  # noqa: ANN001
    """--move drbd: failovers and new secondaries as the -C script words them."""
    data = answers(ganeti, "hsqueeze-mixed-instances.data")
    code, out, _, ours = exalloc_run(capsys, data, sock, "--move", "drbd", "-C")
    assert code == 0
    said = [
        line.split()[1:] for line in out.splitlines() if line.strip().startswith("gnt-instance")
    ]
    submitted = [op for call in bare(ours.jobs) for job in call for op in job]
    moves = [op for op in submitted if op["OP_ID"].startswith("OP_INSTANCE")]
    assert any(op["OP_ID"] == "OP_INSTANCE_REPLACE_DISKS" for op in moves)
    assert len(moves) == len(said)
    for words, op in zip(said, moves, strict=True):
        assert words[-1] == op["instance_name"]
        if words[0] == "replace-disks":
            assert op["OP_ID"] == "OP_INSTANCE_REPLACE_DISKS"
            assert (op["mode"], op["remote_node"]) == ("replace_new_secondary", words[2])
        else:
            assert words[0] == "migrate" and op["OP_ID"] == "OP_INSTANCE_MIGRATE"
            assert op.get("target_node") == (words[3] if "-n" in words else None)


def test_a_failed_job_stops_the_run(ganeti, capsys, sock, tmp_path) -> None:  # noqa: ANN001
    data = answers(ganeti, "hsqueeze-underutilized.data")
    save = str(tmp_path / "s")
    code, out, err, ours = exalloc_run(
        capsys, data, sock, "-S", save, status=lambda job, polls: "error" if job == 2 else "success"
    )
    assert code == 1
    assert err.splitlines()[-1] == (
        f"exalloc: error: luxi:{sock}: not all jobs of 'Moving instances inst-40,inst-50' "
        "completed successfully: job 2 error; aborting"
    )
    assert out.splitlines()[-1] == "Got job IDs 1,2"
    assert len(ours.jobs) == 1  # the tags and the power-off never submitted
    assert (tmp_path / "s.original").exists() and not (tmp_path / "s.squeezed").exists()


def test_a_refused_submission_stops_the_run(ganeti, capsys, sock, tmp_path) -> None:  # noqa: ANN001
    """Job 2 of the first set refused: job 1 was queued (the line says so), nothing is waited
    for and nothing more submitted."""
    data = answers(ganeti, "hsqueeze-underutilized.data")
    code, out, err, ours = exalloc_run(
        capsys, data, sock, refuse=lambda job: "Job queue is drained" if job == 2 else None
    )
    assert code == 1 and "Got job IDs" not in out
    assert err == (
        f"exalloc: error: {sock}: LUXI SubmitManyJobs: a job was refused: Job queue is "
        "drained (job ids given: 1)\n"
    )
    assert len(ours.jobs) == 1 and ours.polls == {}


def test_execution_needs_luxi(ganeti, capsys, tmp_path) -> None:  # noqa: ANN001
    path = ganeti.data_dir / "hsqueeze-underutilized.data"
    code = cli.main(["squeeze", "-t", str(path), "-X", "-S", str(tmp_path / "s")])
    out, err = capsys.readouterr()
    assert code == 1 and out == "" and list(tmp_path.iterdir()) == []
    assert err == "exalloc: error: -X runs the plan's jobs through LUXI: read the cluster with -L\n"


def test_json_lists_the_job_sets_run(ganeti, capsys, sock) -> None:  # noqa: ANN001
    data = answers(ganeti, "hsqueeze-underutilized.data")
    with JobResponder(sock, data):
        code = cli.main(["--json", "squeeze", f"-L{sock}", "-X"])
    out, err = capsys.readouterr()
    assert code == 0
    doc = json.loads(out)  # one JSON object: the ids went to stderr
    assert [s["job_ids"] for s in doc["executed"]] == [[1, 2], [3], [4], [5]]
    assert [s["description"] for s in doc["executed"]][-1] == "Powering off nodes"
    assert err.splitlines()[:4] == [
        "Got job IDs 1,2",
        "Got job IDs 3",
        "Got job IDs 4",
        "Got job IDs 5",
    ]


def test_no_power_command_without_nodes(ganeti, capsys, sock, tmp_path) -> None:  # noqa: ANN001
    """Read through LUXI, a squeezed cluster's powered-off nodes report no memory, so both
    tools expand, with no standby node to power on. hsqueeze then submits a power-on naming
    no node, which Ganeti runs on every node (LUOobCommand); exalloc submits nothing."""
    path = ganeti.data_dir / "hsqueeze-underutilized.data"
    assert cli.main(["squeeze", "-t", str(path), "-S", str(tmp_path / "s")]) == 0
    capsys.readouterr()
    squeezed = RapiAnswers.of_cluster(load_text(tmp_path / "s.squeezed"))
    theirs, their_jobs = hsqueeze_run(ganeti, squeezed, sock)
    assert theirs.stdout.startswith("'Nodes to online'\nGot job IDs 1\n")
    assert [op["node_names"] for op in bare(their_jobs)[0][0]] == [[]]
    code, out, _, ours = exalloc_run(capsys, squeezed, sock)
    assert (code, out, ours.jobs) == (0, "'Nodes to online'\n", [])


def test_polls_at_doubling_intervals_up_to_15_s(ganeti, sock) -> None:  # noqa: ANN001
    """Jobs.hs waitForJobs: 0.5 s, then doubling, at most 15 s; until no job is unfinished."""
    data = answers(ganeti, "hsqueeze-underutilized.data")
    slept: list[float] = []
    unfinished = ("queued", "waiting", "running", "running", "canceling", "running", "running")

    def status(job: int, polls: int) -> str:
        return unfinished[polls - 1] if polls <= len(unfinished) else "success"

    job_set = JobSet("two jobs", (({"OP_ID": "OP_TEST_DELAY"},), ({"OP_ID": "OP_TEST_DELAY"},)))
    said: list[str] = []
    with JobResponder(sock, data, status=status) as responder:
        done = run_job_sets(
            str(sock), [job_set], _annotation(), say=said.append, sleep=slept.append
        )
    assert slept == [0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 15.0, 15.0]
    assert done[0].statuses == ("success", "success") and said == ["Got job IDs 1,2"]
    assert responder.jobs[0][0][0]["OP_ID"] == "OP_TEST_DELAY"


def test_a_cancelled_job_fails_the_set(ganeti, sock) -> None:  # noqa: ANN001
    data = answers(ganeti, "hsqueeze-underutilized.data")
    job_set = JobSet("one job", (({"OP_ID": "OP_TEST_DELAY"},),))
    with JobResponder(sock, data, status=lambda job, polls: "canceled"):
        with pytest.raises(JobError, match="'one job' completed successfully: job 1 canceled"):
            run_job_sets(str(sock), [job_set], _annotation(), say=print, sleep=lambda s: None)


def _annotation() -> Annotation:
    return Annotation("test", "exalloc", "test called", 0)


def _interrupted_run(ganeti, sock: Path, signals: list[int]):  # noqa: ANN001, ANN201
    """exalloc squeeze -X in its own process, `signals` sent while the first set runs."""
    sent = threading.Event()
    data = answers(ganeti, "hsqueeze-underutilized.data")
    with JobResponder(
        sock, data, status=lambda job, polls: "success" if sent.is_set() else "running"
    ) as responder:
        proc = subprocess.Popen(
            [sys.executable, str(REPO / "cli.py"), "squeeze", f"-L{sock}", "-X"],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 60
        while not responder.polls and time.monotonic() < deadline:
            time.sleep(0.05)
        for sig in signals:
            proc.send_signal(sig)
            time.sleep(0.3)
        sent.set()
        out, err = proc.communicate(timeout=60)
    return proc.returncode, out, err, responder


def test_an_interrupt_ends_the_run_after_the_current_set(ganeti, sock) -> None:  # noqa: ANN001
    code, out, err, responder = _interrupted_run(ganeti, sock, [signal.SIGINT])
    assert len(responder.jobs) == 1  # the set under way finished, no other was submitted
    assert code == 1
    assert out.splitlines()[-2:] == [
        "Got job IDs 1,2",
        "Cancel request registered, will exit at the end of the current job set...",
    ]
    assert err == (
        f"exalloc: error: luxi:{sock}: cancelled at the user's request after 1 of 4 job sets; "
        "not submitted: Tagging node node-01-004 with standby; Tagging node node-01-005 with "
        "standby; Powering off nodes\n"
    )


@pytest.mark.parametrize("signals", [[signal.SIGINT, signal.SIGINT], [signal.SIGTERM]])
def test_a_second_interrupt_or_sigterm_stops_at_once(ganeti, sock, signals) -> None:  # noqa: ANN001
    code, out, err, responder = _interrupted_run(ganeti, sock, signals)
    assert code == 2 and err == ""
    assert out.splitlines()[-1] == "Double cancel request, exiting now..."
    assert len(responder.jobs) == 1


STATUSES = ("queued", "waiting", "canceling", "running", "canceled", "success", "error")
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-3, 10**12)
    | st.text(max_size=8)
    | st.sampled_from(["1", *STATUSES]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=8,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(submitted=json_values, statuses=json_values)
@example(submitted=[[True, 7]], statuses=[["running"]])
@example(submitted=[[True, "7"]], statuses=[["error"]])
@example(submitted=[[True, "7"], [True, "8"]], statuses=[["success"]])
@example(submitted=[[False, ["JobQueueFull", []]]], statuses=None)
def test_any_job_reply_is_a_result_or_one_line(ganeti, submitted, statuses) -> None:  # noqa: ANN001
    """Whatever Ganeti answers to SubmitManyJobs and QueryJobs, the run ends with its sets'
    outcomes or an exalloc error (one line), never another exception."""

    class Odd(JobResponder):
        def result(self, method: str, args: list) -> Any:
            if method == "SubmitManyJobs":
                return submitted
            if method == "QueryJobs":  # a job still running is done by the fifth poll
                self.polls[0] = self.polls.get(0, 0) + 1
                return statuses if self.polls[0] < 5 else [["success"]] * len(args[0])
            return super().result(method, args)

    job_set = JobSet("one job", (({"OP_ID": "OP_TEST_DELAY"},),))
    with tempfile.TemporaryDirectory(prefix="exl-", dir="/tmp") as folder:
        sock = Path(folder) / "odd.sock"
        with Odd(sock, answers(ganeti, "hsqueeze-underutilized.data")):
            try:
                done = run_job_sets(str(sock), [job_set], _annotation(), say=print, sleep=id)
            except ExallocError as err:
                assert "\n" not in str(err)
            else:
                assert done[0].statuses == ("success",) and len(done[0].job_ids) == 1


# -- the super-cluster plans (redistribute, evacuate) run the same way -------------------------

SUPER_CLUSTER = REPO / "data" / "clusters" / "super-pools.data"


def _commands(out: str) -> list[list[list[str]]]:
    """The -C script's jobsets: per jobset, per job, the gnt-instance commands' words."""
    sets: list[list[list[str]]] = []
    for line in out.splitlines():
        words = line.split()
        if words[:2] == ["echo", "jobset"]:
            sets.append([])
        elif words[:2] == ["echo", "job"]:
            sets[-1].append([])
        elif words[:1] == ["gnt-instance"]:
            sets[-1][-1].append(words[1:])
    return sets


def _as_words(op: dict[str, Any]) -> list[str]:
    """An opcode as the gnt-instance command that submits it."""
    name, target = op["instance_name"], op.get("target_node")
    verb = {
        "OP_INSTANCE_MIGRATE": "migrate",
        "OP_INSTANCE_FAILOVER": "failover",
        "OP_INSTANCE_MOVE": "move",
    }.get(op["OP_ID"])
    if verb is None:
        assert op["OP_ID"] == "OP_INSTANCE_REPLACE_DISKS" and op["mode"] == "replace_new_secondary"
        return ["replace-disks", "-n", op["remote_node"], name]
    return [verb, "-f", *(["-n", target] if target else []), name]


@pytest.mark.parametrize(
    "command", [("redistribute",), ("evacuate", "--nodes", "node-a2")], ids=lambda c: c[0]
)
def test_super_cluster_plans_submit_what_their_commands_say(capsys, sock, command) -> None:
    """-X runs a redistribution or a cross-group evacuation jobset by jobset, each job the
    opcodes of the commands -C prints (migrations, failovers, new secondaries across groups)."""
    data = RapiAnswers.of_cluster(load_text(SUPER_CLUSTER))
    with JobResponder(sock, data) as responder:
        code = cli.main([*command, f"-L{sock}", "-X", "-C"])
        out, err = capsys.readouterr()
    assert code == 0, err
    said = _commands(out)
    submitted = [[[_as_words(op) for op in job] for job in call] for call in bare(responder.jobs)]
    assert submitted == said and len(said) >= 2
    assert any(words[0] == "replace-disks" for js in said for job in js for words in job)
    first = responder.jobs[0][0][0]
    assert first["comment"].startswith(f"{command[0]}: ") and first["reason"][0][0] == "exalloc"
    assert out.splitlines()[-len(said) :] == [
        "Got job IDs " + ",".join(str(i) for i in ids)
        for ids in _ids([len(call) for call in responder.jobs])
    ]


def _ids(sizes: list[int]) -> list[list[int]]:
    out, k = [], 0
    for n in sizes:
        out.append(list(range(k + 1, k + n + 1)))
        k += n
    return out


def test_super_cluster_execution_needs_luxi(capsys) -> None:
    code = cli.main(["redistribute", "-t", str(SUPER_CLUSTER), "-X"])
    out, err = capsys.readouterr()
    assert (code, out) == (1, "")
    assert err == "exalloc: error: -X runs the plan's jobs through LUXI: read the cluster with -L\n"


def test_a_failed_relocation_job_stops_the_plan(capsys, sock) -> None:
    data = RapiAnswers.of_cluster(load_text(SUPER_CLUSTER))
    with JobResponder(sock, data, status=lambda job, polls: "error") as responder:
        code = cli.main(["--json", "evacuate", "--nodes", "node-a2", f"-L{sock}", "-X"])
        out, err = capsys.readouterr()
    assert code == 1 and len(responder.jobs) == 1
    assert err.splitlines()[-1].startswith(
        f"exalloc: error: luxi:{sock}: not all jobs of 'Moving instances "
    )
    # under --json the refusal is on stdout too, as one object (cli._error_json)
    doc = json.loads(out)
    assert doc["exit_code"] == 1 and err.splitlines()[-1].endswith(doc["error"])
