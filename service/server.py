"""The live allocation service on a Unix socket (docs/locking.md); the command line is
programs/alloc_server.py, `exalloc alloc-server`.

The server warms the allocator up, then serves until SIGTERM/SIGINT. Each connection is answered
in its own thread (the lock owner) by `service.allocation.AllocationService`; the allocator is
exalloc's iallocator through `service.iallocator`. Only the server's own user may connect
(socket mode 0600, peer credentials checked, as `exalloc hail-server`). A client that closes its
connection before the answer withdraws its request: its waits stop and its locks are released.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, TextIO

from model.errors import BadRequestError, ExallocError, InputError
from service.allocation import AcquireCancelled, AllocationService, CreateOptions
from service.client import (
    MAX_REQUEST_BYTES,
    ProtocolError,
    decode_line,
    encode,
    read_line,
)
from service.sockets import listen, peer_uid
from service.state import CREATE_KEYS as INSTANCE_KEYS
from service.state import CreateSpec, seconds

#: Connections answered at the same time; more are refused with a one-line error.
MAX_CONNECTIONS = 256
#: After refusing an oversized request, read (and drop) at most this much of the rest, so
#: that the client's send completes and it can read the error.
DRAIN_BYTES = 64 << 20
DRAIN_S = 2.0
STOP_WAIT_S = 10.0
#: How often the accept loop looks whether SIGTERM or SIGINT asked it to stop.
ACCEPT_POLL_S = 0.2

CREATE_OPTION_KEYS = frozenset({"op", "request_id", "opportunistic", "hold_s", "lock_timeout_s"})


@dataclass(frozen=True)
class ServerReport:
    socket: str
    served: int
    refused: int

    def text(self) -> str:
        return f"exalloc alloc-server on {self.socket}: stopped after {self.served} request(s)" + (
            f", {self.refused} refused" if self.refused else ""
        )

    def to_json(self) -> dict[str, Any]:
        return {"socket": self.socket, "served": self.served, "refused": self.refused}


def _check_keys(obj: dict[str, Any], allowed: frozenset[str]) -> None:
    unknown = sorted(set(obj) - allowed)
    if unknown:
        raise BadRequestError(f"{unknown[0]}: unknown key")


class Server:
    """The accept loop, one thread per connection, and the per-request protocol."""

    def __init__(self, service: AllocationService, path: str, log: TextIO):
        self.service = service
        self.path = path
        self.log = log
        self.stopping = threading.Event()
        self._mutex = threading.Lock()
        self._cancels: dict[threading.Thread, threading.Event] = {}
        self.served = 0
        self.refused = 0
        self._count = 0

    def _log(self, message: str) -> None:
        self.log.write(f"exalloc alloc-server[{os.getpid()}]: {message}\n")
        self.log.flush()

    def warm_up(self) -> None:
        """Import and run the allocator once (not committed), so the first client does not
        pay for the solver's start-up."""
        cluster = self.service.live.cluster
        used = {n.group_uuid for n in cluster.nodes}
        for group in (g for g in cluster.groups if g.uuid in used):
            smallest = min((mm.min for mm in group.ipolicy.minmax), key=lambda s: s.memory_size)
            allowed = group.ipolicy.disk_templates
            template = next((t for t in ("plain", "ext") if t in allowed), None)
            if template is None:
                continue
            spec = CreateSpec(
                "warm-up",
                template,
                smallest.memory_size,
                (smallest.disk_size,),
                (1,),
                smallest.cpu_count,
                smallest.spindle_use,
            )
            with contextlib.suppress(ExallocError):
                self.service.allocate(cluster, spec.allocate_request(None))
            return

    def serve(self) -> ServerReport:
        stops = {signal.SIGTERM, signal.SIGINT}
        # the handlers only ask the accept loop to stop: an exception raised from a handler
        # lands wherever the main thread is, possibly between taking a lock and the block
        # that releases it, and the stop then waited for that lock for ever (a test's server
        # once ignored SIGTERM for its whole minute)
        previous = {s: signal.signal(s, self._ask_stop) for s in stops}
        sock: socket.socket | None = None
        try:
            live = self.service.live
            self.warm_up()
            sock = listen(self.path)
            sock.settimeout(ACCEPT_POLL_S)
            cut = self.service.journal.cut_bytes
            self._log(
                f"listening on {self.path}: {len(live.cluster.nodes)} nodes, "
                f"{len(live.cluster.instances)} instances, {live.seq} creation(s) replayed"
                + (f", a torn last record ({cut} bytes) dropped" if cut else "")
            )
            while not self.stopping.is_set():
                try:
                    conn, _ = sock.accept()
                except TimeoutError:
                    continue
                self._start(conn)
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
            self.stopping.set()
            if sock is not None:
                sock.close()
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.path)
            self._stop_requests()
        self._log(f"stopped after {self.served} request(s)")
        return ServerReport(self.path, self.served, self.refused)

    def _ask_stop(self, _signum: int, _frame: Any) -> None:
        self.stopping.set()

    def _stop_requests(self) -> None:
        """Stop every wait and hold, let the threads answer, wait for them."""
        with self._mutex:
            running = dict(self._cancels)
        for cancel in running.values():
            cancel.set()
        deadline = time.monotonic() + STOP_WAIT_S
        for thread in running:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _start(self, conn: socket.socket) -> None:
        with self._mutex:
            busy = len(self._cancels) >= MAX_CONNECTIONS
            self._count += 1
            number = self._count
        if busy:
            with conn:
                self._refuse(conn, "too many requests at once", "busy")
            return
        cancel = threading.Event()
        thread = threading.Thread(
            target=self._handle, args=(conn, cancel), name=f"request-{number}", daemon=True
        )
        with self._mutex:
            self._cancels[thread] = cancel
        thread.start()

    @staticmethod
    def _send(conn: socket.socket, message: dict[str, Any]) -> bool:
        try:
            conn.sendall(encode(message))
            return True
        except OSError:
            return False

    def _refuse(self, conn: socket.socket, error: str, kind: str = "bad_request") -> None:
        with self._mutex:
            self.refused += 1
        self._send(conn, {"ok": False, "error": error, "kind": kind})

    def _handle(self, conn: socket.socket, cancel: threading.Event) -> None:
        me = threading.current_thread()
        watcher: threading.Thread | None = None
        try:
            with conn:
                if peer_uid(conn) != os.getuid():
                    self._refuse(conn, "not the server's user", "refused")
                    self._log("refused a request from another user")
                    return
                try:
                    line, extra = read_line(conn, MAX_REQUEST_BYTES)
                    if extra:
                        raise ProtocolError("one request per connection, on one line")
                    request = decode_line(line)
                except ProtocolError as exc:
                    self._refuse(conn, f"malformed request: {exc}")
                    self._log(f"malformed request: {exc}")
                    self._drain(conn)
                    return
                except OSError:
                    return
                watcher = threading.Thread(
                    target=self._watch, args=(conn, cancel), name=f"{me.name}-watch", daemon=True
                )
                watcher.start()
                self._answer(conn, request, cancel)
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
        finally:
            if watcher is not None:
                watcher.join(1.0)
            with self._mutex:
                self._cancels.pop(me, None)

    def _drain(self, conn: socket.socket) -> None:
        """Read what the client still sends (bounded), so its send ends and it reads the error."""
        with contextlib.suppress(OSError):
            conn.shutdown(socket.SHUT_WR)
            conn.settimeout(DRAIN_S)
            deadline = time.monotonic() + DRAIN_S
            total = 0
            while total < DRAIN_BYTES and time.monotonic() < deadline:
                chunk = conn.recv(1 << 20)
                if not chunk:
                    break
                total += len(chunk)

    def _watch(self, conn: socket.socket, cancel: threading.Event) -> None:
        """The client sends nothing after its request: anything arriving (EOF included)
        means it went away, and its request is withdrawn."""
        with contextlib.suppress(OSError):
            conn.recv(1)
        cancel.set()

    def _answer(self, conn: socket.socket, request: Any, cancel: threading.Event) -> None:
        start = time.perf_counter()
        what = "request"
        try:
            if not isinstance(request, dict):
                raise BadRequestError("a request must be a JSON object")
            op = request.get("op")
            what = str(op)
            if op == "create":
                what = f"create {request.get('name')}"
                result = self._create(request, cancel)
            elif op == "verify":
                _check_keys(request, frozenset({"op", "hold_s"}))
                hold = seconds(request, "hold_s", 0.0) or 0.0
                result = self.service.verify(hold, cancel).to_json()
            elif op == "state":
                _check_keys(request, frozenset({"op", "text"}))
                if not isinstance(request.get("text", False), bool):
                    raise BadRequestError("text: must be true or false")
                result = self.service.state(bool(request.get("text", False))).to_json()
            else:
                raise BadRequestError(f"op: unknown operation {op!r} (create, verify, state)")
        except InputError as exc:
            self._refuse(conn, str(exc))
            self._log(f"{what}: refused: {exc}")
            return
        except AcquireCancelled:
            if self.stopping.is_set():
                self._send(
                    conn,
                    {
                        "ok": False,
                        "error": "the allocation service is stopping; nothing was created",
                        "kind": "stopping",
                    },
                )
            self._log(f"{what}: withdrawn while waiting for locks")
            return
        except ExallocError as exc:
            self._send(conn, {"ok": False, "error": str(exc), "kind": "service"})
            self._log(f"{what}: failed: {exc}")
            return
        except Exception as exc:  # a bug: one line to the client, the details in the log
            self._send(conn, {"ok": False, "error": f"internal error: {exc!r}", "kind": "service"})
            self._log(f"{what}: internal error: {traceback.format_exc()}")
            return
        with self._mutex:
            self.served += 1
        took = time.perf_counter() - start
        summary = str(result.get("status", "ok"))
        if summary == "created":
            summary += f" on {'/'.join(result['nodes'])}"
        elif summary in ("temp_nores", "nores"):
            summary += f" ({result['info']})"
        # logged before the answer goes out: once a client has it, the line is there
        self._log(f"{what}: {summary} in {took:.3f} s")
        if not self._send(conn, {"ok": True, "result": result}):
            self._log(f"{what}: the client left before the answer")

    def _create(self, request: dict[str, Any], cancel: threading.Event) -> dict[str, Any]:
        _check_keys(request, CREATE_OPTION_KEYS | INSTANCE_KEYS)
        spec = self.service.parse_create({k: v for k, v in request.items() if k in INSTANCE_KEYS})
        request_id = request.get("request_id", None)
        if request_id is None:
            request_id = f"anonymous-{time.time_ns()}-{threading.get_ident()}"
        elif not isinstance(request_id, str) or not 1 <= len(request_id) <= 128:
            raise BadRequestError("request_id: must be a string of 1..128 characters")
        opportunistic = request.get("opportunistic", False)
        if not isinstance(opportunistic, bool):
            raise BadRequestError("opportunistic: must be true or false")
        options = CreateOptions(
            opportunistic=opportunistic,
            hold_s=seconds(request, "hold_s", 0.0) or 0.0,
            lock_timeout_s=seconds(request, "lock_timeout_s", None),
        )
        return self.service.create(spec, options, request_id, cancel).to_json()
