"""`exalloc create`, `exalloc verify`, `exalloc state`: clients of `exalloc alloc-server`.

The wire protocol (docs/locking.md): one connection per request; the client sends one JSON
object on one line (at most `MAX_REQUEST_BYTES`) and then nothing; the server answers one
JSON line, `{"ok": true, "result": {...}}` or `{"ok": false, "error": "...", "kind": ...}`.
Closing the connection before the answer withdraws the request: the server stops waiting
for its locks and releases them (a creation already committed stays).
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from dataclasses import dataclass
from typing import Any

from model.errors import BadRequestError, ServiceError
from model.files import write_file

SOCKET_ENV = "EXALLOC_ALLOC_SOCKET"
DEFAULT_SOCKET = "/run/exalloc/alloc.sock"
#: A request is a few hundred bytes; anything past this is refused unread.
MAX_REQUEST_BYTES = 64 * 1024
#: An answer carries at most a snapshot (about 100 bytes per node and instance).
MAX_REPLY_BYTES = 1 << 30

EXIT_CREATED, EXIT_TEMP_NORES, EXIT_NORES = 0, 3, 4
STATUS_EXIT = {"created": EXIT_CREATED, "temp_nores": EXIT_TEMP_NORES, "nores": EXIT_NORES}


class ConnectionLost(ServiceError):
    """The server could not be reached or the connection broke before the answer."""


class ProtocolError(Exception):
    """Bytes that are not a message of this protocol (the text says what is wrong)."""


def socket_path(given: str | None) -> str:
    return given or os.environ.get(SOCKET_ENV) or DEFAULT_SOCKET


def encode(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), allow_nan=False).encode("utf-8") + b"\n"


def decode_line(data: bytes) -> Any:
    """One JSON message; ProtocolError saying why it is not one."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"not UTF-8 (byte {exc.start})") from None
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise ProtocolError(f"not JSON ({exc.msg} at column {exc.colno})") from None
    except ValueError as exc:
        raise ProtocolError(str(exc)) from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"not JSON ({name} is not a JSON number)")


def read_line(sock: socket.socket, limit: int) -> tuple[bytes, bytes]:
    """Bytes up to the first newline (without it) and any bytes after it; ProtocolError
    when the peer closes first or the line exceeds `limit`."""
    buf = bytearray()
    while True:
        at = buf.find(b"\n")
        if at >= 0:
            if at > limit:
                raise ProtocolError(f"message larger than {limit} bytes")
            return bytes(buf[:at]), bytes(buf[at + 1 :])
        if len(buf) > limit:
            raise ProtocolError(f"message larger than {limit} bytes")
        chunk = sock.recv(65536)
        if not chunk:
            raise ProtocolError("connection closed before the end of the message")
        buf += chunk


