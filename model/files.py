"""Every output file exalloc writes goes through here: whole or not at all.

A file is written to a temporary name in its own folder, flushed to disk, then renamed over
the target (`os.replace`, atomic on POSIX): a reader sees the old file or the new one, never
half of one, whatever kills the process or fills the disk. A set of files that belong together
(`squeeze -S`'s `.original` and `.squeezed`, a report's PNGs and summary) is written the same
way, every temporary before the first rename, so a failure leaves none of the set behind.
A target that is not a regular file (`/dev/stdout`, a FIFO) is written in place: renaming over
a device would replace the device node. Failures are one-line `OutputError`s naming the target.
See docs/reliability.md ("Writes").
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Mapping

from model.errors import OutputError

Content = str | bytes


def _encode(data: Content) -> bytes:
    # surrogateescape: names read from undecodable bytes are written back as they were
    return data if isinstance(data, bytes) else data.encode("utf-8", "surrogateescape")


def _special(path: str) -> bool:
    """True when `path` exists and is not a regular file (a device, a FIFO, a socket)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def _mode_for(path: str) -> int:
    """The mode a new file gets from open(): the target's if it exists, else 0666 - umask."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _fail(path: str, err: OSError) -> OutputError:
    reason = err.strerror or type(err).__name__
    return OutputError(f"cannot write: {reason}", source=path)


def _write_temporary(target: str, data: bytes) -> str:
    """A synced temporary file beside `target` holding `data`; its name."""
    folder = os.path.dirname(target) or "."
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".tmp", dir=folder)
    try:
        os.fchmod(fd, _mode_for(target))
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    os.close(fd)
    return tmp


def _write_in_place(path: str, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)


def _sync_folder(folder: str) -> None:
    """Make the renames durable (a crash right after still shows the new files)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder or ".", os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_files(files: Mapping[str | os.PathLike[str], Content]) -> None:
    """Write every file of a set, all or nothing (see the module docstring)."""
    targets = [(os.fspath(path), _encode(data)) for path, data in files.items()]
    done: list[tuple[str, str]] = []  # (temporary, final target)
    try:
        for path, data in targets:
            if _special(path):
                continue
            # a symlink is followed: the file it names is replaced, the link stays
            final = os.path.realpath(path) if os.path.islink(path) else path
            try:
                done.append((_write_temporary(final, data), final))
            except OSError as err:
                raise _fail(path, err) from None
        for path, data in targets:
            if _special(path):
                try:
                    _write_in_place(path, data)
                except OSError as err:
                    raise _fail(path, err) from None
        while done:
            tmp, final = done[0]
            try:
                os.replace(tmp, final)
            except OSError as err:
                raise _fail(final, err) from None
            done.pop(0)
    finally:
        for tmp, _ in done:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    for folder in {os.path.dirname(os.fspath(p)) for p in files}:
        _sync_folder(folder)


def write_file(path: str | os.PathLike[str], data: Content) -> None:
    """Write one file atomically (see the module docstring)."""
    write_files({path: data})
