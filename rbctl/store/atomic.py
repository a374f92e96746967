"""Crash-safe file output: write to a temporary file beside the target, flush, fsync, rename.

A reader (or a resumed run) sees either the old file or the complete new one, never a torn one.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

from rbctl.store.faults import inject


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
