"""Finding runs and sweeps on disk and reading them (through `rbctl.store.read`; no statistics here).

A run directory (`rbctl.store.rundir`) gives the metrics log, run.json (arm, seed, baseline,
variant, warm start), the resolved config, the periodic held-out evaluation (one line per (step,
benchmark); step 0 is the warm start), its final evaluation (the one its config or sweep declares,
at its last step) and its side evaluations (`rbctl eval` under other protocols: named, never scored). A sweep directory holds
``runs/<arm>/seed_<s>/`` or, crossing warm starts, ``runs/<arm>/<warm start>/seed_<s>/``, its
state file, its resolved sweep file, and optionally a ceiling file (read by `rbctl.report.analyses.plateau`).
A runs manifest (`rbctl.config.manifest`) goes wherever a sweep directory goes: its runs, trained with
TRL, verl or any tracker, are read by `rbctl.report.sources` into the same `Run`, the manifest playing
the sweep file's part (``Run.sweep_dir`` is the manifest's path). A folder holding no rbctl run but
another framework's runs (TRL, verl, W&B, MLflow, TensorBoard) is read as the manifest
`rbctl.report.sources.detect` makes for it (then ``Run.sweep_dir`` is the folder).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from rbctl.config.base import validate
from rbctl.config.sweep import Comparisons, Escape, ReportBlock, arm_variant
from rbctl.errors import UserError
from rbctl.report import sources
from rbctl.report.runs import Issue, Run, unit_label  # noqa: F401  (the report's modules import them from here)
from rbctl.store import read
from rbctl.store.rundir import METRICS, REPORT_DIR, SWEEP_FILE, SWEEP_RUNS, seed_of

SEARCH_DEPTH = 3  # levels below an input directory searched for runs and sweeps


def load_run(path: Path, sweep: str | None = None, status: str = "", sweep_dir: Path | None = None) -> Run:
    """Read one run directory (`rbctl.store.read.read_run`). Without run.json the arm, warm start and
    seed come from the sweep layout (``<arm>/seed_<s>`` or ``<arm>/<ws>/seed_<s>`` below runs/, the
    directory's own name otherwise) and the variant from the config."""
    path = Path(path)
    data = read.read_run(path, periodic_final=sweep_dir is None)  # a loose run: its last periodic evaluation may be final
    info, cfg = data["meta"], data["config"]
    algo = cfg.get("algo") or {}
    seed_dir = seed_of(path.name)
    below = path.relative_to(sweep_dir / SWEEP_RUNS).parts if sweep_dir is not None else ()
    deep = seed_dir is not None and len(below) == 3  # <arm>/<warm start>/seed_<s>
    default_arm = (path.parent.parent.name if deep else path.parent.name) if seed_dir is not None else path.name
    seed = info.get("seed", cfg.get("seed"))
    if seed is None:
        seed = seed_dir if seed_dir is not None else 0
    g = (cfg.get("rollout") or {}).get("group_size")
    ws = info.get("warm_start") or (path.parent.name if deep else None)
    return Run(
        path=path,
        arm=str(info.get("arm") or default_arm),
        seed=int(seed),
        baseline=str(info.get("baseline") or algo.get("estimator") or "unknown"),
        variant=str(info.get("variant") or arm_variant(algo, cfg.get("rollout"))),
        sweep=info.get("sweep") or sweep,
        status=status,
        config_steps=cfg.get("steps"),
        metrics=data["metrics"],
        evals=data["evals"],
        final_step=data["final_step"],
        finals=data["finals"],
        side_evals=data["side_evals"],
        group_size=int(g) if isinstance(g, int) else None,
        sweep_dir=sweep_dir,
        warm_start=str(ws) if ws else None,
        config=cfg,
        provenance=data["provenance"],
    )


def load_sweep(sweep: Path) -> tuple[list[Run], list[Issue]]:
    """The runs of one sweep directory, and the runs its state file names as not done or missing."""
    sweep = Path(sweep)
    state = read.read_sweep_state(sweep)
    runs, issues, on_disk = [], [], set()
    for key, run_dir in read.sweep_run_dirs(sweep):
        on_disk.add(key)
        runs.append(load_run(run_dir, sweep=sweep.name, status=(state.get(key) or {}).get("status", ""),
                             sweep_dir=sweep))
    for key, entry in sorted(state.items()):
        entry = entry or {}
        status = entry.get("status", "unknown")
        if status != "done":
            kept = " (its logged steps are included)" if key in on_disk else ""
            issues.append(Issue(f"{sweep.name}/{key}", status, (entry.get("error") or "") + kept))
        elif key not in on_disk:
            issues.append(Issue(f"{sweep.name}/{key}", "missing", f"the sweep's state says done, but {SWEEP_RUNS}/{key} "
                                "has no metrics"))
    return runs, issues


def _is_sweep(d: Path) -> bool:
    """A sweep directory: a state file, or runs with metrics under runs/ (a TRL output folder's runs/
    holds TensorBoard logs, not a sweep's runs)."""
    return read.is_sweep(d) and bool(read.read_sweep_state(d) or read.sweep_run_dirs(d))


def _is_run(d: Path) -> bool:
    """An rbctl run directory: a metrics log that is rbctl's (verl's file logger, pointed at a
    metrics.jsonl as docs/your_runs.md does, writes ``{"step", "data"}`` lines: another framework's run)."""
    from rbctl.report.sources.detect import is_verl_log

    return read.has_metrics(d) and not is_verl_log(d / METRICS)


def _collect(d: Path, depth: int) -> tuple[list[Run], list[Issue], bool]:
    if _is_run(d):
        return [load_run(d)], [], True
    if _is_sweep(d):
        return (*load_sweep(d), True)
    runs, issues, found = [], [], False
    if depth < SEARCH_DEPTH:
        for child in sorted(d.iterdir()):
            if child.is_dir() and child.name not in read.NOT_RUNS and not child.name.startswith("."):
                r, i, f = _collect(child, depth + 1)
                runs, issues, found = runs + r, issues + i, found or f
    return runs, issues, found


def find_runs(dirs: list[Path]) -> tuple[list[Run], list[Issue]]:
    """Every run under ``dirs`` (each counted once) and the problems the sweeps' state files name.

    When two runs share an arm name and a seed (the same arm in two sweeps), those arms are
    qualified by their sweep: ``sweep:arm``.
    """
    runs: dict[Path, Run] = {}
    issues: list[Issue] = []
    for d in map(Path, dirs):
        if sources.is_manifest(d):
            r, i = sources.load_manifest(d)
            runs.update({x.path.resolve(): x for x in r})
            issues += [x for x in i if x not in issues]
            continue
        if not d.is_dir():
            raise UserError(f"{d} is not a directory or a runs manifest (a YAML file with `runs_from:`)")
        r, i, found = _collect(d, 0)
        if not found and sources.is_imported(d):  # another framework's runs: read as a manifest of the folder
            r, i = sources.load_manifest(d)
            found = True
        if not found:
            raise UserError(f"no run or sweep directory under {d} (a run holds a metrics log; a sweep holds "
                            f"{SWEEP_RUNS}/ or a state file), and no TRL, verl, W&B, MLflow or TensorBoard runs; runs "
                            "trained elsewhere can also be named by a runs manifest (docs/your_runs.md)")
        runs.update({x.path.resolve(): x for x in r})
        issues += [x for x in i if x not in issues]
    out = sorted(runs.values(), key=lambda x: (x.arm, x.unit))
    clash = {a for (a, _), c in Counter((x.arm, x.unit) for x in out).items() if c > 1}
    for x in out:
        if x.arm in clash:
            x.arm = f"{x.sweep or x.path.parent.parent.name}:{x.arm}"
    dup = [k for k, c in Counter((x.arm, x.unit) for x in out).items() if c > 1]
    if dup:
        paths = [str(x.path) for x in out if (x.arm, x.unit) == dup[0]]
        raise UserError(f"runs {', '.join(paths)} are the same arm and unit ({dup[0][0]}, "
                        f"{unit_label(dup[0][1])}); report them separately")
    return sorted(out, key=lambda x: (x.arm, x.unit)), issues


def imported(d: Path) -> bool:
    """Whether ``d`` is read as runs trained elsewhere: a runs manifest, or a folder of another
    framework's runs holding no rbctl run or sweep (`_collect`)."""
    d = Path(d)
    return sources.is_manifest(d) or (d.is_dir() and not _has_rbctl_runs(d, 0) and sources.is_imported(d))


def _has_rbctl_runs(d: Path, depth: int) -> bool:
    """Whether `_collect` finds an rbctl run or sweep at or below ``d`` (nothing is read but first lines)."""
    if _is_run(d) or _is_sweep(d):
        return True
    return depth < SEARCH_DEPTH and any(
        _has_rbctl_runs(c, depth + 1) for c in sorted(d.iterdir())
        if c.is_dir() and c.name not in read.NOT_RUNS and not c.name.startswith("."))


def source_noun(runs: list[Run]) -> str | None:
    """What states the runs' comparisons, in the report's words: "runs manifest" when every run was
    named by one (trained elsewhere), None when they come from a folder read without one (nothing
    states comparisons), else "sweep file"."""
    kinds = {r.provenance.get("imported") for r in runs}
    if kinds == {"manifest"}:
        return "runs manifest"
    return None if kinds == {"folder"} else "sweep file"


def default_out(dirs: list[Path]) -> Path:
    """``DIR/report`` for a single input directory (a run or a sweep), ``runs/NAME`` for a single runs
    manifest or folder of another framework's runs (as for a study file); several need an explicit one."""
    if len(dirs) == 1 and imported(dirs[0]):
        return Path("runs") / sources.read_manifest(dirs[0]).name
    if len(dirs) == 1:
        return Path(dirs[0]) / REPORT_DIR
    raise UserError(f"pass -o OUT: the output folder defaults to DIR/{REPORT_DIR} only for a single input directory")


def sweep_settings(runs: list[Run]) -> tuple[Comparisons | None, Escape | None, list[str]]:
    """The report settings of the runs' sweep file (its resolved copy in the sweep directory): the
    principal comparisons, the escape-time setting and the evaluation benchmarks. (None, None, [])
    for runs outside a sweep; runs of several sweeps with different settings are an error."""
    found = {}
    for d in dict.fromkeys(r.sweep_dir for r in runs if r.sweep_dir):
        if imported(d):
            m = sources.read_manifest(d)
            found[str(d)] = (m.comparisons, m.escape, sorted({e["benchmark"] for r in runs if r.sweep_dir == d
                                                              for e in r.evals}))
            continue
        sweep = read.read_sweep_file(d)
        if not sweep:
            continue
        source = str(d / SWEEP_FILE)
        comps = validate(Comparisons, sweep["comparisons"], source + " comparisons") if sweep.get("comparisons") else None
        escape = validate(Escape, sweep["escape"], source + " escape") if sweep.get("escape") else None
        benches = list((sweep.get("eval") or {}).get("benchmarks") or [])
        found[source] = (comps, escape, benches)
    if len({repr(v[:2]) for v in found.values()}) > 1:
        raise UserError("the runs come from sweeps with different comparisons or escape settings ("
                        + ", ".join(found) + "); report them separately")
    return next(iter(found.values()), (None, None, []))


@dataclass(frozen=True)
class ReportAsk:
    """What the runs' sweep file (or runs manifest) asks of the report: its `report` block (None: it
    has none, so the defaults hold), the file that states it ("" when none does), and whether the runs
    were trained elsewhere (every one named by a runs manifest or read from another framework's folder)."""

    block: ReportBlock | None = None
    source: str = ""
    imported: bool = False


def report_ask(runs: list[Run]) -> ReportAsk:
    """The `report` block of the runs' sweep file or runs manifest (`ReportAsk`); runs of several sweeps
    whose blocks differ are an error, as for their comparisons."""
    found: dict[str, ReportBlock | None] = {}
    for d in dict.fromkeys(r.sweep_dir for r in runs if r.sweep_dir):
        if imported(d):
            found[str(d)] = sources.read_manifest(d).report
            continue
        sweep = read.read_sweep_file(d)
        if sweep:
            source = str(d / SWEEP_FILE)
            found[source] = validate(ReportBlock, sweep["report"], source + " report") if sweep.get("report") else None
    if len({repr(b) for b in found.values()}) > 1:
        raise UserError("the runs come from sweeps with different report settings (" + ", ".join(found)
                        + "); report them separately")
    given = next(((s, b) for s, b in found.items() if b is not None), ("", None))
    return ReportAsk(given[1], given[0] or next(iter(found), ""),
                     bool(runs) and all(r.provenance.get("imported") for r in runs))


def data_remarks(runs: list[Run]) -> list[str]:
    """What the runs of each runs manifest do not log or do unlike each other, one line each
    (`rbctl.report.sources.remarks`); [] for rbctl's own runs, whose logs hold every role."""
    out = []
    for d in dict.fromkeys(r.sweep_dir for r in runs if r.sweep_dir):
        if not imported(d):
            continue
        if not sources.is_manifest(d):  # a folder read without a manifest
            from rbctl.report.sources.init_manifest import folder_note

            out.append(folder_note(Path(d), sources.read_manifest(d)))
        out += sources.remarks(sources.read_manifest(d), [r for r in runs if r.sweep_dir == d])
    return out
