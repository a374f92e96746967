"""A sweep's grid: the units every arm runs (`units`), each run's config (`with_warm_start`), each arm's
label (`arm_metadata`, what the report groups by), and what makes the arms comparable, checked when
the sweep file is loaded (`rbctl.sweep.ablate.load_sweep`): equal compute, distinct (baseline,
variant) labels, no two arms of a declared family that train alike (`same_training`), an escape
signal some run logs.
"""

from __future__ import annotations

from pathlib import Path

from rbctl.algo import registry as methods
from rbctl.config.base import RUN_ONLY_KEYS
from rbctl.config.methods import hooks_on
from rbctl.config.sweep import COMPUTE_KEYS, SweepConfig, arm_variant
from rbctl.config.train import TrainConfig
from rbctl.errors import UserError

# A sampling hook (rollout.<name>, rbctl.algo.registry) generates more rollouts per step than it trains
# on (`rollout/generated`): at equal steps an arm with one gets more compute than one without, or
# than one with other rounds.
RESAMPLE_KEY = "rollout.max_resample_rounds"


def _flat_get(d: dict, dotted: str):
    for part in dotted.split("."):
        d = d[part]
    return d


def with_warm_start(cfg: TrainConfig, warm_start: str | None) -> TrainConfig:
    """The arm's config starting from shipped warm start `warm_start` (unchanged for None)."""
    if warm_start is None:
        return cfg
    builtin = cfg.data.builtin.model_copy(update={"warm_start": warm_start})
    return cfg.model_copy(update={"data": cfg.data.model_copy(update={"builtin": builtin})})


def units(sweep: SweepConfig) -> list[tuple[str | None, int]]:
    """The units of replication every arm runs: (warm start, seed), warm start None when the sweep
    does not cross warm starts."""
    return [(ws, s) for ws in (sweep.warm_starts or [None]) for s in sweep.seeds]


def check_equal_compute(path: Path, configs: dict[str, TrainConfig]) -> None:
    """Refuse arms that differ in a compute key, or that mix a sampling hook with fixed batches."""
    first_arm, first = next(iter(configs.items()))
    for arm, cfg in configs.items():
        for key in COMPUTE_KEYS:
            a, b = _flat_get(first.model_dump(), key), _flat_get(cfg.model_dump(), key)
            if a != b:
                raise UserError(f"{path}: arm '{arm}' sets {key}={b} but arm '{first_arm}' has {a}; arms must get "
                                "equal compute (set allow_unequal_compute: true to override)")
        hook_keys = [m.config_key for m in methods.of_kind("sampling_hook")]
        both = hooks_on(first.rollout) and hooks_on(cfg.rollout)
        for key in hook_keys + ([RESAMPLE_KEY] if both else []):
            a, b = _flat_get(first.model_dump(), key), _flat_get(cfg.model_dump(), key)
            if a != b:
                raise UserError(f"{path}: arm '{arm}' sets {key}={b} but arm '{first_arm}' has {a}; a sampling hook "
                                "generates more rollouts per step than it trains on, so equal steps are not equal "
                                "compute: compare such arms in generated rollouts (metric rollout/generated) and set "
                                "allow_unequal_compute: true")


def check_labels(path: Path, configs: dict[str, TrainConfig]) -> None:
    """Refuse two arms with one (baseline, variant) label: the report pairs arms by label."""
    seen: dict[tuple[str, str], str] = {}
    for arm, cfg in configs.items():
        meta = arm_metadata(cfg)
        label = (meta["baseline"], meta["variant"])
        if label in seen:
            raise UserError(f"{path}: arms '{seen[label]}' and '{arm}' get the same label (baseline {label[0]}, "
                            f"variant {label[1]}), so the report cannot tell them apart: make them differ in a "
                            "method, or set same_labels: true for a sweep over settings")
        seen[label] = arm




def check_family_configs(path: Path, sweep: SweepConfig, configs: dict[str, TrainConfig]) -> None:
    """Refuse two arms of one declared family that resolve to the same training config: they are one
    treatment counted twice (a comparison of them is no comparison, and the family's Holm m grows)."""
    if sweep.comparisons is None:
        return
    for fam in sweep.comparisons.families_declared():
        arms = list(dict.fromkeys(a for pair in fam.pairs for a in pair if a in configs))
        for i, a in enumerate(arms):
            for b in arms[i + 1:]:
                if same_training(configs[a], configs[b]):
                    raise UserError(f"{path}: arms '{a}' and '{b}' of family '{fam.name}' resolve to the same training "
                                    "(configs equal but for the estimator's name, whose advantages agree), so they are "
                                    "one arm counted twice: make them differ (e.g. each estimator's own algo.loss_agg) "
                                    "or keep one")


def check_escape_signal(path: Path, sweep: SweepConfig) -> None:
    """Refuse an escape signal no run logs: label shares (`label/…`) come from the periodic evaluation
    only (rbctl.train.metric_names), so `escape.signal: train` on one would give no escape time."""
    e = sweep.escape
    if e is not None and e.signal == "train" and e.metric.startswith("label/"):
        raise UserError(f"{path}: escape.signal: train with escape.metric '{e.metric}': label shares are logged by "
                        "the periodic evaluation only, not by training steps; use escape.signal: eval (and an "
                        "eval.every as fine as the escape times need)")


def same_training(a: TrainConfig, b: TrainConfig) -> bool:
    """Whether two arms train identically by construction: their configs are equal but for the
    run-only keys and the estimator's name, and the two estimators (with each arm's budget and
    parameters) give the same advantages on probe rewards (GRPO + budget and Dr.GRPO + budget do)."""
    da, db = ({k: v for k, v in c.model_dump().items() if k not in RUN_ONLY_KEYS} for c in (a, b))
    if da == db:
        return True
    ea, eb = da["algo"].pop("estimator"), db["algo"].pop("estimator")
    if ea == eb or da != db:
        return False
    import torch

    from rbctl.algo.dispatch import compute_advantages
    from rbctl.config.methods import method_params

    probes = (torch.tensor([[1.0, 0, 0, 0, 1, 0, 0, 0], [1, 1, 1, 0, 0, 0, 0, 1]]),  # [P, G] binary
              torch.tensor([[0.3, 0.9, 0.1, 0.5, 0.0, 1.0, 0.7, 0.2]]))  # graded

    def advantages(c: TrainConfig, r: torch.Tensor) -> torch.Tensor:
        return compute_advantages(r, c.algo.estimator, c.algo.budget, c.algo.shift,
                                  **method_params(c.algo, c.algo.estimator))

    try:
        return all(torch.allclose(advantages(a, r), advantages(b, r), atol=1e-9) for r in probes)
    except (UserError, ValueError):  # an estimator that refuses a probe (binary rewards only): not shown equal
        return False


def arm_metadata(cfg: TrainConfig) -> dict:
    """Baseline and variant of an arm, derived from its config (what the report groups by)."""
    return {"baseline": cfg.algo.estimator, "variant": arm_variant(cfg.algo.model_dump(), cfg.rollout.model_dump())}
