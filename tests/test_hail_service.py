"""`exalloc hail-server` and the `exalloc-hail` client: served answers are the in-process ones.

The server runs as a real process on a real Unix socket; the client is the console script's
entry point (`cli.exalloc_hail`) run as a process. Every comparison is against the
same call answered in process (EXALLOC_HAIL_SOCKET empty), byte for byte, and the server's
log proves the served calls did not silently fall back.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from service.hail_client import Call, ProtocolError, Reply, pack, unpack

REPO = Path(__file__).resolve().parent.parent
REQUESTS = REPO / "data" / "requests"
CLIENT = "import sys; from cli import hail_console; sys.exit(hail_console())"
# A client that waits up to 120 s for a worker to take its call (not the 2 s after which the
# real one answers itself): calls queued behind busy workers on a loaded machine are served.
PATIENT_CLIENT = (
    "import sys; import service.hail_client as c; c.ACCEPT_TIMEOUT_S = 120.0; "
    "from cli import hail_console; sys.exit(hail_console())"
)


class Server:
    def __init__(self, directory: Path, workers: int = 2):
        self.socket = directory / "hail.sock"
        self.log_path = directory / "server.log"
        self._log = self.log_path.open("w")
        cmd = [sys.executable, "-m", "cli", "hail-server", "--socket", str(self.socket)]
        self.proc = subprocess.Popen(
            [*cmd, "--workers", str(workers)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )
        deadline = time.monotonic() + 60
        while "listening on" not in self.log_path.read_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"server did not start: {self.log_path.read_text()}")
            time.sleep(0.05)

    def served(self) -> list[str]:
        return [line for line in self.log_path.read_text().splitlines() if ": hail " in line]

    def stop(self) -> tuple[int, str]:
        self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=30)
        self._log.close()
        return self.proc.returncode, out


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    # AF_UNIX paths are limited to 107 bytes: keep them short
    path = Path(tempfile.mkdtemp(prefix="exalloc-hs-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def server(workdir: Path) -> Iterator[Server]:
    srv = Server(workdir)
    yield srv
    if srv.proc.poll() is None:
        srv.stop()


def client(
    args: list[str],
    socket_path: str | os.PathLike[str],
    cwd: Path = REPO,
    stdin: str = "",
    extra_env: dict[str, str] | None = None,
    script: str = CLIENT,
) -> subprocess.CompletedProcess:
    env = dict(os.environ, EXALLOC_HAIL_SOCKET=str(socket_path), **(extra_env or {}))
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=cwd,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
    )


def both(
    server: Server,
    args: list[str],
    cwd: Path = REPO,
    stdin: str = "",
    extra_env: dict[str, str] | None = None,
) -> tuple:
    """(served, in process) runs of the same call; asserts the server answered it."""
    before = len(server.served())
    served = client(args, server.socket, cwd, stdin, extra_env)
    assert len(server.served()) == before + 1, server.log_path.read_text()
    local = client(args, "", cwd, stdin, extra_env)
    return served, local


def same(a: subprocess.CompletedProcess, b: subprocess.CompletedProcess) -> None:
    assert (a.returncode, a.stdout, a.stderr) == (b.returncode, b.stdout, b.stderr)


@pytest.mark.parametrize("name", sorted(p.name for p in REQUESTS.glob("*.json")))
def test_served_answer_is_the_in_process_answer(server: Server, name: str) -> None:
    served, local = both(server, [str(REQUESTS / name)])
    same(served, local)
    assert served.returncode == 0
    assert json.loads(served.stdout)["success"] is True


def test_options_stdin_relative_paths_and_environment(server: Server, workdir: Path) -> None:
    request = (REQUESTS / "dedicated-12-nodes-allocate.json").read_text()
    # stdin
    served, local = both(server, ["-"], stdin=request)
    same(served, local)
    assert json.loads(served.stdout)["success"] is True
    # a path relative to the client's directory, with solver options
    here = workdir / "calls"
    here.mkdir(exist_ok=True)
    (here / "req.json").write_text(request)
    served, local = both(server, ["--solver", "cpsat", "req.json"], cwd=here)
    same(served, local)
    assert served.stderr == "exalloc: note: cpsat: optimal, gap 0\n"  # the solver ran: CP-SAT
    # a group without exclusive storage: htools' algorithm with the exact N+1 check (which
    # finds this full group as non-redundant as hail does)
    data = json.loads(request)
    for node in data["nodes"].values():
        node["ndparams"]["exclusive_storage"] = False
    (here / "shared.json").write_text(json.dumps(data))
    served, local = both(server, ["shared.json"], cwd=here)
    same(served, local)
    assert "FailN1: 8" in json.loads(served.stdout)["info"]


def test_client_environment_travels_with_the_call(server: Server, workdir: Path, htools) -> None:
    """EXALLOC_REAL_HAIL set in the client's environment (not the server's) is the hail that
    --compare runs."""
    path = REQUESTS / "dedicated-12-nodes-allocate.json"
    missing = {"EXALLOC_REAL_HAIL": str(workdir / "no-such-hail")}
    served, local = both(server, ["--compare", str(path)], extra_env=missing)
    same(served, local)
    assert served.returncode == 1 and "no-such-hail" in served.stderr
    without = client(["--compare", str(path)], server.socket)  # the server's own has no say
    assert without.returncode == 0 and str(htools.hail) in without.stdout


def test_errors_are_the_in_process_errors(server: Server, workdir: Path) -> None:
    bad = workdir / "bad.json"
    bad.write_text('{"nodes": ')
    served, local = both(server, [str(bad)])
    same(served, local)
    assert served.returncode == 1 and served.stderr.startswith("exalloc: error: ")
    served, local = both(server, [str(workdir / "missing.json")])
    same(served, local)
    assert served.returncode == 1 and "cannot read file" in served.stderr
    served, local = both(server, ["--bogus", "x.json"])
    same(served, local)
    assert served.returncode == 2 and "unrecognized arguments" in served.stderr


def test_parallel_calls_all_served(server: Server) -> None:
    """Six calls, four at a time, on two workers: each waits for a worker (the patient
    client: under load a worker re-forked after a call may take more than the real client's
    2 s to accept the next), and every one is served with the in-process answer."""
    args = [str(REQUESTS / "dedicated-12-nodes-multi.json")]
    expected = client(args, "")
    before = len(server.served())
    with ThreadPoolExecutor(4) as pool:
        runs = list(
            pool.map(lambda _: client(args, server.socket, script=PATIENT_CLIENT), range(6))
        )
    for run in runs:
        same(run, expected)
    assert len(server.served()) == before + 6


def test_no_server_or_stale_socket_falls_back(workdir: Path) -> None:
    args = [str(REQUESTS / "dedicated-greedy-trap.json")]
    expected = client(args, "")
    assert expected.returncode == 0 and json.loads(expected.stdout)["success"] is True
    same(client(args, workdir / "nobody.sock"), expected)
    stale = workdir / "stale.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(stale))  # bound, never listening: connect is refused
        same(client(args, stale), expected)
    # the request read from stdin is not lost on the way back to the in-process run
    text = (REQUESTS / "dedicated-greedy-trap.json").read_text()
    same(client(["-"], stale, stdin=text), expected)


def test_second_server_refused_and_sigterm_cleans_up(workdir: Path) -> None:
    directory = workdir / "own"
    directory.mkdir()
    srv = Server(directory, workers=1)
    again = subprocess.run(
        [sys.executable, "-m", "cli", "hail-server", "--socket", str(srv.socket)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert again.returncode == 1
    assert "another server is listening there" in again.stderr
    assert client([str(REQUESTS / "dedicated-greedy-trap.json")], srv.socket).returncode == 0
    code, out = srv.stop()
    assert code == 0
    # the second server's probe connection is not a call, and not a failure
    assert out.endswith("stopped after 1 call(s)\n"), srv.log_path.read_text()
    assert not srv.socket.exists()
    # a server that died left its socket file: the next one replaces it
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(srv.socket))
    srv = Server(directory, workers=1)
    assert srv.stop()[0] == 0


def test_protocol_round_trip_and_malformed_messages() -> None:
    call = Call(["--gap", "0", "r\udcff.json", "-"], "/tmp/d", {"EXALLOC_X": "1"}, "{}\n")
    back = Call.decode(call.encode())
    assert (back.argv, back.cwd, back.env, back.stdin) == (call.argv, call.cwd, call.env, "{}\n")
    assert Call.decode(Call([], "/", {}, None).encode()).stdin is None
    reply = Reply.decode(Reply(2, "out", "err: ünïcode\n").encode())
    assert (reply.exit_code, reply.stdout, reply.stderr, reply.refused) == (
        2,
        "out",
        "err: ünïcode\n",
        "",
    )
    assert unpack(pack(["", "a:b", "12:x"])) == ["", "a:b", "12:x"]
    for data in (b"5:abc", b"x:abc", b"3abc", pack(["exalloc-hail-call/1", "/"])):
        with pytest.raises(ProtocolError):
            Call.decode(data)
    with pytest.raises(ProtocolError):
        Reply.decode(call.encode())
