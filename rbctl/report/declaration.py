"""When each declaration a document reads came into force, from the version histories rbctl keeps in
the sweep directory (`rbctl.store.history`) and the runs' own records (docs/method.md, "What a sweep
directory records"). A family, margin or claim is "declared before any run in this directory
finished" only when all of these hold:

- the history's hash chain checks (`rbctl.store.history.chain_problem`; a line edited by hand breaks
  it: "history chain broken at line k", and nothing is then declared);
- for a sweep file, the resolved ``sweep.yaml`` the report reads is the latest recorded version (what
  the report reads of it: the comparisons and the escape setting): a ``sweep.yaml`` edited after its
  last start says "sweep.yaml differs from every recorded version" and declares nothing;
- the version that first stated the value, unchanged since, was recorded when no run of the
  directory was recorded done (state.json), and no run that has results on disk had started before
  it by its own provenance (``provenance.json``'s ``started``; a run copied in from elsewhere keeps
  it), and every run with results records when it started.

The declaration of a key (a dotted path into the file's data: ``comparisons.margin``,
``comparisons.families.budget``, ``claims.NAME``) is the earliest recorded version from which the
key's value equals its value in the version in force, in every version since. Also the write side of
a study's history (`declare_study`), which `rbctl report STUDY.yaml` runs.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from rbctl.report.sources import is_manifest
from rbctl.store.history import chain_problem, content_sha256, legacy_lines, read_history, record_version
from rbctl.store.read import read_json, read_sweep_file, read_sweep_state
from rbctl.store.rundir import (EVAL_DIR, EVAL_LINES, METRICS, PROVENANCE, SUMMARY, SWEEP_FILE, SWEEP_HISTORY,
                                study_history_path, sweep_runs)

_MISSING = object()  # a key a version does not have


@dataclass(frozen=True)
class Declaration:
    """When ``key`` took the value it has now: the time its version was first seen, how many of how
    many runs were recorded done then (state.json), how many runs with results had started before it by
    their own provenance (``started_before``) or record no start (``unknown_start``), and whether the
    records show it in force before any run finished (None: not recorded). ``absent``: the version in
    force has no such key. ``problem``: why the records declare nothing (a broken chain, a sweep.yaml no
    record holds). ``legacy``: the history has lines written before records were chained. ``earlier``:
    the study file says it was written after an earlier run set's results (`rbctl.config.study`,
    ``written_after_results``). ``sha256``: the version's hash, what a document names it by."""

    key: str
    first_seen: str | None
    finished_before: int | None
    total: int | None
    in_force_before_first: bool | None
    absent: bool = False
    sha256: str | None = None
    started_before: int = 0
    unknown_start: int = 0
    problem: str = ""
    legacy: bool = False
    earlier: bool = False
    where: str = "in this directory"  # whose runs the record counts (a manifest's: "of this manifest, by their own clocks")

    @property
    def text(self) -> str:
        earlier = "declared after an earlier run set's results (the study file says so); " * self.earlier
        return earlier + self._record_text()

    def _record_text(self) -> str:
        """What this directory's records show."""
        if self.problem:
            return f"{self.problem}: treated as undeclared"
        if self.absent:
            return f"not declared (no {self.key} in the recorded file)"
        if self.first_seen is None:
            return f"no declaration record {self.where}"
        legacy = " (a history kept before records were chained: an edit to its early lines would not show)" * self.legacy
        if self.in_force_before_first is None:
            return (f"first recorded after {self.finished_before} of {self.total} runs had finished: whether it was in "
                    f"force before them is not recorded{legacy}")
        if self.in_force_before_first:
            return f"declared before any run {self.where} finished{legacy}"
        done = self.finished_before or 0
        parts = [f"declared after {done} of {self.total} runs had finished"] if done else []
        if self.started_before > done:
            parts.append(f"{self.started_before} run{'s' * (self.started_before != 1)} with results on disk had started "
                         "before this version by their provenance")
        if self.unknown_start:
            parts.append(f"{self.unknown_start} run{'s' * (self.unknown_start != 1)} with results on disk record no "
                         "start time")
        if not done:
            parts[0] = "declared after results existed: " + parts[0]
        return "; ".join(parts) + legacy

    def but(self, **changes) -> "Declaration":
        return replace(self, **changes)


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


# --- the runs' own records ------------------------------------------------------------------------------


def _time(text) -> dt.datetime | None:
    """An ISO time with its zone (``2026-12-04T21:40:12Z``, ``…+0100``) as UTC; None for anything else
    (a time without a zone is not comparable with the history's UTC)."""
    try:
        t = dt.datetime.fromisoformat(str(text))
    except ValueError:
        return None
    return t.astimezone(dt.timezone.utc) if t.tzinfo is not None else None