def call(path: str, request: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
    """Send one request and wait for its answer; the result object, BadRequestError for a
    refused request, ConnectionLost when no answer came."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(path)
            sock.sendall(encode(request))
            line, _ = read_line(sock, MAX_REPLY_BYTES)
    except (OSError, ProtocolError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConnectionLost(f"{path}: no answer from the allocation service: {why}") from None
    try:
        reply = decode_line(line)
    except ProtocolError as exc:
        raise ServiceError(f"{path}: not an answer of the allocation service: {exc}") from None
    if not isinstance(reply, dict) or "ok" not in reply:
        raise ServiceError(f"{path}: not an answer of the allocation service")
    if reply["ok"]:
        return reply["result"]
    error = str(reply.get("error", "unknown error"))
    if reply.get("kind") == "stopping":
        raise ConnectionLost(f"{path}: {error}")
    if reply.get("kind") == "bad_request":
        raise BadRequestError(f"bad request: {error}")
    raise ServiceError(error)


# ---------------------------------------------------------------------------------------------
# exalloc create


@dataclass(frozen=True)
class CreateReport:
    result: dict[str, Any]

    @property
    def exit_code(self) -> int:
        return STATUS_EXIT[self.result["status"]]

    def text(self) -> str:
        r = self.result
        if r["status"] == "created":
            how = f"{r['mode']} locks: waited {r['lock_wait_s']:.3f} s"
            how += f", allocation {r['alloc_s']:.3f} s"
            if r.get("held_s"):
                how += f", held {r['held_s']:.2f} s"
            return f"created {r['name']} on {'/'.join(r['nodes'])} ({how})\ninfo: {r['info']}"
        return f"{r['status']}: {r['name']} not created: {r['info']}"

    def to_json(self) -> dict[str, Any]:
        return dict(self.result)


def create_request(args: Any) -> dict[str, Any]:
    """The create request of the command line (validated by the server)."""
    disks = list(args.disk or [])
    spindles = list(args.spindles) if args.spindles else [1] * len(disks)
    return {
        "op": "create",
        "request_id": args.request_id or str(uuid.uuid4()),
        "name": args.name,
        "template": args.template,
        "memory": args.memory,
        "disks": disks,
        "spindles": spindles,
        "vcpus": args.vcpus,
        "spindle_use": args.spindle_use,
        "opportunistic": bool(args.opportunistic),
        "hold_s": args.hold,
        "lock_timeout_s": args.lock_timeout,
    }


def create(args: Any) -> CreateReport:
    """CLI entry: `exalloc create --socket PATH --name NAME --template T --memory MIB ...`."""
    return CreateReport(call(socket_path(args.socket), create_request(args)))


# ---------------------------------------------------------------------------------------------
# exalloc verify


@dataclass(frozen=True)
class VerifyReport:
    result: dict[str, Any]

    @property
    def exit_code(self) -> int:
        return 0 if self.result["ok"] else 1

    def text(self) -> str:
        r = self.result
        head = (
            f"verify: {r['nodes_locked']} node locks and the node-allocation lock held (shared) "
            f"for {r['held_s']:.2f} s after waiting {r['lock_wait_s']:.3f} s; "
            f"{r['commits_during']} creation(s) committed meanwhile"
        )
        body = (
            f"{r['instances']} instances ({r['creations']} created by the service), "
            f"score {r['score']:.8f}"
        )
        if r["ok"]:
            return f"{head}\n{body}; checker: ok"
        return "\n".join([head, body + "; checker: FAILED", *r["violations"]])

    def to_json(self) -> dict[str, Any]:
        return dict(self.result)


def verify(args: Any) -> VerifyReport:
    """CLI entry: `exalloc verify --socket PATH [--hold S]`."""
    return VerifyReport(call(socket_path(args.socket), {"op": "verify", "hold_s": args.hold}))


# ---------------------------------------------------------------------------------------------
# exalloc state


@dataclass(frozen=True)
class StateReport:
    result: dict[str, Any]
    saved: str | None = None

    def text(self) -> str:
        r = self.result
        lines = [
            f"{r['nodes']} nodes, {r['instances']} instances "
            f"({r['creations']} created by the service)",
            f"cluster score {r['score']:.8f}"
            + (
                f", allocation vector {list(r['allocation_vector'])}"
                if r["allocation_vector"] is not None
                else ""
            ),
            "checker: ok" if r["check_ok"] else "checker: FAILED; " + "; ".join(r["violations"]),
        ]
        for what in sorted(r["activities"].values()):
            lines.append(f"running: {what}")
        for lock in r["locks"]:
            owners = ", ".join(lock["owners"]) or "-"
            pending = ", ".join(f"{n} {m}" for m, n in lock["pending"])
            lines.append(
                f"lock {lock['name']}: {lock['mode'] or 'free'} by {owners}"
                + (f"; waiting: {pending}" if pending else "")
            )
        if self.saved:
            lines.append(f"wrote {self.saved}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in self.result.items() if k != "text"}
        if self.saved:
            out["saved"] = self.saved
        return out


def state(args: Any) -> StateReport:
    """CLI entry: `exalloc state --socket PATH [-S FILE]`."""
    result = call(socket_path(args.socket), {"op": "state", "text": bool(args.save)})
    if args.save:
        write_file(args.save, result["text"])
    return StateReport(result, args.save)
