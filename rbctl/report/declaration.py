"""When each declaration a document reads came into force, from the version histories rbctl keeps in
the sweep directory (`rbctl.store.history`): a family, margin or claim is "declared before the first
result" only when the version of the file that first stated it, unchanged since, was recorded before
any run of the sweep had finished (docs/method.md, "What a sweep directory records").

The declaration of a key (a dotted path into the file's data: ``comparisons.margin``,
``comparisons.families.budget``, ``claims.NAME``) is the earliest recorded version from which the
key's value equals its value in the latest version in every version up to the latest; its
``runs_finished`` says how many runs had finished when it was first seen. Also the write side of a
study's history (`declare_study`), which `rbctl report STUDY.yaml` runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from rbctl.report.sources import is_manifest
from rbctl.store.history import read_history, record_version
from rbctl.store.read import read_sweep_state
from rbctl.store.rundir import SWEEP_HISTORY, study_history_path

_MISSING = object()  # a key a version does not have


@dataclass(frozen=True)
class Declaration:
    """When ``key`` took the value it has now: the time its version was first seen, how many of how
    many runs had finished then, and whether that was before the first result (None: no record).
    ``absent``: the latest version has no such key (nothing is declared). ``sha256``: the version's
    hash (`rbctl.store.history.content_sha256`), what a document names the version by."""

    key: str
    first_seen: str | None
    finished_before: int | None
    total: int | None
    in_force_before_first: bool | None
    absent: bool = False
    sha256: str | None = None

    @property
    def text(self) -> str:
        if self.absent:
            return f"not declared (no {self.key} in the recorded file)"
        if self.in_force_before_first is None and self.finished_before:
            return (f"first recorded after {self.finished_before} of {self.total} runs had finished (the sweep "
                    "started before rbctl kept a record, so when it was declared is unknown)")
        if self.in_force_before_first is None:
            return "no declaration record (sweep run before rbctl kept one)"
        if self.in_force_before_first:
            return "declared before the first result"
        return f"declared after {self.finished_before} of {self.total} runs had finished"


def lookup(data: Any, key: str) -> Any:
    """The value at dotted ``key`` in nested dicts, or `_MISSING`. A name that itself holds dots (a
    family ``a.b``) is found: at each level the longest run of parts that is a key is taken."""
    parts = key.split(".") if key else []
    while parts:
        if not isinstance(data, dict):
            return _MISSING
        for n in range(len(parts), 0, -1):
            name = ".".join(parts[:n])
            if name in data:
                data, parts = data[name], parts[n:]
                break
        else:
            return _MISSING
    return data


def declaration_of(history: list[dict], key: str, value_of: Callable[[dict], Any] | None = None,
                   kept_from_start: bool = True) -> Declaration:
    """The declaration of ``key`` over ``history`` (oldest first); ``value_of(content)`` computes the
    value compared across versions (default: the value at ``key``). ``kept_from_start``: the history
    is written when the directory's first run starts (a sweep's, by `rbctl ablate`), so a first
    record made after runs had finished means the directory predates it and that version's
    declaration time is unknown; a study's history starts whenever the study is first declared or
    reported, which is its declaration."""
    value_of = value_of or (lambda content: lookup(content, key))
    if not history:
        return Declaration(key, None, None, None, None)
    values = [value_of(h.get("content") or {}) for h in history]
    if values[-1] is _MISSING:
        return Declaration(key, None, None, None, None, absent=True)
    i = len(values) - 1
    while i > 0 and values[i - 1] == values[-1]:
        i -= 1
    h = history[i]
    finished = h.get("runs_finished")
    # the first record made after runs had finished: the directory predates its history, so whether
    # this value was in force before them is not known
    before = None if finished is None or (kept_from_start and i == 0 and finished > 0) else finished == 0
    return Declaration(key, h.get("first_seen"), finished, h.get("runs_total"), before, sha256=h.get("sha256"))


def declaration_sentence(dirs: list[Path], family: str) -> str:
    """The report's line on when a family of the sweep file was declared (`family_declaration`), for
    the sweep directories its runs come from: ``Declaration (recorded by rbctl ablate): declared
    before the first result (sweep-file version `1a2b3c4`, first seen 2026-12-04T21:40:12Z).``"""
    def one(d: Declaration) -> str:
        where = f" (sweep-file version `{d.sha256[:7]}`, first seen {d.first_seen})" if d.sha256 else ""
        return d.text + where

    dirs = list(dict.fromkeys(Path(d) for d in dirs))
    if not dirs:
        return "Declaration: no sweep directory, so no declaration record."
    found = [(d, family_declaration(d, family)) for d in dirs]
    if len(found) == 1:
        return f"Declaration (recorded by rbctl ablate in {SWEEP_HISTORY}): {one(found[0][1])}."
    return (f"Declaration (recorded by rbctl ablate in each sweep's {SWEEP_HISTORY}): "
            + "; ".join(f"`{d}`: {one(x)}" for d, x in found) + ".")


def sweep_declaration(sweep_dir: Path, key: str) -> Declaration:
    """The declaration of ``key`` of the sweep file, from ``SWEEP/sweep_history.jsonl``."""
    return declaration_of(read_history(Path(sweep_dir) / SWEEP_HISTORY), key)


def family_declaration(sweep_dir: Path, family: str) -> Declaration:
    """The declaration of a family of the sweep file (``principal`` or a name under
    ``comparisons.families``) as the report calls it: every value it resolves to (its pairs, metric,
    benchmark, α, margin and design, with the principal family's values where it leaves a key null,
    `rbctl.config.sweep.Comparisons.families_declared`) unchanged since that version."""
    from rbctl.config.sweep import PRINCIPAL_FAMILY

    key = "comparisons.principal" if family == PRINCIPAL_FAMILY else f"comparisons.families.{family}"
    return declaration_of(read_history(Path(sweep_dir) / SWEEP_HISTORY), key, lambda c: _resolved_family(c, family))


def _resolved_family(content: dict, family: str):
    from pydantic import ValidationError

    from rbctl.config.sweep import Comparisons

    raw = content.get("comparisons")
    if not isinstance(raw, dict):
        return _MISSING
    try:
        specs = Comparisons.model_validate(raw).families_declared()
    except ValidationError:  # a version an older schema wrote: compared as written
        return lookup(raw, "principal" if family == "principal" else f"families.{family}")
    spec = next((s for s in specs if s.name == family), None)
    return _MISSING if spec is None else spec


def study_declaration(study_path: Path, sweep_dir: Path, key: str) -> Declaration:
    """The declaration of ``key`` of a study file (``claims.NAME``, ``families.NAME``) as recorded in
    one sweep directory it reads (``SWEEP/study_history/<study>.jsonl``, `declare_study`)."""
    return declaration_of(read_history(study_history_path(sweep_dir, study_name(study_path))), key,
                          kept_from_start=False)


def study_name(study_path: Path) -> str:
    """The name a study's history goes by: its file name without .yaml (the file, not its `name:`,
    is what was declared; two studies may share a `name:`)."""
    return Path(study_path).stem


def runs_finished(sweep_dir: Path) -> tuple[int, int]:
    """(runs recorded done, all runs) of a sweep directory's state.json ((0, 0) without one)."""
    runs = read_sweep_state(sweep_dir) if Path(sweep_dir).is_dir() else {}
    return sum(1 for r in runs.values() if (r or {}).get("status") == "done"), len(runs)


