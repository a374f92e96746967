"""Run logs as JSON lines: appended and flushed one line at a time, so a crash leaves at most a torn
last line, which readers drop. (User data files are read strictly instead: `rbctl.tasks.registry`.)"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from rbctl.store.faults import inject


def _jsonable(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def append_jsonl(path: Path, record: dict, kind: str | None = None) -> None:
    """Append one line and flush it to disk: a crash leaves at most a torn last line, and a failed
    write (a full disk) is cut back off. `kind` names the write for fault injection (`rbctl.store.faults`)."""
    data = (json.dumps({k: _jsonable(v) for k, v in record.items()}) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        try:
            cut = len(data) // 2 if kind is not None else len(data)
            _write_all(fd, data[:cut])
            inject(kind, path)  # an injected fault lands mid-line, as a full disk would
            _write_all(fd, data[cut:])
            os.fsync(fd)
        except OSError:
            try:
                os.ftruncate(fd, size)  # no torn line left behind
            except OSError:
                pass  # readers drop a torn last line anyway
            raise
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def read_jsonl(path: Path) -> list[dict]:
    """All complete lines; a torn (unparsable) last line is dropped."""
    if not Path(path).exists():
        return []
    out = []
    lines = Path(path).read_text().splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                break  # torn last line from a crash
            raise
    return out


def truncate_jsonl(path: Path, keep) -> None:
    """Rewrite `path` atomically keeping the records for which keep(record) is true."""
    path = Path(path)
    if not path.exists():
        return
    records = [r for r in read_jsonl(path) if keep(r)]
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
