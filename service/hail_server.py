"""The hail server: answer `exalloc-hail` calls from a process that imported everything once
(the command line is programs/hail_service.py, `exalloc hail-server`).

The server imports what its program names (the CLI, Pyomo and the solver backends), then keeps a
few pre-forked workers waiting on a Unix socket. A worker answers exactly one call and exits,
and the parent forks a fresh one: every call runs in a clean copy of the warm process (no state
carried from one request to the next, a crash costs one worker), and the fork happens before the
call arrives, not while Ganeti waits.

A worker runs the call exactly as `exalloc-hail` would in process: same arguments, the
client's working directory and EXALLOC_* environment, its stdin; stdout, stderr and the
exit code go back to the client. Only the server's own user may connect (socket mode 0600,
peer credentials checked).

No client can pin a worker: one that connects and sends nothing (or less than a call) within
READ_TIMEOUT_S is dropped, malformed bytes and a call over MAX_MESSAGE_BYTES get a refusal,
and a call that overruns its time bound plus REPLY_MARGIN_S ends its worker (SIGALRM). Log
lines quote arguments and messages escaped, so no input can forge a line
(docs/reliability.md, "hail-server").
"""

from __future__ import annotations

import contextlib
import gc
import io
import math
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

from model import errors
from service.hail_client import (
    ACK,
    FORWARDED_ENV_PREFIX,
    MAX_MESSAGE_BYTES,
    REPLY_MARGIN_S,
    Call,
    ProtocolError,
    Reply,
    read_all,
    time_bound,
)
from service.sockets import listen, peer_uid

#: Exit code of a worker that could not serve (the parent logs it and forks another).
WORKER_FAILED = 70
#: Exit code of a worker whose connection carried no call (e.g. another server's probe).
WORKER_NO_CALL = 3
#: Exit code of a worker whose connection carried no valid call in time (the client's fault).
WORKER_BAD_CALL = 4
#: Seconds a worker waits for the whole call once it took the connection (the client sends it
#: at once: a 1,000-node request is 0.6 MB).
READ_TIMEOUT_S = 5.0
#: Characters of one argument or message a log line quotes.
LOG_QUOTE_CHARS = 200


@dataclass(frozen=True)
class ServerReport:
    socket: str
    served: int
    failed: int

    def text(self) -> str:
        return f"exalloc hail-server on {self.socket}: stopped after {self.served} call(s)" + (
            f", {self.failed} worker failure(s)" if self.failed else ""
        )

    def to_json(self) -> dict[str, Any]:
        return {"socket": self.socket, "served": self.served, "worker_failures": self.failed}


def rehearse(requests: list[str]) -> None:
    """Answer the warm-up requests in a fresh worker: the first request in a forked process
    pays for copying the pages it touches (about 10 ms at 1,000 nodes); this moves that
    cost before the call arrives. Failures do not matter here."""
    from model.backends.iallocator import parse_request
    from solvers.strategies.iallocator import answer

    for text in requests:
        with contextlib.suppress(Exception):
            answer(parse_request(text))


def run_call(call: Call, main: Callable[[list[str]], int]) -> Reply:
    """Run `exalloc hail ARGV` as the client would have, capturing what it prints."""
    try:
        os.chdir(call.cwd)
    except OSError as exc:
        return Reply(0, "", "", refused=f"cannot enter {call.cwd}: {exc.strerror}")
    for key in [k for k in os.environ if k.startswith(FORWARDED_ENV_PREFIX)]:
        del os.environ[key]
    os.environ.update(call.env)
    sys.stdin = io.StringIO(call.stdin or "")
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(["hail", *call.argv])
            except SystemExit as done:  # argparse: usage errors and --help
                code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    except Exception as exc:  # a bug: let the client run it in process and show it there
        return Reply(0, "", "", refused=f"{type(exc).__name__}: {exc}")
    return Reply(code, out.getvalue(), err.getvalue())


def printable(text: str, limit: int = LOG_QUOTE_CHARS) -> str:
    """`text` as a log line may quote it (model.errors.printable): no input forges a line."""
    return errors.printable(text, limit)


def _log(log: TextIO, message: str) -> None:
    log.write(f"exalloc hail-server[{os.getpid()}]: {message}\n")
    log.flush()


#: Builds the command line's `main` (its parser made ahead of the call); cli.py hands it over
#: through the program (nothing below cli imports it).
MainFactory = Callable[[], Callable[[list[str]], int]]