def declare_study(study_path: Path, content: dict, sweep_dirs: list[Path], create: bool = True) -> list[Path]:
    """Record the study file's version ``content`` (its validated data) in every sweep directory it
    reads, each with that directory's finished runs; return the history files a new version was
    written to. ``create``: make a directory that does not exist yet (a study declared before its
    sweeps run, `rbctl report STUDY.yaml --declare`); otherwise (reporting it) such a directory is
    skipped, so a report does not leave folders that look like sweeps."""
    written = []
    for d in dict.fromkeys(Path(d) for d in sweep_dirs):
        if is_manifest(d):  # a runs manifest: runs trained elsewhere, no sweep directory to record in
            continue
        if not create and not d.is_dir():
            continue
        done, total = runs_finished(d)
        path = study_history_path(d, study_name(study_path))
        if record_version(path, content, str(study_path), done, total) is not None:
            written.append(path)
    return written


def study_sweep_dirs(cfg) -> list[Path]:
    """Every sweep directory a study reads (`rbctl.config.study.StudyConfig`): testbeds, long
    horizons, settings sweeps and the main job."""
    dirs = [*cfg.testbeds.values(), *(lh.dir for lh in cfg.long.values()), *(s.dir for s in cfg.selection.values())]
    return [Path(d) for d in dict.fromkeys(dirs + ([cfg.main.dir] if cfg.main else []))]


def declare_study_file(study_path: Path, create: bool = True) -> list[Path]:
    """`declare_study` for the study file at ``study_path`` (validated first: an invalid file is a
    one-line error and records nothing)."""
    from rbctl.config.base import read_yaml, validate
    from rbctl.config.study import StudyConfig

    cfg = validate(StudyConfig, read_yaml(Path(study_path)), str(study_path))
    return declare_study(Path(study_path), cfg.model_dump(mode="json"), study_sweep_dirs(cfg), create)
