"""Is entropy the cause? Final entropy, κ and κ_eff per arm, and entropy / κ_eff against held-out
pass@1, between arms and within arms; and whether κ_eff may be compared between arms at all.

Each function returns numbers (DataFrames); `entropy_kappa` gathers them into the report's analysis.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from rbctl.report.load import Run, unit_label
from rbctl.report.series import final_heldout, final_metric
from rbctl.report.stats import pearson_ci, t_interval

DESCRIPTIVE = (("entropy", "entropy"), ("kappa", "κ"), ("kappa_eff", "κ_eff"))
ASSOCIATED = (("entropy_final", "final entropy (nats/token)"), ("kappa_eff_final", "final κ_eff"))


def final_descriptives(by_arm: dict[str, list[Run]]) -> pd.DataFrame:
    """Per arm: each run's final entropy, κ, κ_eff (mean over its last quarter of logged values), their
    mean over units with a 95% t-interval over units, and the per-unit values."""
    rows = []
    for arm, runs in by_arm.items():
        row = {"arm": arm, "seeds": len(runs), "seed_list": ",".join(unit_label(r.unit) for r in runs)}
        for key, _ in DESCRIPTIVE:
            vals = [final_metric(r, key) for r in runs]
            m, lo, hi = t_interval(vals)
            row.update({f"{key}_final": m, f"{key}_final_lo": lo, f"{key}_final_hi": hi,
                        f"{key}_per_seed": ",".join(f"{v:.4g}" for v in vals)})
        rows.append(row)
    return pd.DataFrame(rows)


def run_points(runs: list[Run], benchmark: str) -> pd.DataFrame:
    """One row per run: arm, unit, final entropy, final κ_eff (last-quarter means), held-out pass@1."""
    return pd.DataFrame([{"arm": r.arm, "seed": unit_label(r.unit), "entropy_final": final_metric(r, "entropy"),
                          "kappa_eff_final": final_metric(r, "kappa_eff"),
                          "heldout_pass1": final_heldout(r, benchmark)} for r in runs])


def split_levels(points: pd.DataFrame, key: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(between, within) for ``key`` vs held-out pass@1: the arm means (one row per arm), and each
    run's values minus its arm's means. Both have columns arm, x, y; runs missing either value are
    left out."""
    ok = points[["arm", key, "heldout_pass1"]].dropna().rename(columns={key: "x", "heldout_pass1": "y"})
    between = ok.groupby("arm", sort=True)[["x", "y"]].mean().reset_index()
    centred = ok[["x", "y"]] - ok.groupby("arm")[["x", "y"]].transform("mean")
    return between, centred.assign(arm=ok["arm"].to_numpy())[["arm", "x", "y"]]


# The fewest degrees of freedom a correlation is shown on. On 1 df (3 arms) r is drawn from a
# distribution so wide that |r| > 0.95 happens one time in five with no association at all, its
# Fisher-z interval (SE 1/√(df − 1)) does not exist, and on 2 df it spans nearly all of [−1, 1]:
# such an r is withheld (`withheld` says why), not printed as a finding (docs/method.md).
MIN_CORRELATION_DF = 3


def associations(points: pd.DataFrame, refused: tuple[str, ...] = ()) -> pd.DataFrame:
    """Pearson r (95% Fisher-z interval, p) of held-out pass@1 with final entropy and with final
    κ_eff at two levels: between arms (over the k arm means: k units, n − 2 df) and within arms (each
    run minus its arm's mean, pooled: N runs − k arm means = N − k units, N − k − 1 df; rmcorr).
    ``refused`` names the keys not compared between arms (κ_eff of arms whose updates differ,
    `kappa_eff_refusal`): their between-arms row is NaN with ``refused`` True. A correlation on fewer
    than `MIN_CORRELATION_DF` df is NaN too, with ``withheld`` saying so ("1 df: 3 arms")."""
    rows = []
    for key, _ in ASSOCIATED:
        between, within = split_levels(points, key)
        for level, df, groups, basis in (("between arms", between, 0, "arm means"),
                                         ("within arms", within, between["arm"].nunique(), "runs − arm means")):
            no = level == "between arms" and key in refused
            c = pearson_ci(df["x"], df["y"], groups=groups)
            few = "" if no or c.df >= MIN_CORRELATION_DF else (
                f"{c.df} df: {len(df)} {'arms' if level == 'between arms' else 'runs'}, fewer than the "
                f"{MIN_CORRELATION_DF} df a correlation needs")
            if no or few:
                c = c._replace(r=math.nan, lo=math.nan, hi=math.nan, p=math.nan)
            rows.append({"x": key, "level": level, "units": c.units, "df": c.df, "basis": basis, "points": len(df),
                         "r": c.r, "r_lo": c.lo, "r_hi": c.hi, "p": c.p, "refused": no, "withheld": few})
    return pd.DataFrame(rows)


