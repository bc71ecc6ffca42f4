"""`exalloc-hail`, the iallocator Ganeti runs: hand the call to `exalloc hail-server` if one runs.

Ganeti starts the iallocator once per request. Starting Python and importing Pyomo and
HiGHS costs about half a second, more than hail needs for a whole request at 1,000 nodes;
a server that has done the imports once answers in a fraction of that. This module imports
nothing beyond what Python loads at start-up and the C `_socket` module (no json, re, typing
or even `socket`: each costs milliseconds), so the client itself starts in about 15 ms.

Every failure to reach the server (no socket, nobody listening, a refused or broken
exchange) makes the client answer in process: the answer is a pure function of the
request, so both ways print the same bytes. So does a server that does not answer in time:
a worker takes a call by sending one byte (ACK) as soon as it accepts it, and a client that
gets none within ACCEPT_TIMEOUT_S (all workers busy or stuck: its connection waits in the
listen backlog) answers itself; one whose worker took the call but sends no reply within
the call's time bound plus REPLY_MARGIN_S does the same (docs/reliability.md, "hail-server").

Messages are length-prefixed strings ("5:hello"), the call and the reply each one list.
"""

from __future__ import annotations

import _socket
import io
import os
import sys
import time

SOCKET_ENV = "EXALLOC_HAIL_SOCKET"
DEFAULT_SOCKET = "/run/exalloc/hail.sock"
#: Environment variables that change an answer travel with the call.
FORWARDED_ENV_PREFIX = "EXALLOC_"
#: No request or answer is larger than this (a 1,000-node request is about 0.6 MB).
MAX_MESSAGE_BYTES = 64 << 20
#: How long a client waits for a worker to take its call before answering it itself.
ACCEPT_TIMEOUT_S = 2.0
#: What a call may take beyond its time bound (loading, screening, checking) before the client
#: stops waiting for the server's reply and answers itself.
REPLY_MARGIN_S = 30.0
#: The time bound of a request without --time-limit (programs.hail applies it to the solve).
DEFAULT_TIME_LIMIT_S = 60.0
#: The byte a worker sends when it takes a call.
ACK = b"+"
_CALL_TAG = "exalloc-hail-call/2"
_REPLY_TAG = "exalloc-hail-reply/2"


class ProtocolError(Exception):
    """A message that is not what the other side sends."""


def pack(fields: list[str]) -> bytes:
    """Each field as `len:bytes` (UTF-8, surrogates kept: file names need not be UTF-8)."""
    out = []
    for text in fields:
        data = text.encode("utf-8", "surrogateescape")
        out.append(b"%d:%s" % (len(data), data))
    return b"".join(out)


def unpack(data: bytes) -> list[str]:
    fields = []
    at = 0
    while at < len(data):
        colon = data.find(b":", at, at + 12)
        if colon < 0 or not data[at:colon].isdigit():
            raise ProtocolError("bad field length")
        end = colon + 1 + int(data[at:colon])
        if end > len(data):
            raise ProtocolError("truncated message")
        fields.append(data[colon + 1 : end].decode("utf-8", "surrogateescape"))
        at = end
    return fields


class Call:
    """One run as the client sees it: arguments, working directory, EXALLOC_* variables, stdin."""

    __slots__ = ("argv", "cwd", "env", "stdin")

    def __init__(self, argv: list[str], cwd: str, env: dict[str, str], stdin: str | None):
        self.argv, self.cwd, self.env, self.stdin = list(argv), cwd, dict(env), stdin

    def encode(self) -> bytes:
        head = [_CALL_TAG, self.cwd, "1" if self.stdin is not None else "0", self.stdin or ""]
        env = [x for kv in self.env.items() for x in kv]
        return pack([*head, str(len(self.argv)), *self.argv, *env])

    @classmethod
    def decode(cls, data: bytes) -> Call:
        f = unpack(data)
        if len(f) < 5 or f[0] != _CALL_TAG or f[2] not in ("0", "1") or not f[4].isdigit():
            raise ProtocolError("not an exalloc-hail call")
        n = int(f[4])
        argv, env = f[5 : 5 + n], f[5 + n :]
        if len(argv) != n or len(env) % 2:
            raise ProtocolError("truncated call")
        stdin = f[3] if f[2] == "1" else None
        return cls(argv, f[1], dict(zip(env[::2], env[1::2], strict=True)), stdin)


