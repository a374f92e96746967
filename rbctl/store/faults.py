"""Disk-fault injection for tests and `python -m scripts.faults`: make the n-th write of one kind
fail as a full or failing disk would.

    RBCTL_FAULT="enospc:checkpoint:1"            the 1st checkpoint write fails with ENOSPC
    RBCTL_FAULT="eio:metrics:3,enospc:marker:1"  several faults, comma-separated

Kinds: checkpoint (a checkpoint's files), marker (its COMPLETE marker), metrics (a metrics.jsonl
line), eval_summary (an evaluation's summary.json), report (a report table or page), sweep_state
(a sweep's state.json). Errors: enospc, eio. Writes are counted per process (a sweep's worker
processes count their own). An environment variable, never a config key: nothing in a run's
config can make it fail.
"""

from __future__ import annotations

import errno
import os
from collections import Counter
from pathlib import Path

ENV = "RBCTL_FAULT"
KINDS = ("checkpoint", "marker", "metrics", "eval_summary", "report", "sweep_state")
ERRORS = {"enospc": errno.ENOSPC, "eio": errno.EIO}
_counts: Counter = Counter()


def _plan() -> list[tuple[int, str, int]]:
    out = []
    for item in filter(None, (x.strip() for x in os.environ.get(ENV, "").split(","))):
        try:
            err, kind, nth = item.split(":")
            out.append((ERRORS[err.lower()], kind, int(nth)))
        except (ValueError, KeyError):
            raise ValueError(f"{ENV}: '{item}' is not ERROR:KIND:N with ERROR in {sorted(ERRORS)} "
                             f"and KIND in {list(KINDS)}") from None
        if kind not in KINDS:
            raise ValueError(f"{ENV}: unknown kind '{kind}' (one of {', '.join(KINDS)})")
    return out


def inject(kind: str | None, path: Path | str) -> None:
    """Count one write of `kind` to `path`; raise the planned OSError when this is the n-th."""
    if kind is None or ENV not in os.environ:
        return
    _counts[kind] += 1
    for code, k, nth in _plan():
        if k == kind and _counts[kind] == nth:
            raise OSError(code, os.strerror(code), str(path))