# What κ_eff depends on besides the policy: it is measured after all of a step's optimizer updates
# (docs/method.md, "Mini-batch updates"), so it is cumulative over M = P / ppo_mini_batch_size
# mini-batches × ppo_epochs at the learning rate lr.
KAPPA_EFF_SETTINGS = ("algo.ppo_mini_batch_size", "algo.ppo_epochs", "optim.lr", "optimizer updates per step")


def kappa_eff_setting(config: dict) -> dict[str, str]:
    """The settings of a run's saved config that κ_eff grows with (`KAPPA_EFF_SETTINGS`), as shown:
    a key the config does not hold is "not recorded"; a null mini-batch size is one mini-batch of
    all P prompts. Updates per step = (P / ppo_mini_batch_size, or 1) × ppo_epochs."""
    cfg = config or {}
    algo, optim, rollout = ((cfg.get(k) or {}) for k in ("algo", "optim", "rollout"))
    missing = "not recorded"
    mb = algo.get("ppo_mini_batch_size", missing)
    epochs, lr, prompts = algo.get("ppo_epochs", missing), optim.get("lr", missing), rollout.get("prompts_per_step")
    per_epoch = 1 if mb is None else (prompts // mb if isinstance(mb, int) and isinstance(prompts, int) and mb else None)
    updates = per_epoch * epochs if per_epoch is not None and isinstance(epochs, int) else missing
    shown = lambda v: "null (one mini-batch)" if v is None else f"{v:g}" if isinstance(v, float) else str(v)  # noqa: E731
    return dict(zip(KAPPA_EFF_SETTINGS, map(shown, (mb, epochs, lr, updates))))


def kappa_eff_refusal(by_arm: dict[str, list[Run]]) -> str:
    """"" when every run of every arm shares the settings κ_eff grows with; else the one-line note
    naming the settings that differ and each arm's values (κ_eff is then not compared between arms)."""
    values = {arm: [kappa_eff_setting(r.config) for r in runs] for arm, runs in sorted(by_arm.items())}
    differ = [k for k in KAPPA_EFF_SETTINGS if len({v[k] for vs in values.values() for v in vs}) > 1]
    if not differ:
        return ""
    parts = [f"{k} ({', '.join(f'{a} ' + '/'.join(sorted({v[k] for v in vs})) for a, vs in values.items())})"
             for k in differ]
    return ("κ_eff is not compared between arms: it is cumulative over a step's optimizer updates, so it is "
            "comparable only at equal mini-batch size, epochs and learning rate, and the arms differ in "
            + "; ".join(parts) + ".")


@dataclass(frozen=True)
class EntropyKappa:
    """The entropy / κ_eff analysis: per-arm final entropy, κ and κ_eff (`descriptives`:
    tables/final_entropy_kappa.csv); with final scores, on the first benchmark, one row per run
    (`points`: data/run_finals.csv) and the correlations with held-out pass@1 (`correlations`:
    tables/entropy_cause.csv); `kappa_eff_note` is "" when κ_eff may be compared between arms, else why
    not (`kappa_eff_refusal`)."""

    descriptives: pd.DataFrame
    kappa_eff_note: str
    benchmark: str | None
    points: pd.DataFrame
    correlations: pd.DataFrame

    @property
    def refused(self) -> tuple[str, ...]:
        """The keys not compared between arms."""
        return ("kappa_eff_final",) if self.kappa_eff_note else ()


def entropy_kappa(by_arm: dict[str, list[Run]], runs: list[Run], benchmarks: list[str]) -> EntropyKappa:
    """The report's entropy / κ_eff analysis (the correlations on the first of ``benchmarks``, the
    benchmarks with final scores; none without one)."""
    note = kappa_eff_refusal(by_arm)
    bench = benchmarks[0] if benchmarks else None
    points = run_points(runs, bench) if bench else pd.DataFrame()
    corr = associations(points, ("kappa_eff_final",) if note else ()) if bench else pd.DataFrame()
    return EntropyKappa(final_descriptives(by_arm), note, bench, points, corr)

