"""Per-arm diagnostics of a report: final entropy and κ_eff, the plateau test of the GRPO arm, and
"is entropy the cause?" (each run's final entropy and κ_eff against its held-out pass@1).

Each function returns numbers (DataFrames, verdicts); build.py writes and shows them.
"""

from __future__ import annotations

import pandas as pd

from rbctl.report.load import Run
from rbctl.report.plateau import PlateauVerdict, plateau_check
from rbctl.report.series import final_heldout, final_metric, run_series
from rbctl.report.stats import spearman_ci, t_interval

DESCRIPTIVE = (("entropy", "entropy"), ("kappa", "κ"), ("kappa_eff", "κ_eff"))


def final_descriptives(by_arm: dict[str, list[Run]]) -> pd.DataFrame:
    """Per arm: each run's final entropy, κ, κ_eff (mean over its last quarter of logged values), their
    mean over seeds with a 95% t-interval over seeds, and the per-seed values."""
    rows = []
    for arm, runs in by_arm.items():
        row = {"arm": arm, "seeds": len(runs), "seed_list": ",".join(str(r.seed) for r in runs)}
        for key, _ in DESCRIPTIVE:
            vals = [final_metric(r, key) for r in runs]
            m, lo, hi = t_interval(vals)
            row.update({f"{key}_final": m, f"{key}_final_lo": lo, f"{key}_final_hi": hi,
                        f"{key}_per_seed": ",".join(f"{v:.4g}" for v in vals)})
        rows.append(row)
    return pd.DataFrame(rows)


def plateau_of_arm(runs: list[Run], benchmark: str, ceiling: float | None) -> PlateauVerdict:
    """`plateau_check` on one arm's runs: held-out avg@n on ``benchmark`` from eval.jsonl (the final
    evaluation appended when it is later than the last periodic one) and metrics ``entropy``."""
    heldout, entropy = {}, {}
    for r in runs:
        s = run_series(r, "", benchmark)
        if r.final_step is not None and benchmark in r.finals and (not len(s) or r.final_step > s.index.max()):
            s.loc[r.final_step] = final_heldout(r, benchmark)
        if len(s):
            heldout[r.seed] = (list(s.index), list(s.values))
        e = run_series(r, "entropy")
        if len(e):
            entropy[r.seed] = (list(e.index), list(e.values))
    return plateau_check(heldout, entropy, ceiling)


def plateau_table(arm: str, v: PlateauVerdict) -> pd.DataFrame:
    """One row per criterion and one for the overall verdict."""
    rows = [{"arm": arm, "criterion": c.name, "held": c.held, "value": c.value, "threshold": c.threshold,
             "detail": c.detail} for c in v.criteria]
    rows.append({"arm": arm, "criterion": "plateau", "held": v.held, "value": None, "threshold": None,
                 "detail": f"all three criteria held over {v.seeds} seeds" if v.held else
                 "at least one criterion did not hold or was not evaluated"})
    return pd.DataFrame(rows)


def run_points(runs: list[Run], benchmark: str) -> pd.DataFrame:
    """One row per run: arm, seed, final entropy, final κ_eff (last-quarter means), held-out pass@1."""
    return pd.DataFrame([{"arm": r.arm, "seed": r.seed, "entropy_final": final_metric(r, "entropy"),
                          "kappa_eff_final": final_metric(r, "kappa_eff"),
                          "heldout_pass1": final_heldout(r, benchmark)} for r in runs])


def correlations(points: pd.DataFrame) -> pd.DataFrame:
    """Spearman ρ (Fisher-z 95% interval) of held-out pass@1 with final entropy and with final κ_eff,
    across all runs and within each arm."""
    rows = []
    groups = [("all runs", points)] + [(a, g) for a, g in points.groupby("arm", sort=True)]
    for key in ("entropy_final", "kappa_eff_final"):
        for name, g in groups:
            rho, lo, hi, n = spearman_ci(g[key].to_numpy(float), g["heldout_pass1"].to_numpy(float))
            rows.append({"x": key, "runs": name, "n": n, "rho": rho, "rho_lo": lo, "rho_hi": hi})
    return pd.DataFrame(rows)
