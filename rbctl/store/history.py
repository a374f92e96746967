"""Version histories of the files a sweep directory's results are read under, kept by rbctl itself so
that "declared before running" is a record, not a sentence (docs/method.md, "What a sweep directory
records"): ``SWEEP/sweep_history.jsonl``, every version of the sweep file `rbctl ablate` started or
resumed the directory under, and ``SWEEP/study_history/<study>.jsonl``, every version of a study
file recorded when the study was reported or declared (`rbctl report STUDY.yaml [--declare]`).

One JSON line per version::

    {"sha256": ..., "first_seen": "2026-12-04T21:40:12Z", "runs_finished": 1, "runs_total": 4,
     "source": "configs/ablate_x.yaml", "content": {... the file's data ...}}

``content`` is the file as validated (its schema's defaults filled in, no comments or layout), so a
reworded comment is no new version and two versions compare key by key; ``sha256`` is the hash of
``content`` as canonical JSON (sorted keys, no spaces). A version is appended when it differs from
the latest one recorded (a file edited back to an earlier version is recorded again, at that
time: the latest line is always the version in force). ``runs_finished`` / ``runs_total``: the
sweep directory's runs recorded done, and all its runs, at that moment.

The records are **hash-chained**: each line also holds ``prev``, the ``chain`` hash of the line before
it (None on the first; a line written before records were chained is hashed whole), and ``chain``,
the sha256 of the line itself without ``chain`` as canonical JSON. `chain_problem` checks every
line on read: a line edited by hand (a ``runs_finished`` set to 0, a ``content`` changed with its
``sha256`` left stale) or deleted breaks the chain at that line. It is no signature: someone who
recomputes every hash after an edit is not detected. A history written before records were
chained still reads, its unchained lines checked only against their ``sha256`` (`legacy_lines`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path

from rbctl.store.jsonl import append_jsonl, read_jsonl


def content_sha256(content: dict) -> str:
    """The sha256 of ``content`` as canonical JSON (sorted keys, no whitespace)."""
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def utc_now() -> str:
    """The time now in UTC, ISO 8601 to the second: ``2026-12-04T21:40:12Z``."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def read_history(path: Path) -> list[dict]:
    """The recorded versions, oldest first ([] when there is no history file)."""
    return read_jsonl(Path(path))


def line_hash(record: dict) -> str:
    """The sha256 of a history line without its own ``chain`` field, as canonical JSON: what the next
    line's ``prev`` holds (a line written before chaining is hashed whole, having no ``chain``)."""
    return content_sha256({k: v for k, v in record.items() if k != "chain"})


def chain_problem(history: list[dict]) -> str | None:
    """"history chain broken at line k" for the first line whose ``content`` does not hash to its
    ``sha256``, whose ``chain`` is not its own hash, or whose ``prev`` is not the line before it (a
    chained line after unchained ones covers them); None when every line checks."""
    prev = None
    for i, h in enumerate(history, 1):
        if not isinstance(h, dict) or content_sha256(h.get("content") or {}) != h.get("sha256"):
            return f"history chain broken at line {i}"
        chained = "chain" in h
        if chained and (h["chain"] != line_hash(h) or h.get("prev") != (prev if i > 1 else None)):
            return f"history chain broken at line {i}"
        if not chained and any("chain" in x for x in history[:i - 1]):
            return f"history chain broken at line {i}"  # an unchained line after chained ones: written by hand
        prev = h["chain"] if chained else line_hash(h)
    return None


def legacy_lines(history: list[dict]) -> int:
    """How many lines were written before records were chained (edits to them are detectable only
    where a later chained line covers them)."""
    return sum(1 for h in history if "chain" not in h)


def record_version(path: Path, content: dict, source: str, runs_finished: int, runs_total: int,
                   now: str | None = None) -> dict | None:
    """Append the version ``content`` to the history at ``path`` unless it is the latest one recorded;
    return the record written (None when nothing was). ``now`` (UTC, ISO) is for tests."""
    path = Path(path)
    sha = content_sha256(content)
    history = read_history(path)
    if history and history[-1].get("sha256") == sha:
        return None
    record = {"sha256": sha, "first_seen": now or utc_now(), "runs_finished": int(runs_finished),
              "runs_total": int(runs_total), "source": str(source), "content": content,
              "prev": (history[-1].get("chain") or line_hash(history[-1])) if history else None}
    record["chain"] = line_hash(record)
    path.parent.mkdir(parents=True, exist_ok=True)
    append_jsonl(path, record)
    return record


def changed_keys(old: dict, new: dict, prefix: str = "") -> list[str]:
    """The dotted keys whose values differ between two versions' contents (a nested dict compared key
    by key; anything else as a whole), in ``new``'s order, then those only ``old`` has."""
    out = []
    for k in [*new, *(k for k in old if k not in new)]:
        a, b = old.get(k, _ABSENT), new.get(k, _ABSENT)
        if isinstance(a, dict) and isinstance(b, dict):
            out += changed_keys(a, b, f"{prefix}{k}.")
        elif a != b:
            out.append(prefix + k)
    return out


_ABSENT = object()
