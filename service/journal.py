"""The allocation service's state directory: the snapshot it started from and a journal.

`DIR/base.data` is the cluster snapshot as first given (htools text format); `DIR/journal.jsonl`
holds one JSON line per committed creation (`service.state.Creation`), appended and fsynced
before the creation is answered. A restart replays the journal onto the snapshot, so every
answered creation is there exactly once, also after SIGKILL.

A record cut short by a crash (no final newline, or not JSON on the last line) was never
answered: it is cut off at replay. Anything wrong before the last line is an error naming the
file and line: such a journal was not written by the service and is not guessed at.
`DIR/lock` is held (flock) while a service uses the directory; the kernel drops it when the
process dies, however it dies.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import IO

from model.backends.text import parse_text
from model.cluster import Cluster
from model.errors import InputError, ServiceError
from service.state import Creation, LiveCluster

BASE_FILE = "base.data"
JOURNAL_FILE = "journal.jsonl"
LOCK_FILE = "lock"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_durably(path: Path, text: str) -> None:
    """Write a new file completely or not at all (temporary file, fsync, rename, fsync dir)."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8", newline="") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


class Journal:
    """An open state directory: the base snapshot, the replayed creations, the append handle."""

    def __init__(self, directory: Path, lock: IO[bytes], handle: IO[bytes], live: LiveCluster):
        self.directory = directory
        self._lock = lock
        self._handle = handle
        self.live = live
        self.cut_bytes = 0  # bytes of a torn last record removed at replay

    @property
    def path(self) -> Path:
        return self.directory / JOURNAL_FILE

    @classmethod
    def open(cls, directory: str | os.PathLike[str], cluster_text: str | None) -> Journal:
        """Open (or start) a state directory. `cluster_text` is the snapshot given on the
        command line: it starts a new directory, and must equal the stored one on a restart
        (None: use the stored one)."""
        root = Path(directory)
        try:
            root.mkdir(parents=True, exist_ok=True)
            lock = open(root / LOCK_FILE, "ab")  # noqa: SIM115 - held while the service runs
        except OSError as exc:
            raise ServiceError(f"{root}: cannot use as state directory: {exc.strerror}") from None
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            raise ServiceError(
                f"{root}: another allocation service uses this state directory"
            ) from None
        try:
            return cls._open_locked(root, lock, cluster_text)
        except BaseException:
            lock.close()
            raise

    @classmethod
    def _open_locked(cls, root: Path, lock: IO[bytes], cluster_text: str | None) -> Journal:
        base_path = root / BASE_FILE
        if base_path.exists():
            stored = base_path.read_text(encoding="utf-8", errors="surrogateescape")
            if cluster_text is not None and cluster_text != stored:
                raise ServiceError(
                    f"{root}: holds the state of another snapshot ({base_path} differs from the "
                    f"one given); use a new state directory or omit -t"
                )
            base: Cluster = parse_text(stored, str(base_path))
        elif cluster_text is None:
            raise ServiceError(f"{root}: no {BASE_FILE} yet: give the cluster snapshot with -t")
        else:
            stored = cluster_text
            base = parse_text(stored, "the cluster snapshot")
            _write_durably(base_path, stored)
        live = LiveCluster.start(base)
        journal_path = root / JOURNAL_FILE
        created = not journal_path.exists()
        handle = open(journal_path, "ab+")  # noqa: SIM115 - the append handle of the service
        if created:
            _fsync_dir(root)
        try:
            live, cut = replay(handle, str(journal_path), live)
        except BaseException:
            handle.close()
            raise
        journal = cls(root, lock, handle, live)
        journal.cut_bytes = cut
        return journal

    def append(self, creation: Creation) -> None:
        """Write one record and fsync it: after this returns, a restart finds it."""
        line = json.dumps(creation.to_json(), separators=(",", ":"), sort_keys=True) + "\n"
        self._handle.write(line.encode("utf-8"))
        self._handle.flush()
        os.fsync(self._handle.fileno())

    def close(self) -> None:
        self._handle.close()
        self._lock.close()


def replay(handle: IO[bytes], source: str, live: LiveCluster) -> tuple[LiveCluster, int]:
    """Every record of the journal applied in order; a torn last record is truncated away.
    Returns the live cluster and the number of bytes cut."""
    handle.seek(0)
    data = handle.read()
    lines = data.split(b"\n")
    complete, tail = lines[:-1], lines[-1]  # tail: bytes after the last newline
    good_bytes = 0
    for number, raw in enumerate(complete, start=1):
        try:
            record = Creation.from_json(json.loads(raw.decode("utf-8")))
        except (UnicodeDecodeError, json.JSONDecodeError):
            if number == len(complete) and not tail:
                break  # the last line, garbled by a crash mid-write: never answered
            raise InputError("not a journal record (JSON)", source=source, line=number) from None
        except InputError as exc:
            raise InputError(exc.message, source=source, line=number) from None
        try:
            live = live.with_creation(record)
        except InputError as exc:
            raise InputError(
                f"does not replay onto the snapshot: {exc.message}", source=source, line=number
            ) from None
        good_bytes += len(raw) + 1
    cut = len(data) - good_bytes
    if cut:
        handle.truncate(good_bytes)
        handle.flush()
        os.fsync(handle.fileno())
    handle.seek(0, os.SEEK_END)
    return live, cut
