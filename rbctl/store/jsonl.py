"""Run logs as JSON lines: appended and flushed one line at a time, so a crash leaves at most a torn
last line, which readers drop. (User data files are read strictly instead: `rbctl.tasks.registry`.)"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path


def _jsonable(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def append_jsonl(path: Path, record: dict) -> None:
    """Append one line and flush it to disk: a crash leaves at most a torn last line."""
    with open(path, "a") as f:
        f.write(json.dumps({k: _jsonable(v) for k, v in record.items()}) + "\n")
        f.flush()
        os.fsync(f.fileno())


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