def _has_results(run: Path) -> bool:
    """A run folder with something a report reads: logged steps, periodic evaluations, an evaluation."""
    return any((run / name).is_file() and (run / name).stat().st_size > 0 for name in (METRICS, EVAL_LINES)) or \
        any((run / EVAL_DIR).rglob(SUMMARY))


def run_starts(sweep_dir: Path) -> list[dt.datetime | None]:
    """The start time (provenance.json ``started``, UTC) of every run under ``SWEEP/runs`` that has
    results on disk (None: it records none); [] for a runs manifest or a directory without runs."""
    if is_manifest(Path(sweep_dir)) or not Path(sweep_dir).is_dir():
        return []
    out = []
    for _, run in sweep_runs(Path(sweep_dir)):
        if _has_results(run):
            header = read_json(run / PROVENANCE) if (run / PROVENANCE).is_file() else {}
            out.append(_time(header.get("started")) if isinstance(header, dict) else None)
    return out


def declaration_of(history: list[dict], key: str, value_of: Callable[[dict], Any] | None = None,
                   kept_from_start: bool = True, starts: list | None = None) -> Declaration:
    """The declaration of ``key`` over ``history`` (oldest first; its last line the version in force);
    ``value_of(content)`` computes the value compared across versions (default: the value at
    ``key``). ``kept_from_start``: the history is written when the directory's first run starts (a
    sweep's, by `rbctl ablate`), so a first record made after runs had finished means the directory
    predates it and that version's declaration time is unknown; a study's history starts whenever the
    study is first declared or reported, which is its declaration. ``starts``: the start times of the
    directory's runs with results (`run_starts`)."""
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
    seen = _time(h.get("first_seen"))
    starts = starts or []
    early = sum(1 for t in starts if t is not None and seen is not None and t < seen)
    unknown = sum(1 for t in starts if t is None)
    # the first record made after runs had finished: the directory predates its history, so whether
    # this value was in force before them is not known
    if finished is None or (kept_from_start and i == 0 and finished > 0):
        before = None
    else:
        before = finished == 0 and early == 0 and unknown == 0
    return Declaration(key, h.get("first_seen"), finished, h.get("runs_total"), before, sha256=h.get("sha256"),
                       started_before=early, unknown_start=unknown, legacy=bool(legacy_lines(history)))


# --- the sweep file -------------------------------------------------------------------------------------


def _within(comparisons: dict, arms: list[str]) -> dict | None:
    """A sweep file's comparisons cut to ``arms`` as `rbctl ablate --arms` cuts them (the pairs within
    them; no principal family left: none)."""
    within = lambda pairs: [p for p in pairs or [] if all(a in arms for a in p)]  # noqa: E731
    out = {**comparisons, "principal": within(comparisons.get("principal"))}
    if "families" in out:
        fams = {n: {**f, "pairs": within(f.get("pairs"))} for n, f in (out.get("families") or {}).items()}
        out["families"] = {n: f for n, f in fams.items() if f["pairs"]}
    return out if out["principal"] else None


def _normal(raw, schema):
    from pydantic import ValidationError

    if not isinstance(raw, dict):
        return raw
    try:
        return schema.model_validate(raw).model_dump(mode="json")
    except ValidationError:  # a version an older schema wrote: compared as written
        return raw


def report_view(sweep: dict, arms: list[str] | None) -> str:
    """The hash of what the report reads of a sweep file (its comparisons, cut to ``arms`` as a
    selection cuts them, and its escape setting), each as validated."""
    from rbctl.config.sweep import Comparisons, Escape

    comps = sweep.get("comparisons")
    if arms is not None and isinstance(comps, dict):
        comps = _within(comps, arms)
    return content_sha256({"comparisons": _normal(comps, Comparisons), "escape": _normal(sweep.get("escape"), Escape)})


def sweep_file_problem(sweep_dir: Path, history: list[dict]) -> str:
    """"" when the directory's sweep.yaml is the latest recorded version (what the report reads of it),
    else the one line that says it is not."""
    sweep = read_sweep_file(Path(sweep_dir))
    if not sweep or not history:
        return ""
    arms = list(sweep["arms"]) if isinstance(sweep.get("arms"), dict) else None
    mine = report_view(sweep, arms)
    views = [report_view(h.get("content") or {}, arms) for h in history]
    if views[-1] == mine:
        return ""
    if mine in views:
        last = len(views) - 1 - views[::-1].index(mine)
        return f"{SWEEP_FILE} is recorded version {last + 1} of {len(views)}, not the latest"
    return f"{SWEEP_FILE} differs from every recorded version"


def _sweep_history(sweep_dir: Path) -> tuple[list[dict], str]:
    history = read_history(Path(sweep_dir) / SWEEP_HISTORY)
    return history, chain_problem(history) or sweep_file_problem(sweep_dir, history)