class Reply:
    """What the run printed and its exit code; `refused` (not empty) means: run it yourself."""

    __slots__ = ("exit_code", "stdout", "stderr", "refused")

    def __init__(self, exit_code: int, stdout: str, stderr: str, refused: str = ""):
        self.exit_code, self.stdout, self.stderr, self.refused = exit_code, stdout, stderr, refused

    def encode(self) -> bytes:
        return pack([_REPLY_TAG, str(self.exit_code), self.stdout, self.stderr, self.refused])

    @classmethod
    def decode(cls, data: bytes) -> Reply:
        f = unpack(data)
        if len(f) != 5 or f[0] != _REPLY_TAG or not f[1].lstrip("-").isdigit():
            raise ProtocolError("not an exalloc-hail reply")
        return cls(int(f[1]), f[2], f[3], f[4])


def socket_path(environ: dict[str, str] | os._Environ[str] = os.environ) -> str | None:
    """The server's socket: $EXALLOC_HAIL_SOCKET, or the default; empty disables the server."""
    path = environ.get(SOCKET_ENV, DEFAULT_SOCKET)
    return path or None


def time_bound(argv: list[str]) -> float:
    """The seconds a call may solve for: its --time-limit, else DEFAULT_TIME_LIMIT_S."""
    for k, arg in enumerate(argv):
        if arg == "--time-limit" and k + 1 < len(argv):
            text = argv[k + 1]
        elif arg.startswith("--time-limit="):
            text = arg.partition("=")[2]
        else:
            continue
        try:
            seconds = float(text)
        except ValueError:  # the run itself will refuse it, at once
            return DEFAULT_TIME_LIMIT_S
        return seconds if 0 < seconds < 1e6 else DEFAULT_TIME_LIMIT_S
    return DEFAULT_TIME_LIMIT_S


def read_all(
    sock: _socket.socket, limit: int = MAX_MESSAGE_BYTES, deadline: float | None = None
) -> bytes:
    """Everything until the peer shuts its side down; TimeoutError past `deadline`
    (time.monotonic), ProtocolError past `limit` bytes."""
    chunks = []
    size = 0
    while True:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no complete message in time")
            sock.settimeout(left)
        chunk = sock.recv(1 << 20)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > limit:
            raise ProtocolError(f"message larger than {limit} bytes")
        chunks.append(chunk)


def exchange(path: str, call: Call) -> Reply | None:
    """Send one call, wait for its reply; None when the server cannot be used in time."""
    try:
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            sock.settimeout(ACCEPT_TIMEOUT_S)
            sock.connect(path)
            if sock.recv(1) != ACK:  # no worker took the call in time, or not our server
                return None
            sock.sendall(call.encode())
            sock.shutdown(_socket.SHUT_WR)
            deadline = time.monotonic() + time_bound(call.argv) + REPLY_MARGIN_S
            reply = Reply.decode(read_all(sock, deadline=deadline))
        finally:
            sock.close()
    except (OSError, ProtocolError, ValueError):  # OSError includes TimeoutError
        return None
    return None if reply.refused else reply


def forward(argv: list[str]) -> int | None:
    """Run `exalloc-hail ARGV` on the server and print its output; None to run in process."""
    path = socket_path()
    if path is None or not os.path.exists(path):
        return None
    stdin = sys.stdin.read() if "-" in argv else None
    env = {k: v for k, v in os.environ.items() if k.startswith(FORWARDED_ENV_PREFIX)}
    reply = exchange(path, Call(argv, os.getcwd(), env, stdin))
    if reply is None:
        if stdin is not None:  # already read: give it back to the in-process run
            sys.stdin = io.StringIO(stdin)
        return None
    sys.stdout.write(reply.stdout)
    sys.stdout.flush()
    sys.stderr.write(reply.stderr)
    sys.stderr.flush()
    return reply.exit_code
