"""The Unix sockets both servers listen on (`exalloc hail-server`, `exalloc alloc-server`):
mode 0600 and the peer's user checked, because a request runs with the server's rights."""

from __future__ import annotations

import os
import socket
import stat
import struct

from model.errors import ExallocError


class ServerError(ExallocError):
    """The server cannot start (socket in use, directory missing, ...)."""


def listen(path: str) -> socket.socket:
    """A listening socket at `path`, mode 0600; a stale socket file is replaced."""
    if os.path.lexists(path):
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            raise ServerError(f"{path}: exists and is not a socket")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            try:
                probe.connect(path)
            except OSError:
                os.unlink(path)  # nobody listens: left over from a server that died
            else:
                raise ServerError(f"{path}: another server is listening there")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o177)
    try:
        sock.bind(path)
    except OSError as exc:
        sock.close()
        raise ServerError(f"{path}: cannot listen: {exc.strerror}") from None
    finally:
        os.umask(old_umask)
    sock.listen(128)
    return sock


def peer_uid(conn: socket.socket) -> int:
    """The connecting process's user id (Linux SO_PEERCRED: pid, uid, gid)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]
