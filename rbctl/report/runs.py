"""The in-memory run the report analyses (`Run`), whatever wrote it: rbctl's own run directory
(`rbctl.report.load`) or another framework's files (`rbctl.report.sources`); and `Issue`, a run the
report cannot fully use."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rbctl.config.base import RUN_ONLY_KEYS
from rbctl.store.rundir import run_key


@dataclass
class Run:
    """One training run as found on disk: an rbctl run directory, or another framework's run read
    through a runs manifest (then ``sweep_dir`` is the manifest's path and the metrics carry rbctl's
    names for the roles the manifest maps)."""

    path: Path
    arm: str
    seed: int
    baseline: str  # the estimator the arm builds on (grpo, dr_grpo, …)
    variant: str  # base, budget, entropy_<mode> (the bonus's mode), …
    sweep: str | None
    status: str  # from the sweep's state.json ("done", "failed", …); "" for a run given on its own
    config_steps: int | None
    metrics: list[dict]  # metrics.jsonl, one record per step
    evals: list[dict]  # eval.jsonl, one record per (step, benchmark)
    final_step: int | None  # step of the final evaluation used
    finals: dict[str, dict] = field(default_factory=dict)  # benchmark -> its final evaluation summary
    # evaluations that are not its final score (another protocol, benchmark or step; `rbctl.store.read.side_evaluations`)
    side_evals: list[dict] = field(default_factory=list)
    group_size: int | None = None  # G (rollout.group_size of the config)
    sweep_dir: Path | None = None  # the sweep directory, or the runs manifest, whose settings the run is reported under
    warm_start: str | None = None  # the warm start, when the sweep crosses warm starts with seeds
    config: dict = field(default_factory=dict)  # the resolved training config ({} when absent)
    provenance: dict = field(default_factory=dict)

    @property
    def unit(self) -> tuple[str, int]:
        """What pairs this run with the other arms' runs: (warm start or "", seed)."""
        return (self.warm_start or "", self.seed)

    @property
    def name(self) -> str:
        return run_key(self.arm, self.seed, self.warm_start)

    @property
    def finished(self) -> bool:
        """Whether its sweep's state file says done, or it was given on its own (no state to say otherwise)."""
        return self.status in ("", "done")

    def training_config(self) -> dict:
        """The config without what may differ between runs of one arm (`rbctl.config.base.RUN_ONLY_KEYS`)."""
        return {k: v for k, v in self.config.items() if k not in RUN_ONLY_KEYS}

    @property
    def last_step(self) -> int:
        return max((int(m["step"]) for m in self.metrics if "step" in m), default=0)


@dataclass
class Issue:
    """A run the report cannot (fully) use: failed, running, pending, missing, or without results."""

    name: str
    status: str
    detail: str = ""


def unit_label(unit: tuple[str, int]) -> str:
    """``3`` for seed 3; ``ws_a/3`` for seed 3 of warm start ws_a."""
    return f"{unit[0]}/{unit[1]}" if unit[0] else str(unit[1])
