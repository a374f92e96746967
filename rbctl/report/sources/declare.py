"""The declaration of a runs manifest, recorded like a sweep's (`rbctl.store.history`, read by
`rbctl.report.declaration`): the first `rbctl report MANIFEST` of each version of the manifest (or
`rbctl report MANIFEST --declare`, before the runs exist) appends that version to
``<manifest>.history.jsonl`` beside it. rbctl did not run the runs, so what counts is their own
clocks: a run finished before a version when it ended (`Run.provenance`'s ``ended``: its last
logged timestamp, else its files' modification time) before the version was first seen, counted
anew at each report (a run copied in later with an earlier end is counted as finished before)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from rbctl.config.manifest import RunsManifest
from rbctl.config.sweep import version_content
from rbctl.errors import UserError
from rbctl.report.sources.readers import Readers
from rbctl.report.sources.safe_read import NoRecords
from rbctl.store.history import read_history, record_version

HISTORY_SUFFIX = ".history.jsonl"


def history_path(manifest: Path) -> Path:
    """``configs/runs_trl.yaml`` -> ``configs/runs_trl.history.jsonl``."""
    manifest = Path(manifest)
    return manifest.with_name(manifest.stem + HISTORY_SUFFIX)


def end_times(m: RunsManifest) -> list[float | None]:
    """When each run the manifest names ended, by its own clock: None for a run that is not there
    or has not finished (a W&B run without an exit record, an MLflow run not FINISHED, a TRL run
    short of max_steps), else its end (seconds since the epoch)."""
    readers, out = Readers(m), []
    for entry in m.entries():
        try:
            found = readers.records(entry)
        except NoRecords:
            found = None
        meta = found[2] if found is not None else {}
        out.append(None if found is None or meta.get("finished") is False else float(meta.get("ended") or 0.0))
    return out


def _epoch(stamp: str) -> float:
    return dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc).timestamp()


def declare_manifest(path: Path, m: RunsManifest) -> dict | None:
    """Record the manifest's version (its validated data) unless it is the latest recorded; the
    record written, or None. Its runs finished are those ended by now."""
    ends = end_times(m)
    done = sum(1 for e in ends if e is not None)
    content = version_content(m.model_dump(mode="json"), RunsManifest.LATE_KEYS)  # no report: the version as before it
    return record_version(history_path(path), content, str(path), done, len(ends))


def manifest_history(path: Path, m: RunsManifest) -> list[dict]:
    """The manifest's recorded versions, each with its runs finished counted by the runs' own end
    times against the version's first-seen time (the module docstring)."""
    history = read_history(history_path(path))
    if not history:
        return []
    ends = end_times(m)
    out = []
    for h in history:
        try:
            seen = _epoch(h["first_seen"])
        except (KeyError, TypeError, ValueError):
            raise UserError(f"{history_path(path)}: a version without a readable first_seen time") from None
        finished = sum(1 for e in ends if e is not None and e < seen)
        out.append({**h, "runs_finished": finished, "runs_total": len(ends)})
    return out


def declare_manifests(paths: list[Path]) -> list[str]:
    """`declare_manifest` for each runs manifest of ``paths`` (validated first: an invalid one is a
    one-line error and records nothing); a line per manifest saying what was recorded."""
    from rbctl.report.sources import is_manifest, read_manifest

    out = []
    for path in (Path(p) for p in paths if is_manifest(p)):
        record = declare_manifest(path, read_manifest(path))
        out.append(f"declared: {history_path(path)} ({record['runs_finished']} of {record['runs_total']} runs finished)"
                   if record is not None else f"{path}: this version is recorded already ({history_path(path)})")
    return out
