"""Training trajectories: per curve (a training metric, or a periodic-evaluation metric of one
benchmark) and arm, the per-step mean over units with its 95% t-band (`rbctl.report.series.band`).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from rbctl.config.sweep import Escape
from rbctl.report.load import Run
from rbctl.report.series import KAPPA_EFF_WINDOW, arm_bands
from rbctl.report.stats import finite

# (metrics key, file slug, title, y label, rolling window, range of the metric). No response-length
# panel: the built-in tasks' length follows the prompt mix, identical across arms.
TRAINING_CURVES = (
    ("reward/mean", "reward", "Training reward (reward/mean)", "reward per rollout", 1, (0.0, 1.0)),
    ("entropy", "entropy", "Token entropy (pre-update policy)", "entropy (nats/token)", 1, (0.0, None)),
    ("kappa", "kappa", "Nominal sharpness κ", "κ (advantage gap per unit reward gap)", 1, (0.0, None)),
    ("kappa_eff", "kappa_eff", f"Measured sharpness κ_eff, cumulative over the step's optimizer updates (rolling mean "
     f"of {KAPPA_EFF_WINDOW})", "κ_eff (log-ratio gap per unit reward gap)", KAPPA_EFF_WINDOW, (None, None)),
    ("clip/frac_low", "clip_frac_low", "Tokens clipped below (clip/frac_low)", "fraction of tokens", 1, (0.0, 1.0)),
    ("clip/frac_high", "clip_frac_high", "Tokens clipped above (clip/frac_high)", "fraction of tokens", 1, (0.0, 1.0)),
)


def training_curve(key: str) -> tuple | None:
    """The `TRAINING_CURVES` entry of a metrics-log key, or None where ``key`` is not one."""
    return next((c for c in TRAINING_CURVES if c[0] == key), None)


@dataclass(frozen=True)
class Curve:
    """One trajectory figure's numbers: ``bands[arm]`` (columns mean, lo, hi, seeds by step) of
    ``metric`` (of ``benchmark``'s periodic evaluation, or the metrics log's when None)."""

    metric: str
    benchmark: str | None
    key: str  # the metric column of data/trajectories.csv
    name: tuple[str, ...]  # what names its files: the metric's short name, with its benchmark
    title: str
    ylabel: str
    limits: tuple[float | None, float | None]
    bands: dict[str, pd.DataFrame]


@dataclass(frozen=True)
class Trajectories:
    """Every trajectory with at least one arm's data, in the order the report draws them."""

    curves: tuple[Curve, ...]


def shown_labels(keys: set[str], escape: Escape | None) -> list[str]:
    """The label shares to draw (``label/<name>/<value>`` keys): every value of a label, but of a
    two-valued label only one (the other is 1 − it): the escape metric when it is one of them, else
    the last in sorted order."""
    by_name: dict[str, list[str]] = {}
    for k in sorted(keys):
        by_name.setdefault(k.rsplit("/", 1)[0], []).append(k)
    out = []
    for values in by_name.values():
        if len(values) == 2:
            values = [escape.metric] if escape is not None and escape.metric in values else values[-1:]
        out += values
    return out


def trajectories(runs: list[Run], by_arm: dict[str, list[Run]], escape: Escape | None,
                 kappa_eff_refused: bool) -> Trajectories:
    """The reward, each periodic-evaluation benchmark's held-out pass@1 and label shares, then the
    other training curves (clip fractions only when logged; κ_eff not when ``kappa_eff_refused``)."""
    benches = list(dict.fromkeys(e["benchmark"] for r in runs for e in r.evals if "benchmark" in e))
    labels = shown_labels({k for r in runs for e in r.evals for k in e if k.startswith("label/")}, escape)
    # (metric, benchmark of the periodic evaluation or None, slug, title, y label, window, range)
    specs = [(TRAINING_CURVES[0][0], None, (TRAINING_CURVES[0][1],), *TRAINING_CURVES[0][2:])]
    for b in benches:
        specs.append(("avg@n", b, ("heldout", b), f"Held-out pass@1 on {b} (avg@n, periodic eval)",
                      "held-out pass@1", 1, (0.0, 1.0)))
        specs += [(k, b, (k, b), f"Share of samples {k} on {b} (periodic eval)", "share of samples", 1,
                   (0.0, 1.0)) for k in labels]
    logged = {k for r in runs for m in r.metrics for k, v in m.items() if finite(v) and v != 0}
    specs += [(t[0], None, (t[1],), *t[2:]) for t in TRAINING_CURVES[1:] if (not t[0].startswith("clip/") or t[0] in logged)
              and not (t[0] == "kappa_eff" and kappa_eff_refused)]
    curves = []
    for metric, bench, name, title, ylabel, window, limits in specs:
        key = metric if bench is None else ("heldout" if metric == "avg@n" else metric) + f":{bench}"
        bands = arm_bands(by_arm, metric, window, bench)
        if bands:
            curves.append(Curve(metric, bench, key, name, title, ylabel, limits, bands))
    return Trajectories(tuple(curves))
