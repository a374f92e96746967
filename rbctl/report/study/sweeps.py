"""The study's sweeps (`rbctl.config.study.StudyConfig`): each sweep directory it names and its report
data (`rbctl.report.data.report_data`), by the name the study file gives it (families and claims read
them by it); and the settings sweeps."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from rbctl.config.base import read_yaml, validate
from rbctl.config.study import StudyConfig
from rbctl.errors import UserError
from rbctl.report.data import ReportData, report_data
from rbctl.report.load import Run
from rbctl.report.series import final_metric
from rbctl.report.sources import is_manifest
from rbctl.report.stats import t_interval
from rbctl.store.read import read_sweep_state
from rbctl.store.rundir import SWEEP_RUNS


@dataclass(frozen=True)
class Testbed:
    """One sweep of the study and its report data."""

    name: str
    path: Path
    data: ReportData

    @property
    def runs(self) -> list[Run]:
        return list(self.data.sweep.runs)

    @property
    def arms(self) -> list[str]:
        return list(self.data.sweep.by_arm)

    @property
    def benchmark(self) -> str:
        spec = self.data.sweep.spec
        return (spec.benchmark if spec is not None and spec.benchmark else None) or self.data.sweep.benchmarks[0]

    def family(self, name: str | None):
        """The members of the declared family ``name`` of this sweep file ([] when it declares none)."""
        return [c for c in self.data.comparisons.family(name) if not c.same_config] if name else []

    def declares(self, name: str | None) -> bool:
        spec = self.data.sweep.spec
        return bool(name) and spec is not None and any(f.name == name for f in spec.families_declared())

    def per_unit(self, arm: str, key: str) -> dict:
        """{unit: last-quarter mean of metrics.jsonl ``key``} of an arm's runs."""
        return {r.unit: final_metric(r, key) for r in self.data.sweep.by_arm.get(arm, [])
                if math.isfinite(final_metric(r, key))}

    def interval(self, arm: str, key: str) -> tuple[float, float, float]:
        return t_interval(list(self.per_unit(arm, key).values()))

    @property
    def ceiling(self) -> float | None:
        """The reachable pass@1 the sweep file or the task states (None: unknown)."""
        c = self.data.plateau.ceiling
        return c.value if c is not None and c.declared else None

    def plateau_held(self, arm: str) -> bool:
        """The plateau test holds for the plain arm ``arm`` against a stated ceiling (a ceiling read off
        the compared runs is not one that was shown reachable)."""
        return self.ceiling is not None and self.data.plateau.held_for(arm)


def load_testbed(name: str, path: Path, n_boot: int) -> Testbed:
    path = Path(path)
    if not path.is_dir() and not is_manifest(path):  # a runs manifest (runs trained elsewhere) is a testbed too
        raise UserError(f"study sweep '{name}': {path} is not a directory (run its sweep first)")
    return Testbed(name, path, report_data([path], n_boot))


def unfinished(path: Path) -> str | None:
    """Why a sweep directory cannot join the document yet (missing, or runs not all done), else None."""
    path = Path(path)
    if is_manifest(path):
        return None
    if not path.is_dir():
        return f"`{path}` does not exist yet"
    state = read_sweep_state(path)
    if not state and not (path / SWEEP_RUNS).is_dir():  # made by declaring the study before its sweep ran
        return f"`{path}` has no runs yet"
    done = sum(r.get("status") == "done" for r in state.values())
    if state and done < len(state):
        return f"`{path}`: {done} of {len(state)} runs finished"
    return None


@dataclass(frozen=True)
class Study:
    config: StudyConfig
    source: Path
    testbeds: tuple[Testbed, ...]
    long: tuple[tuple[Testbed, int, str], ...]  # (sweep, main step, family)
    main: Testbed | None
    selection: tuple[tuple[str, Testbed, str], ...] = ()  # (testbed, its settings sweep, the setting kept)
    pending: tuple[tuple[str, str], ...] = ()  # (what, why) of every sweep the study names that is not finished

    @property
    def sweeps(self) -> dict[str, Testbed]:
        """Every finished sweep a family or claim may read, by its study name."""
        out = {tb.name: tb for tb in self.testbeds}
        out.update({tb.name: tb for tb, _, _ in self.long})
        if self.main is not None:
            out[self.main.name] = self.main
        return out

    def named(self, names: list[str] | None) -> list[Testbed]:
        """The finished sweeps of ``names`` (null: every testbed), in that order; unfinished ones are
        left out (the document names them as pending)."""
        have = self.sweeps
        return list(self.testbeds) if names is None else [have[n] for n in names if n in have]


def load_study(path: Path, n_boot: int = 1000) -> Study:
    """Read a study file and the report data of every sweep it names."""
    cfg = validate(StudyConfig, read_yaml(path), str(path))
    pending = []

    def ready(what: str, d: str) -> bool:
        why = unfinished(Path(d))
        if why:
            pending.append((what, why))
        return why is None

    beds = tuple(load_testbed(n, Path(d), n_boot) for n, d in cfg.testbeds.items() if ready(f"testbed {n}", d))
    if not beds:
        raise UserError(f"{path}: no testbed's sweep has finished ({'; '.join(why for _, why in pending)})")
    done = {tb.name for tb in beds}
    long = tuple((load_testbed(h.name, Path(h.dir), n_boot), h.main_step, h.family) for n, h in cfg.long.items()
                 if n in done and ready(f"long horizon {h.name}", h.dir))
    main = (load_testbed(cfg.main.name, Path(cfg.main.dir), n_boot)
            if cfg.main and ready("main job", cfg.main.dir) else None)
    # a setting sweep joins even before its testbed's sweep finished: how the setting was chosen stands alone
    selection = tuple((n, load_testbed(f"{n} (setting)", Path(s.dir), n_boot), s.kept) for n, s in cfg.selection.items()
                      if ready(f"setting sweep {n}", s.dir))
    return Study(cfg, Path(path), beds, long, main, selection, tuple(pending))
