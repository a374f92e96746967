"""Run logs as JSON lines: appended and flushed one line at a time, so a crash leaves at most a torn
last line (no newline after it), which readers drop (`read_log` says which); any other invalid line
is a one-line error naming the file and line. (User data files are read strictly instead:
`rbctl.tasks.benchmarks`.)"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

from rbctl.errors import UserError
from rbctl.store.faults import inject


def _jsonable(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def append_jsonl(path: Path, record: dict, kind: str | None = None) -> None:
    """Append one line and flush it to disk: a crash leaves at most a torn last line, and a failed
    write (a full disk) is cut back off. `kind` names the write for fault injection (`rbctl.store.faults`)."""
    append_lines(path, json.dumps({k: _jsonable(v) for k, v in record.items()}) + "\n", kind)


def append_lines(path: Path, text: str, kind: str | None = None) -> None:
    """Append `text` (whole lines) and flush it to disk (`append_jsonl`)."""
    data = text.encode()
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


class CorruptLog(UserError):
    """A run log with an invalid line that is not a torn last line: its file and true line number."""

    def __init__(self, path: Path, line: int, problem: str):
        super().__init__(f"{path}: line {line} is not valid JSON ({problem}); the run log is corrupt: "
                         f"repair or delete that line, or train into a new run directory")
        self.path, self.line = Path(path), line


@dataclass
class Log:
    """A run log as read: its complete records, and the torn last line dropped (None when none)."""

    records: list[dict]
    torn: str | None = None  # the text of a last line cut short by a crash (no newline, not parsable)
    torn_line: int | None = None  # its line number

    def torn_step(self) -> int | None:
        """The step a torn line was written for, where its fragment got as far (`{"step": N, ...`)."""
        m = _STEP_PREFIX.match(self.torn or "")
        return int(m.group(1)) if m else None


_STEP_PREFIX = re.compile(r'\s*\{\s*"step"\s*:\s*(\d+)\s*[,}]')


def read_log(path: Path) -> Log:
    """Every record of a run log ([] when absent). A last line without its newline that does not
    parse is a write cut short by a crash: it is dropped and returned as `Log.torn`. Any other
    invalid line is `CorruptLog` (a one-line error naming the file and its line number)."""
    path = Path(path)
    if not path.exists():
        return Log([])
    data = path.read_bytes()
    lines = data.split(b"\n")  # the text after the last newline is lines[-1] ('' when it ends in one)
    out = []
    for i, raw in enumerate(lines):
        if not raw.strip():
            continue
        try:
            out.append(json.loads(raw))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            if i == len(lines) - 1:  # no newline after it: the torn last line of a crash mid-write
                return Log(out, raw.decode("utf-8", errors="replace"), i + 1)
            problem = f"{e.msg} at column {e.colno}" if isinstance(e, json.JSONDecodeError) else "not UTF-8"
            raise CorruptLog(path, i + 1, problem) from None
    return Log(out)


def read_jsonl(path: Path) -> list[dict]:
    """All complete lines; a torn last line is dropped, any other invalid line is `CorruptLog` (`read_log`)."""
    return read_log(path).records


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
