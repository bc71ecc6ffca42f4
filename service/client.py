"""The client side of `exalloc alloc-server`'s protocol, for `exalloc create`, `verify`, `state`
and `loadtest` (programs/create.py, verify.py, state.py, loadtest.py).

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
from typing import Any

from model.errors import BadRequestError, ServiceError

SOCKET_ENV = "EXALLOC_ALLOC_SOCKET"
DEFAULT_SOCKET = "/run/exalloc/alloc.sock"
#: A request is a few hundred bytes; anything past this is refused unread.
MAX_REQUEST_BYTES = 64 * 1024
#: An answer carries at most a snapshot (about 100 bytes per node and instance).
MAX_REPLY_BYTES = 1 << 30


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