def worker(sock: socket.socket, log: TextIO, rehearsal: list[str], make_main: MainFactory) -> int:
    """Accept one call, answer it, return the worker's exit code."""
    main = make_main()
    gc.disable()  # one call, then exit: collecting cycles would only cost time
    rehearse(rehearsal)
    conn, _ = sock.accept()
    # a call once accepted is finished: a stopping server waits for it
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    sock.close()
    start = time.perf_counter()
    with conn:
        conn.settimeout(READ_TIMEOUT_S)  # no client holds this worker by saying nothing
        try:
            conn.sendall(ACK)  # the client waits for this before it sends its call
        except OSError:  # connected and left at once
            return WORKER_NO_CALL
        if peer_uid(conn) != os.getuid():
            conn.sendall(Reply(0, "", "", refused="not the server's user").encode())
            _log(log, "refused a call from another user")
            return 0
        try:
            data = read_all(conn, MAX_MESSAGE_BYTES, time.monotonic() + READ_TIMEOUT_S)
            if not data:  # connected and left: someone checking whether a server listens
                return WORKER_NO_CALL
            call = Call.decode(data)
        except (ProtocolError, OSError) as exc:  # OSError includes TimeoutError
            why = (
                f"no complete call within {READ_TIMEOUT_S:g} s"
                if isinstance(exc, TimeoutError)
                else f"malformed call: {exc}"
            )
            _log(log, f"refused: {printable(why)}")
            with contextlib.suppress(OSError):
                conn.sendall(Reply(0, "", "", refused=why).encode())
            return WORKER_BAD_CALL
        # a call that overruns its bound ends this worker; its client has answered it itself
        signal.alarm(math.ceil(time_bound(call.argv) + REPLY_MARGIN_S))
        reply = run_call(call, main)
        signal.alarm(0)
        took = time.perf_counter() - start
        what = f"refused ({reply.refused})" if reply.refused else f"exit {reply.exit_code}"
        argv = " ".join(printable(arg) for arg in call.argv)
        # logged before the reply goes out: once a client has its answer, the line is there
        _log(log, f"hail {argv}: {printable(what)} in {took:.3f} s")
        with contextlib.suppress(OSError):  # the client may have given up
            conn.sendall(reply.encode())
    return 0


def _fork_worker(
    sock: socket.socket, log: TextIO, rehearsal: list[str], make_main: MainFactory
) -> int:
    pid = os.fork()
    if pid:
        return pid
    code = WORKER_FAILED
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
        code = worker(sock, log, rehearsal, make_main)
    except BaseException as exc:  # never return into the parent's loop from a child
        with contextlib.suppress(Exception):
            _log(log, f"worker failed: {type(exc).__name__}: {printable(str(exc))}")
    finally:
        os._exit(code)
    return 0  # not reached


class _Stop(Exception):
    pass


def _raise_stop(signum: int, _frame: Any) -> None:
    raise _Stop(signum)


def serve(
    path: str,
    workers: int,
    log: TextIO,
    make_main: MainFactory,
    warm_up: Callable[[], list[str]],
) -> ServerReport:
    """Serve until SIGTERM or SIGINT; the socket file is removed on the way out. `warm_up`
    imports what a call needs and returns the requests a fresh worker rehearses."""
    stops = {signal.SIGTERM, signal.SIGINT}
    previous = {s: signal.signal(s, _raise_stop) for s in stops}
    children: set[int] = set()
    served = failed = rejected = 0
    sock: socket.socket | None = None
    try:
        rehearsal = warm_up()
        sock = listen(path)
        gc.collect()
        gc.freeze()  # workers then share the imported objects' pages longer
        _log(log, f"listening on {path} with {workers} worker(s)")
        while True:
            while len(children) < workers:
                # a stop between fork and add would leave a worker nobody stops
                signal.pthread_sigmask(signal.SIG_BLOCK, stops)
                try:
                    children.add(_fork_worker(sock, log, rehearsal, make_main))
                finally:
                    signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)
            # wait without reaping (a stop here loses nothing: the worker is still a child
            # the stop below waits for), then reap and count with stops held back, so that
            # every finished call is counted exactly once
            ended = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOWAIT)
            signal.pthread_sigmask(signal.SIG_BLOCK, stops)
            try:
                pid, status = os.waitpid(ended.si_pid, 0)
                code = os.waitstatus_to_exitcode(status)
                if pid in children:
                    children.discard(pid)
                    served += code == 0
                    rejected += code == WORKER_BAD_CALL
                    failed += code not in (0, WORKER_NO_CALL, WORKER_BAD_CALL)
                    if code < 0:
                        _log(log, f"worker {pid} killed by signal {-code}")
            finally:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)
            if code not in (0, WORKER_NO_CALL, WORKER_BAD_CALL):
                time.sleep(0.1)  # a worker that fails at once must not spin the parent
    except _Stop:
        pass
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if sock is not None:  # no new call: clients waiting in the backlog answer themselves
            sock.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        for pid in children:  # idle workers stop; one in a call finishes it first
            with contextlib.suppress(ChildProcessError):
                _, status = os.waitpid(pid, 0)
                served += os.waitstatus_to_exitcode(status) == 0
    refusals = f", refused {rejected} malformed or silent connection(s)" if rejected else ""
    _log(log, f"stopped after {served} call(s){refusals}")
    return ServerReport(path, served, failed)