def manifest_sentence(manifests: list[Path], family: str) -> str:
    """The declaration line of a family of runs manifests, from each one's history
    (`rbctl.report.sources.declare`: recorded by `rbctl report`, runs counted by their own end times)."""
    from rbctl.report.sources.declare import history_path

    def one(path: Path) -> str:
        d = family_declaration(path, family)
        if d.first_seen is None and not d.absent:
            return f"no declaration record (`rbctl report {path}` records one)"
        return d.text + (f" (manifest version `{d.sha256[:7]}`, first seen {d.first_seen})" if d.sha256 else "")

    texts = [(p, one(p)) for p in manifests]
    if len(texts) == 1:
        return f"Declaration (recorded by rbctl report in {history_path(texts[0][0])}, runs counted by their own clocks): {texts[0][1]}."
    return "Declaration (recorded by rbctl report beside each manifest): " + "; ".join(f"`{p}`: {t}" for p, t in texts) + "."


def sweep_declaration(sweep_dir: Path, key: str) -> Declaration:
    """The declaration of ``key`` of the sweep file, from ``SWEEP/sweep_history.jsonl``."""
    history, problem = _sweep_history(sweep_dir)
    if problem:
        return Declaration(key, None, None, None, None, problem=problem)
    return declaration_of(history, key, starts=run_starts(sweep_dir))


def family_declaration(sweep_dir: Path, family: str) -> Declaration:
    """The declaration of a family of the sweep file (``principal`` or a name under
    ``comparisons.families``) as the report calls it: every value it resolves to (its pairs, metric,
    benchmark, α, margin and design, with the principal family's values where it leaves a key null,
    `rbctl.config.sweep.Comparisons.families_declared`) unchanged since that version."""
    from rbctl.config.sweep import PRINCIPAL_FAMILY

    key = "comparisons.principal" if family == PRINCIPAL_FAMILY else f"comparisons.families.{family}"
    if is_manifest(sweep_dir):  # a runs manifest's history: its first report is its declaration
        from rbctl.report.sources import read_manifest
        from rbctl.report.sources.declare import manifest_history

        history = manifest_history(sweep_dir, read_manifest(sweep_dir))
        problem = chain_problem(history)
        if problem:
            return Declaration(key, None, None, None, None, problem=problem)
        return declaration_of(history, key, lambda c: _resolved_family(c, family),
                              kept_from_start=False).but(where="of this manifest (by the runs' own clocks)")
    history, problem = _sweep_history(sweep_dir)
    if problem:
        return Declaration(key, None, None, None, None, problem=problem)
    return declaration_of(history, key, lambda c: _resolved_family(c, family), starts=run_starts(sweep_dir))


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


def declaration_sentence(dirs: list[Path], family: str) -> str:
    """The report's line on when a family of the sweep file was declared (`family_declaration`), for
    the sweep directories its runs come from: ``Declaration (recorded by rbctl ablate): declared
    before any run in this directory finished (sweep-file version `1a2b3c4`, first seen 2026-12-04T21:40:12Z).``
    A runs manifest's is recorded by `rbctl report` (`manifest_sentence`)."""
    def one(d: Declaration) -> str:
        where = f" (sweep-file version `{d.sha256[:7]}`, first seen {d.first_seen})" if d.sha256 else ""
        return d.text + where

    dirs = list(dict.fromkeys(Path(d) for d in dirs))
    if not dirs:
        return "Declaration: no sweep directory, so no declaration record."
    if all(is_manifest(d) for d in dirs):
        return manifest_sentence(dirs, family)
    found = [(d, family_declaration(d, family)) for d in dirs]
    if len(found) == 1:
        return f"Declaration (recorded by rbctl ablate in {SWEEP_HISTORY}): {one(found[0][1])}."
    return (f"Declaration (recorded by rbctl ablate in each sweep's {SWEEP_HISTORY}): "
            + "; ".join(f"`{d}`: {one(x)}" for d, x in found) + ".")


# --- the study file --------------------------------------------------------------------------------------


def study_declaration(study_path: Path, sweep_dir: Path, key: str, content: dict | None = None) -> Declaration:
    """The declaration of ``key`` of a study file (``claims.NAME``, ``families.NAME``) as recorded in
    one sweep directory it reads (``SWEEP/study_history/<study>.jsonl``, `declare_study`). ``content``:
    the study file's data as the document reads it; a version no record holds declares nothing."""
    history = read_history(study_history_path(sweep_dir, study_name(study_path)))
    problem = chain_problem(history)
    if not problem and content is not None and history and history[-1].get("sha256") != content_sha256(content):
        problem = "the study file differs from every recorded version" if all(
            h.get("sha256") != content_sha256(content) for h in history) else "the study file is not the latest recorded version"
    if problem:
        return Declaration(key, None, None, None, None, problem=problem)
    return declaration_of(history, key, kept_from_start=False, starts=run_starts(sweep_dir))


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
