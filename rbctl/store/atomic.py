"""Crash-safe file output: write to a temporary file beside the target, flush, fsync, rename.

A reader (or a resumed run) sees either the old file or the complete new one, never a torn one.
"""

from __future__ import annotations

import errno
import os
import shutil
from contextlib import contextmanager
from pathlib import Path

from rbctl.errors import UserError
from rbctl.store.faults import inject

MiB = 1 << 20


@contextmanager
def atomic_output(path: Path | str):
    """Yield a temporary path to write; on success it replaces `path` atomically, on error it is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_atomic(path: Path | str, data: str | bytes, kind: str | None = None) -> None:
    """Write `data` to `path` atomically; `kind` names the write for fault injection
    (`rbctl.store.faults`: checkpoint, marker, metrics, eval_summary, report, sweep_state)."""
    with atomic_output(path) as tmp:
        if isinstance(data, bytes):
            tmp.write_bytes(data)
        else:
            tmp.write_text(data)
        inject(kind, path)  # after the bytes went to the temporary file: its removal is exercised too


def os_error_advice(code: int | None) -> str:
    """What to do about a failed write, by its errno: permissions, space, or the disk."""
    if code in (errno.EACCES, errno.EPERM):
        return "fix the permissions of that path or write elsewhere"
    if code == errno.EROFS:
        return "the filesystem is read-only: write elsewhere"
    if code in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        return "free space"
    return "check the disk"


def check_writable(directory: Path | str, need_bytes: int = 0, what: str = "output directory") -> None:
    """Refuse, in one line naming it, a folder that cannot be created or written (a file is written,
    flushed and removed there) or that has less than `need_bytes` free: before any work whose
    results it is to hold."""
    directory = Path(directory)
    probe = directory / f".rbctl_write_check.{os.getpid()}"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with open(probe, "wb") as f:
            f.write(b"\0")
            f.flush()
            os.fsync(f.fileno())
        probe.unlink()
    except OSError as e:
        name = errno.errorcode.get(e.errno, e.errno)
        raise UserError(f"{what} {directory} is not writable: {e.strerror or e} ({name}); "
                        f"{os_error_advice(e.errno)}") from None
    free = shutil.disk_usage(directory).free
    if free < need_bytes:
        raise UserError(f"{what} {directory} has {free / MiB:.1f} MiB free and needs about {need_bytes / MiB:.1f} MiB: "
                        "free space or write elsewhere")
