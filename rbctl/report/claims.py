"""A study's claims (`rbctl report STUDY.yaml`; the study file: `rbctl.config.study`): the reward-budgeting
study's claims, each tested on the study's sweeps with a rule that can fail, from the sweeps' own
report data (`rbctl.report.data.report_data`). Every comparison is a member of a family its sweep file
declares, so its Holm p and call (`rbctl.report.analyses.comparisons.call_text`) are those of the
sweep's own report.

The claims and their rules (docs/method.md, "Comparing arms", studies):
(a) the budget improves several RL baselines: X + budget − X per baseline and testbed; holds when at
    least two baselines are called higher somewhere and none lower; fails when one is lower, or when
    at most one is higher and every other is equivalent; otherwise inconclusive;
(b) raising entropy does not reliably move the plateau: X + entropy − X, read only where the plateau
    test holds for plain GRPO on the testbed and only for members whose bonus raised entropy over X
    (else "not tested"); holds when every tested member is equivalent or lower;
(c) the budget's gains come without preserving entropy: where the budget is called higher, its
    last-quarter entropy is at or below X's;
(d) the advantage gap shrinks as more rollouts are right (κ falls with K), computed exactly;
(e) κ_eff, not entropy, tracks premature sharpening: the association of each with the final held-out
    pass@1 with the unit as the unit (rmcorr centred within each (warm start, seed) unit, arms nested
    in it), at the same time (last quarter) and lagged (the early window predicting the final
    level), each against the sign the study file states before running;
(f) the unclipped budgeted estimator follows the gradient of the finite-G objective (exact check);
(g) pass@k is kept where GRPO's collapses: measured on the long horizon, not called.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from rbctl.config.base import read_yaml, validate
from rbctl.config.study import StudyConfig
from rbctl.errors import UserError
from rbctl.report.analyses.comparisons import (EQUIVALENT, HIGHER, INCONCLUSIVE, LOWER, Comparison, apply_family,
                                               call, call_text, stated_pairs)
from rbctl.report.analyses.escape_time import escape_rows, logrank_rows
from rbctl.report.analyses.plateau import setting_by_rule
from rbctl.report.analyses.warm_starts import warm_start_level
from rbctl.report.data import ReportData, report_data
from rbctl.report.load import Run
from rbctl.report.power import units_for_tost
from rbctl.report.provenance import cpu_description, provenance, same_training_code
from rbctl.report.render.tables import criterion_cell, delta, markdown_table, pct, pval
from rbctl.report.series import at_step, final_heldout, final_metric, run_series
from rbctl.report.sources import is_manifest
from rbctl.report.stats import DELTA_BOUNDS, finite, holm, paired_delta, pearson_ci, t_interval, tail_mean
from rbctl.store.read import read_sweep_state

BASELINES = (("grpo", "GRPO"), ("dr_grpo", "Dr.GRPO"), ("rloo", "RLOO"), ("reinforce_pp", "REINFORCE++"))
ENTROPY = "entropy_static"
# each question of the study: (arm variant, reference variant), both of one baseline X
QUESTIONS = {"budget": ("budget", "base"), "entropy_vs_budget": (ENTROPY, "budget"), "entropy_vs_base": (ENTROPY, "base")}
ALPHA = 0.05


def label(baseline: str) -> str:
    return dict(BASELINES).get(baseline, baseline)


# --- the study's sweeps --------------------------------------------------------------------------------


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
    def benchmark(self) -> str:
        spec = self.data.sweep.spec
        return (spec.benchmark if spec is not None and spec.benchmark else None) or self.data.sweep.benchmarks[0]

    def family(self, name: str | None) -> list[Comparison]:
        """The members of the declared family ``name`` of this sweep file ([] when it declares none)."""
        return [c for c in self.data.comparisons.family(name) if not c.same_config] if name else []

    def members(self, name: str | None, question: str) -> list[Comparison]:
        """The members of family ``name`` that ask ``question`` (a key of `QUESTIONS`: arm and reference
        of one baseline with those variants); a family may hold other comparisons too (the main job's
        principal family holds the entropy bonus's), which the question leaves out."""
        arm_v, ref_v = QUESTIONS[question]
        info = self.data.sweep.info
        return [c for c in self.family(name)
                if info[c.arm][0] == info[c.ref][0] and info[c.arm][1] == arm_v and info[c.ref][1] == ref_v]

    def declares(self, name: str | None) -> bool:
        spec = self.data.sweep.spec
        return bool(name) and spec is not None and any(f.name == name for f in spec.families_declared())

    def entropy_per_unit(self, arm: str) -> dict:
        """{unit: last-quarter token entropy} of an arm's runs."""
        return {r.unit: final_metric(r, "entropy") for r in self.data.sweep.by_arm.get(arm, [])
                if math.isfinite(final_metric(r, "entropy"))}

    def entropy(self, arm: str | None) -> tuple[float, float, float]:
        return t_interval(list(self.entropy_per_unit(arm).values())) if arm else (math.nan,) * 3

    @property
    def ceiling(self) -> float | None:
        """The reachable pass@1 the sweep file or the task states (None: unknown)."""
        c = self.data.plateau.ceiling
        return c.value if c is not None and c.declared else None

    @property
    def plateau_held(self) -> bool:
        """The plateau test holds for plain GRPO against a stated ceiling (a ceiling read off the
        compared runs is not one that was shown reachable)."""
        v = self.data.plateau.verdict
        return bool(v is not None and v.held and self.ceiling is not None)


def load_testbed(name: str, path: Path, n_boot: int) -> Testbed:
    path = Path(path)
    if not path.is_dir() and not is_manifest(path):  # a runs manifest (runs trained elsewhere) is a testbed too
        raise UserError(f"study testbed '{name}': {path} is not a directory (run its sweep first)")
    return Testbed(name, path, report_data([path], n_boot))


def unfinished(path: Path) -> str | None:
    """Why a sweep directory cannot join the document yet (missing, or runs not all done), else None."""
    path = Path(path)
    if is_manifest(path):
        return None
    if not path.is_dir():
        return f"`{path}` does not exist yet"
    state = read_sweep_state(path)
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
    long = tuple((load_testbed(f"{n} (long)", Path(h.dir), n_boot), h.main_step, h.family) for n, h in cfg.long.items()
                 if n in done and ready(f"long horizon {n}", h.dir))
    main = load_testbed("main job", Path(cfg.main), n_boot) if cfg.main and ready("main job", cfg.main) else None
    # a setting sweep joins even before its testbed's sweep finished: how the setting was chosen stands alone
    selection = tuple((n, load_testbed(f"{n} (setting)", Path(s.dir), n_boot), s.kept) for n, s in cfg.selection.items()
                      if ready(f"setting sweep {n}", s.dir))
    return Study(cfg, Path(path), beds, long, main, selection, tuple(pending))


# --- the tables ----------------------------------------------------------------------------------------


def family_rows(beds: tuple[Testbed, ...], family: str | None, question: str) -> pd.DataFrame:
    """One row per member of ``family`` on each testbed: the sweep's Δ, Holm p, TOST and call, the
    test with the warm start as the unit (unadjusted), and the reference's distance to the stated
    ceiling."""
    rows = []
    for tb in beds:
        for c in tb.members(family, question):
            d = c.delta
            over = warm_start_level(d).over_warm_starts if tb.data.sweep.warm_starts else None
            row = {"baseline": label(tb.data.sweep.info[c.arm][0]), "testbed": tb.name, "comparison": c.label,
                   "units": d.n, "reference %": pct(c.ref_score), "arm %": pct(c.arm_score),
                   "Δ points [95% CI]": delta(d.mean, d.lo, d.hi), "Holm p": pval(c.p_holm, "–"),
                   "TOST Holm p": (f"±{100 * c.margin:g}: {pval(c.p_tost_holm, '–')}" if math.isfinite(c.margin)
                                   else "no margin"),
                   "call": call_text(c),
                   "unit = warm start: Δ [95% CI], p (unadj.)": (f"{delta(over.mean, over.lo, over.hi)}, "
                                                                 f"{pval(over.p, 'not testable')} ({over.n} warm starts)"
                                                                 if over is not None else "–"),
                   "reference to ceiling (points)": (f"{100 * (tb.ceiling - c.ref_score):.1f}" if tb.ceiling is not None
                                                     else "no stated ceiling")}
            rows.append(row)
    return pd.DataFrame(rows)


# --- escape: the study's own family ------------------------------------------------------------------------


@dataclass(frozen=True)
class EscapeMember:
    """One member of the escape family: X + budget − X in the restricted escape step on one sweep."""

    sweep: str
    comparison: Comparison  # Δ in steps (arm − reference; < 0: the arm leaves the shortcut sooner)
    tau: float
    escaped_arm: int
    escaped_ref: int
    logrank_p: float  # stratified by warm start, unadjusted


def escape_family(study: Study) -> list[EscapeMember]:
    """The study's escape family (`rbctl.config.study.EscapeFamily`): X + budget − X in min(T, τ) per
    unit on every testbed and long sweep whose runs log the signal, Holm over all members, called with
    the family's margin (steps)."""
    spec = study.config.escape
    if spec is None:
        return []
    members = []
    for tb in [*study.testbeds, *(t for t, _, _ in study.long)]:
        rows = escape_rows(tb.runs, spec.setting, spec.setting.benchmark or tb.benchmark)
        if not len(rows):
            continue
        tau = float(rows["last_step"].min())
        rows = rows.assign(restricted=rows["time"].clip(upper=tau))
        info = tb.data.sweep.info
        for arm, ref in ((arm, ref) for kind, _, arm, ref in stated_pairs(info) if kind == "budget_vs_base"):
            a, b = rows[rows["arm"] == arm], rows[rows["arm"] == ref]
            if not len(a) or not len(b):
                continue
            d = paired_delta(dict(zip(a["unit"], a["restricted"])), dict(zip(b["unit"], b["restricted"])))
            c = Comparison("escape", "escape", info[arm][0], arm, ref, tb.benchmark, "escape step", 0,
                           float(a["restricted"].mean()), float(b["restricted"].mean()), d)
            lr = logrank_rows(rows, [(arm, ref)])
            members.append(EscapeMember(tb.name, c, tau, int(a["event"].sum()), int(b["event"].sum()),
                                        float(lr["p"].iloc[0]) if len(lr) else math.nan))
    apply_family([m.comparison for m in members], spec.alpha, spec.margin, spec.power)
    return members


SOONER = {HIGHER: "later", LOWER: "sooner"}


def escape_word(c: Comparison) -> str:
    """The member's call word, "lower"/"higher" read as sooner/later."""
    return SOONER.get(call(c), call(c))


def escape_call(c: Comparison) -> str:
    """The member's call as a row prints it, in steps (`escape_word` for the word)."""
    return call_text(c, 1.0, "steps").replace(call(c), escape_word(c), 1)


def escape_table(members: list[EscapeMember]) -> pd.DataFrame:
    rows = []
    for m in members:
        c, d = m.comparison, m.comparison.delta
        rows.append({"baseline": label(c.baseline), "sweep": m.sweep, "comparison": c.label, "units": d.n,
                     "escaped reference / arm": f"{m.escaped_ref} / {m.escaped_arm} of {d.n}",
                     "τ (step)": f"{m.tau:.0f}",
                     "restricted mean escape step reference / arm": f"{c.ref_score:.1f} / {c.arm_score:.1f}",
                     "Δ steps [95% CI]": f"{d.mean:+.1f} [{d.lo:+.1f}, {d.hi:+.1f}]" if d.testable else f"{d.mean:+.1f}",
                     "Holm p": pval(c.p_holm, "–"),
                     "TOST Holm p": (f"±{c.margin:g}: {pval(c.p_tost_holm, '–')}" if math.isfinite(c.margin)
                                     else "no margin"),
                     "call": escape_call(c), "log-rank p (stratified, unadj.)": pval(m.logrank_p, "–")})
    return pd.DataFrame(rows)


def escape_lines(study: Study, members: list[EscapeMember]) -> list[str]:
    spec = study.config.escape
    if spec is None:
        return []
    s = spec.setting
    where = ("the periodic held-out evaluation" if s.signal == "eval" else "the training batch, every step")
    return ["## 2b. Escape: how soon the budget leaves the shortcut (the study's family `escape`)", "",
            f"The escape step T of a run: the first point of {where} where `{s.metric}` is {s.direction} {s.threshold:g} "
            f"and stays so for the next {s.hold} points (docs/method.md, \"Premature convergence\"). Per unit the "
            "restricted step min(T, τ) (τ: the last step every run of that sweep reached; a run that never escapes "
            "counts τ), so the mean is the restricted mean escape time (RMST) and Δ pairs the units; Holm over every "
            f"member at α {spec.alpha:g}"
            + (f", equivalence by TOST within ±{spec.margin:g} steps" if spec.margin else ", no equivalence margin")
            + ". Lower is sooner. The evaluation grid bounds the resolution: T falls on the sweep's `eval.every`.", "",
            table(escape_table(members), "No sweep logs the escape signal."), ""]


def aggregation_rows(beds: tuple[Testbed, ...]) -> pd.DataFrame:
    """Per testbed and arm: the estimator and the loss aggregation its runs' saved configs used."""
    rows = []
    for tb in beds:
        for arm, runs in sorted(tb.data.sweep.by_arm.items()):
            algo = (runs[0].config or {}).get("algo") or {}
            aggs = sorted({str(((r.config or {}).get("algo") or {}).get("loss_agg")) for r in runs})
            rows.append({"testbed": tb.name, "arm": arm, "estimator": algo.get("estimator", "?"),
                         "loss aggregation": ", ".join(aggs)})
    return pd.DataFrame(rows)


def plateau_rows(beds: tuple[Testbed, ...]) -> pd.DataFrame:
    """Per testbed: the plateau test of each plain baseline X (no budget, no bonus), criterion by criterion."""
    rows = []
    for tb in beds:
        p = tb.data.plateau
        if not p.plain:
            rows.append({"testbed": tb.name, "arm": "none", "stalled": "–", "below the ceiling": "–",
                         "entropy collapsed": "–", "plateau": "not tested (no plain arm with evaluations)"})
            continue
        show = lambda c: "not evaluated" if c.held is None else ("holds" if c.held else "does not hold") + f" ({c.detail})"  # noqa: E731
        for arm, v in p.plain.items():
            rows.append({"testbed": tb.name, "arm": arm, "stalled": show(v.stalled),
                         "below the ceiling": show(v.below_ceiling), "entropy collapsed": show(v.entropy_collapsed),
                         "plateau": "holds" if p.held_for(arm) else
                         "not tested: no stated ceiling (the sweep's ceiling:)" if v.held else "does not hold"})
    return pd.DataFrame(rows)


def selection_lines(study: Study) -> list[str]:
    """Per testbed with a settings sweep: every setting's plain arm by the plateau test, the setting the
    rule keeps (`rbctl.report.analyses.plateau.setting_by_rule`) and the one the study file states."""
    out = []
    for name, sw, kept in study.selection:
        p = sw.data.plateau
        rows = []
        for arm, v in p.plain.items():
            show = lambda c, d: criterion_cell(c.value, c.held, d)  # noqa: E731
            rows.append({"setting (plain arm)": arm, "units": v.seeds, "stalled: change (< 2 points)": show(v.stalled, 2),
                         "points below the ceiling (≥ 15)": show(v.below_ceiling, 1),
                         "final entropy (< 1/3 of the warm start's)": show(v.entropy_collapsed, 3),
                         "plateau": "holds" if p.held_for(arm) else "does not hold"})
        rule = setting_by_rule(p.plain)
        c = p.ceiling
        ceiling = f"{100 * c.value:.1f}% ({c.source})" if c.value is not None else f"unknown ({c.source})"
        out += [f"### How the {name} setting was chosen", "",
                f"`{sw.path}`: plain {', '.join(sorted({sw.data.sweep.info[a][0] for a in p.plain})) or '–'} alone at each "
                f"setting, before any other arm ran there; ceiling {ceiling}. The rule (docs/method.md): the setting "
                "whose plain arm passes all three criteria, the smallest change among several; else the most criteria, "
                "then the smallest change.", "", table(pd.DataFrame(rows), "No plain arm with evaluations."), "",
                f"The rule keeps **{rule or '–'}**; the study file states `{kept}`"
                + ("." if rule == kept else " — **they differ**: the claims sweep did not run the setting the rule keeps."), ""]
    return out


def design_rows(beds: tuple[Testbed, ...]) -> pd.DataFrame:
    """Per testbed and declared family: units, α, margin, and the smallest |Δ| the members' tests
    detect at the family's power (the range over members, measured SD)."""
    rows = []
    for tb in beds:
        spec = tb.data.sweep.spec
        for fam in (spec.families_declared() if spec is not None else []):
            comps = tb.family(fam.name)
            det = [100 * c.detectable for c in comps if math.isfinite(c.detectable)]
            units = sorted({c.delta.n for c in comps})
            sds = [100 * c.delta.sd for c in comps if math.isfinite(c.delta.sd) and c.delta.sd > 0]
            m = max(1, sum(1 for c in comps if c.delta.testable))
            tost = (f"{units_for_tost(max(sds), fam.margin, m, fam.power, fam.alpha)}" if fam.margin is not None and sds
                    else "–")
            rows.append({"testbed": tb.name, "family": fam.name, "members": len(fam.pairs),
                         "units": ", ".join(map(str, units)) or "–", "α": f"{fam.alpha:g}",
                         "margin (points)": f"±{fam.margin:g}" if fam.margin is not None else "none",
                         f"detectable |Δ| at power {fam.power:g} (points)":
                             (f"{min(det):.1f}–{max(det):.1f}" if det else "–"),
                         "stated effect (points)": f"{fam.mde:g}",
                         "units TOST needs at the largest measured SD": tost})
    return pd.DataFrame(rows)


# --- claim (e): sharpening against the final level, the unit as the unit ---------------------------------


def early_metric(run: Run, key: str, fraction: float) -> float:
    """A run's mean of ``key`` over its first ``fraction`` of logged steps (NaN if none)."""
    vals = [m.get(key) for m in run.metrics if finite(m.get(key))]
    if not vals:
        return math.nan
    return float(np.mean(vals[:max(1, math.ceil(fraction * len(vals)))]))


def mixed_prompts(run: Run, fraction: float, early: bool) -> float:
    """The mean number of mixed prompts (groups/frac_mixed × P) at the steps whose κ_eff the window
    averages: what κ_eff rests on."""
    p = ((run.config or {}).get("rollout") or {}).get("prompts_per_step")
    vals = [m.get("groups/frac_mixed") for m in run.metrics if finite(m.get("kappa_eff")) and finite(m.get("groups/frac_mixed"))]
    if not vals or not p:
        return math.nan
    n = max(1, math.ceil(fraction * len(vals)))
    return float(np.mean(vals[:n] if early else vals[-n:])) * p


SHARPENING = (("kappa_eff", "κ_eff"), ("entropy", "entropy"))


def sharpening_points(runs: list[Run], benchmark: str, fraction: float) -> pd.DataFrame:
    """One row per run: its unit, final held-out pass@1, and each sharpening measure over the last
    quarter (same time) and over the early window (lagged), with the mixed prompts κ_eff rests on."""
    rows = []
    for r in runs:
        row = {"arm": r.arm, "unit": r.unit, "y": final_heldout(r, benchmark),
               "mixed_late": mixed_prompts(r, 0.25, False), "mixed_early": mixed_prompts(r, fraction, True)}
        for key, _ in SHARPENING:
            row[f"{key}_late"] = tail_mean([m.get(key) for m in r.metrics if finite(m.get(key))])
            row[f"{key}_early"] = early_metric(r, key, fraction)
        rows.append(row)
    return pd.DataFrame(rows)


def within_unit(points: pd.DataFrame, x: str):
    """rmcorr of ``x`` with final pass@1, each run centred on its unit's mean over arms (arms nested in
    units): a `rbctl.report.stats.Correlation` with N − U − 1 df (U units)."""
    ok = points[["unit", x, "y"]].dropna()
    ok = ok[ok.groupby("unit")["y"].transform("size") >= 2]
    if ok.empty:
        return pearson_ci([], [])
    centred = ok[[x, "y"]] - ok.groupby("unit")[[x, "y"]].transform("mean")
    return pearson_ci(centred[x], centred["y"], groups=ok["unit"].nunique())


@dataclass(frozen=True)
class Sharpening:
    testbed: str
    rows: pd.DataFrame  # measure, window, r, interval, p, Holm p (lagged pair), units, df, expected sign, status
    call: str
    mixed: str  # what κ_eff rests on


def sharpening(tb: Testbed, expect, runs: list[Run] | None = None) -> Sharpening:
    pts = sharpening_points(runs if runs is not None else tb.runs, tb.benchmark, expect.early_fraction)
    rows = []
    for key, name in SHARPENING:
        want = getattr(expect, key)
        for window, col in (("same time (last quarter)", f"{key}_late"),
                            (f"lagged (first {expect.early_fraction:g} of steps)", f"{key}_early")):
            c = within_unit(pts, col)
            units = pts.dropna(subset=[col, "y"])["unit"].nunique()
            rows.append({"measure": name, "window": window, "runs": int(pts[col].notna().sum()), "units": units,
                         "df": c.df, "r": c.r, "r_lo": c.lo, "r_hi": c.hi, "p": c.p, "expected": want})
    df = pd.DataFrame(rows)
    lagged = df["window"].str.startswith("lagged")
    adj, _ = holm(df.loc[lagged, "p"].to_numpy(), ALPHA)
    df["p_holm"] = math.nan
    df.loc[lagged, "p_holm"] = adj
    # lagged: the call's tests, Holm-adjusted; same time: shown against its unadjusted p, labelled so
    df["status"] = [status(r, ph if lag else p, e) + ("" if lag or not math.isfinite(p) else " (unadjusted)")
                    for r, p, ph, e, lag in zip(df["r"], df["p"], df["p_holm"], df["expected"], lagged)]
    k = df[lagged & (df["measure"] == "κ_eff")]["status"].iloc[0]
    e = df[lagged & (df["measure"] == "entropy")]["status"].iloc[0]
    verdict = ("holds: early κ_eff predicts the final level with the expected sign, early entropy does not" if k == "expected"
               and e != "expected" else
               "not separated: both predict the final level with their expected signs" if k == "expected" else
               "fails: early κ_eff predicts the final level with the opposite sign" if k == "opposite" else
               "fails: early entropy predicts the final level, early κ_eff does not" if e == "expected" else
               "inconclusive: neither early measure predicts the final level at α (Holm over the two lagged tests)")
    late, early = pts["mixed_late"].dropna(), pts["mixed_early"].dropna()
    mixed = (f"κ_eff rests on {late.mean():.1f} mixed prompts a measured step in the last quarter "
             f"({early.mean():.1f} in the early window), mean over runs" if len(late) else "κ_eff: no mixed-prompt counts logged")
    return Sharpening(tb.name, df, verdict, mixed)


def status(r: float, p_holm: float, expected: str) -> str:
    """"expected" / "opposite" (significant at α, by the sign of r), "not significant", or "–" untested."""
    if not (math.isfinite(r) and math.isfinite(p_holm)):
        return "–" if not math.isfinite(r) else "not significant"
    if p_holm > ALPHA:
        return "not significant"
    return "expected" if (r < 0) == (expected == "negative") else "opposite"


# --- the claims ------------------------------------------------------------------------------------------


def claim_a(beds: tuple[Testbed, ...], family: str) -> tuple[str, str]:
    comps = [(tb, c) for tb in beds for c in tb.members(family, "budget")]
    calls = {(label(tb.data.sweep.info[c.arm][0]), tb.name): call(c) for tb, c in comps}
    higher = sorted({b for (b, _), v in calls.items() if v == HIGHER})
    lower = sorted(f"{b} ({t})" for (b, t), v in calls.items() if v == LOWER)
    rest = [v for (b, _), v in calls.items() if b not in higher]
    measured = "; ".join(f"{b} on {t}: {v}" for (b, t), v in sorted(calls.items())) or "not run"
    if not calls:
        return measured, "not tested (no member of the family has runs)"
    if lower:
        return measured, f"fails: lower for {', '.join(lower)}"
    if len(higher) >= 2:
        return measured, f"holds: higher for {', '.join(higher)}"
    if len({b for b, _ in calls}) < 2:  # "several baselines" needs at least two to be run
        return measured, f"not tested: one baseline run ({next(iter(calls))[0]}: {', '.join(sorted(set(calls.values())))})"
    if all(v == EQUIVALENT for v in rest):
        return measured, f"fails: {'only ' + higher[0] + ' is higher' if higher else 'no baseline is higher'}; the others are equivalent"
    return measured, (f"inconclusive: {'only ' + higher[0] if higher else 'no baseline'} called higher, "
                      f"{sum(v == INCONCLUSIVE for v in rest)} inconclusive")


def entropy_rose(tb: Testbed, c: Comparison) -> tuple[bool, str]:
    """Whether an entropy arm's last-quarter entropy is above its reference's (paired over units, t-test
    at α, unadjusted): a bonus that did not raise entropy did not do what it is for."""
    d = paired_delta(tb.entropy_per_unit(c.arm), tb.entropy_per_unit(c.ref))
    rose = d.testable and d.p <= ALPHA and d.mean > 0
    return rose, f"entropy Δ {d.mean:+.3f} nats/token (p {pval(d.p, 'not testable')}, {d.n} units)"


def claim_b(beds: tuple[Testbed, ...], family: str | None) -> tuple[str, str]:
    if not family:
        return "the study file names no X + entropy − X family", "not tested"
    parts, tested = [], []
    for tb in beds:
        if not tb.declares(family):
            parts.append(f"{tb.name}: family '{family}' not declared")
            continue
        for c in tb.members(family, "entropy_vs_base"):
            if not tb.data.plateau.held_for(c.ref):
                parts.append(f"{tb.name} {c.label}: not applicable (the plateau test does not hold for {c.ref})")
                continue
            rose, why = entropy_rose(tb, c)
            parts.append(f"{tb.name} {c.label}: {call_text(c)}; {why}{'' if rose else ' — entropy did not rise: not tested'}")
            if rose:
                tested.append(call(c))
    measured = "; ".join(parts) or "not run"
    if not tested:
        return measured, "not tested: no member whose plain X plateaus and whose bonus raised entropy"
    if all(v == HIGHER for v in tested):
        return measured, "fails: the bonus raised pass@1 wherever it raised entropy"
    if HIGHER in tested:
        return measured, f"fails in part: higher in {tested.count(HIGHER)} of {len(tested)}"
    if all(v in (EQUIVALENT, LOWER) for v in tested):
        return measured, "holds: equivalent or lower wherever the bonus raised entropy"
    return measured, f"inconclusive: {tested.count(INCONCLUSIVE)} of {len(tested)} inconclusive, none higher"


def claim_c(beds: tuple[Testbed, ...], family: str) -> tuple[str, str]:
    kept = []
    for tb in beds:
        for c in tb.members(family, "budget"):
            if call(c) == HIGHER:
                eb, ex = tb.entropy(c.arm)[0], tb.entropy(c.ref)[0]
                kept.append((f"{label(tb.data.sweep.info[c.arm][0])} {tb.name}: {eb:.3f} vs X {ex:.3f} nats/token", eb <= ex))
    if not kept:
        return "no member called higher", "not tested (no improvement to examine)"
    return ("; ".join(k for k, _ in kept), "holds: at or below X's entropy wherever the budget is higher"
            if all(b for _, b in kept) else "fails: the budget keeps more entropy than X where it is higher")


def claim_d() -> tuple[str, str, list[dict]]:
    from rbctl.algo.sharpness import kappa_by_k  # torch: imported where the analytic claims are computed

    k = kappa_by_k()
    falls = all(k[i]["grpo + budget"] > k[i + 1]["grpo + budget"] for i in range(len(k) - 1))
    rises = k[-1]["grpo"] > k[len(k) // 2]["grpo"]
    measured = ("GRPO + budget κ: " + ", ".join(f"{x['grpo + budget']:.3f}" for x in k) + "; GRPO κ: "
                + ", ".join(f"{x['grpo']:.2f}" for x in k))
    return measured, "holds" if falls and rises else "fails", k


def claim_f() -> tuple[str, str]:
    from rbctl.algo.sharpness import finite_g_check

    worst, best = finite_g_check()
    return (f"largest relative error of GRPO + budget {worst:.1e}; GRPO's smallest {best:.2f} (not the gradient)",
            "holds" if worst < 1e-6 and best > 1e-3 else "fails")


def long_rows(tb: Testbed, main_step: int, family: str) -> tuple[pd.DataFrame, list[str]]:
    """Per member of the long sweep's family: Δ at the testbed's horizon (periodic evaluation; p
    unadjusted, exploratory) and the final level's call (the declared family: equivalence by TOST at
    its margin), with one sentence each."""
    rows, lines = [], []
    for c in tb.family(family):
        a, b = tb.data.sweep.by_arm[c.arm], tb.data.sweep.by_arm[c.ref]
        d0 = paired_delta(at_step(a, main_step, tb.benchmark), at_step(b, main_step, tb.benchmark), bounds=DELTA_BOUNDS)
        last = max((int(s) for r in a for s in run_series(r, "avg@n", tb.benchmark).index), default=math.nan)
        ahead = d0.testable and d0.p <= ALPHA and d0.mean > 0
        rows.append({"comparison": c.label, "units": c.delta.n,
                     f"Δ at step {main_step} (periodic; p unadj.)": f"{delta(d0.mean, d0.lo, d0.hi)}, p {pval(d0.p, 'not testable')}",
                     "Δ final (declared family)": delta(c.delta.mean, c.delta.lo, c.delta.hi),
                     "Holm p": pval(c.p_holm, "–"), "call (final level)": call_text(c)})
        what = ("faster, same final level" if ahead and call(c) == EQUIVALENT else
                "ahead at the horizon; final level " + call_text(c) if ahead else
                f"final level {call_text(c)}")
        lines.append(f"{tb.name}, {c.label}: {delta(d0.mean, d0.lo, d0.hi)} at step {main_step} (p {pval(d0.p, 'not testable')}, "
                     f"unadjusted), {delta(c.delta.mean, c.delta.lo, c.delta.hi)} at the final evaluation"
                     f"{f' (step {last})' if math.isfinite(last) else ''}: **{what}**.")
    return pd.DataFrame(rows), lines


def pass_at_k_lines(tb: Testbed) -> list[str]:
    keys = sorted({k for r in tb.runs for e in r.evals for k in e if k.startswith("pass@") and k != "pass@1"},
                  key=lambda s: int(s[5:]))
    if not keys:
        return []
    kk = keys[-1]
    out = []
    for arm, runs in sorted(tb.data.sweep.by_arm.items()):
        steps = sorted({int(s) for r in runs for s in run_series(r, kk, tb.benchmark).index})
        if not steps:
            continue
        first, last = at_step(runs, steps[0], tb.benchmark, kk), at_step(runs, steps[-1], tb.benchmark, kk)
        p1 = at_step(runs, steps[-1], tb.benchmark)
        out.append(f"{arm}: {kk} {pct(np.mean(list(first.values())))} → {pct(np.mean(list(last.values())))}, "
                   f"pass@1 {pct(np.mean(list(p1.values())) if p1 else math.nan)} at step {steps[-1]}")
    return out


# --- the document ----------------------------------------------------------------------------------------


def provenance_lines(beds) -> tuple[list[str], list[str]]:
    """One line per sweep, and every commit the study's runs came from."""
    out, commits = [], set()
    for tb in beds:
        p = provenance(tb.path, short=True, runs=tb.runs)
        mine = p.commit_list
        commits |= set(mine)
        same = same_training_code(mine)
        out.append(f"- {tb.name}: `{tb.path}` — {len(tb.runs)} runs, code {p.commits}"
                   f"{' (' + same + ')' if same else ''}, last logged {p.last}")
    return out, sorted(commits)


def table(df: pd.DataFrame, empty: str = "None.") -> str:
    return markdown_table(df) if len(df) else empty


def claims_markdown(study: Study, command: str | None = None, today: dt.date | None = None,
                    cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The claims document of ``study``."""
    cfg, beds = study.config, study.testbeds
    fams = cfg.families
    claims_sweeps = [*beds, *(t for t, _, _ in study.long), *(s for _, s, _ in study.selection)]
    prov, commits = provenance_lines(claims_sweeps)  # the claims' own sweeps: one commit's answer, printed once
    if study.main:
        prov += provenance_lines([study.main])[0]  # the main job keeps its own commits (its line says which)
    same = same_training_code(commits)
    out = [f"# {cfg.name}: the study's claims", "",
           f"Generated on {(today or dt.date.today()).isoformat()} by `{command or f'rbctl report {study.source}'}` "
           f"from the study file `{study.source}`; do not edit by hand.", "",
           f"Machine (where this document was generated): {cpu_description(cpuinfo)}.", "",
           *(["Not in this document yet (the study file names them; each sweep resumes where it stopped): "
              + "; ".join(f"{what} ({why})" for what, why in study.pending) + ".", ""] if study.pending else []),
           f"Code of the claims sweeps (testbeds, settings, long horizons): {', '.join(f'`{c}`' for c in commits) or 'unknown'}"
           + (f" ({same})" if same else " (one commit)" if len(commits) == 1 else "") + ".", "", "Runs:", *prov, "",
           "Held-out pass@1 is avg@n of the final evaluation; Δ is paired over units (a (warm start, seed) pair, or a "
           "seed) with a 95% t-interval clipped to [−100, +100]. Every call is the sweep's own: each comparison is a "
           "member of a family its sweep file declares before running, Holm-adjusted within that family, and called "
           "higher, lower, equivalent within the stated margin (TOST), or inconclusive with its direction and the "
           "smallest effect its test could detect (docs/method.md, \"Comparing arms\"). Columns marked unadjusted "
           "are exploratory.", ""]
    out += ["## 1. The testbeds", "", "Plateau test of each plain baseline X (docs/method.md, \"Premature convergence\"): "
            "a claim that speaks of the plateau is read only where it holds.", "", table(plateau_rows(beds)), "",
            "Design of each declared family: the smallest |Δ| each member's test detects with its units and measured "
            "SD, at α/m.", "", table(design_rows(beds)), "",
            "Loss aggregation each arm ran with (its runs' saved configs):", "", table(aggregation_rows(beds)), "",
            *selection_lines(study)]
    out += [f"## 2. The budget on every baseline (family `{fams.budget}` of each testbed)", "",
            "X + budget − X. The warm-start column takes each warm start's mean Δ as one unit (what generalises to "
            "another warm start; unadjusted).", "", table(family_rows(beds, fams.budget, "budget"), "No member has runs."), ""]
    escapes = escape_family(study)
    out += escape_lines(study, escapes)
    for key, title in (("entropy_vs_budget", "The entropy bonus against the budget"),
                       ("entropy_vs_base", "The entropy bonus against the baseline")):
        name = getattr(fams, key)
        if name:
            out += [f"## {title} (family `{name}`)", "", table(family_rows(beds, name, key),
                                                                "No member has runs."), ""]
    ent = []
    for tb in beds:
        for arm in sorted(tb.data.sweep.by_arm):
            m = tb.entropy(arm)
            ent.append({"testbed": tb.name, "arm": arm, "last-quarter entropy (nats/token) [95% CI]":
                        f"{m[0]:.3f} [{m[1]:.3f}, {m[2]:.3f}]" if math.isfinite(m[1]) else f"{m[0]:.3f}"})
    out += ["## 3. Entropy per arm", "", table(pd.DataFrame(ent)), ""]
    if study.long:
        out += ["## 4. The long horizon", ""]
        for tb, main_step, family in study.long:
            rows, lines = long_rows(tb, main_step, family)
            out += [f"### {tb.name}", "", *lines, "", table(rows, "No member of the family has runs."), ""]
    sharp = [sharpening(tb, cfg.expect) for tb in ([study.main] if study.main else []) + list(beds)]
    out += ["## 5. Sharpening and the final level", "",
            f"Pearson r of each measure with the final held-out pass@1, each run centred on its unit's mean over the "
            f"arms (rmcorr with the unit as the subject: arms nested in units; N runs, U units, N − U − 1 df). Same "
            f"time: the last "
            f"quarter's mean; lagged: the first {cfg.expect.early_fraction:g} of the logged steps. The expected "
            f"signs were stated in the study file before running: κ_eff {cfg.expect.kappa_eff}, entropy "
            f"{cfg.expect.entropy}. Holm over the two lagged tests per testbed; the same-time p is unadjusted.", ""]
    for s in sharp:
        shown = s.rows.assign(**{"r [95% CI]": [f"{r:+.2f} [{lo:+.2f}, {hi:+.2f}]" if math.isfinite(r) else "–"
                                                for r, lo, hi in zip(s.rows["r"], s.rows["r_lo"], s.rows["r_hi"])],
                                 "p (unadj.)": [pval(p, "–") for p in s.rows["p"]],
                                 "Holm p": [pval(p, "–") for p in s.rows["p_holm"]]})
        out += [f"### {s.testbed}", "", f"{s.mixed}. Call: **{s.call}**.", "",
                markdown_table(shown[["measure", "window", "runs", "units", "df", "r [95% CI]", "p (unadj.)", "Holm p",
                                      "expected", "status"]]), ""]
    a_m, a_v = claim_a(beds, fams.budget)
    b_m, b_v = claim_b(beds, fams.entropy_vs_base)
    c_m, c_v = claim_c(beds, fams.budget)
    d_m, d_v, k = claim_d()
    f_m, f_v = claim_f()
    g = [f"{tb.name}: " + "; ".join(pass_at_k_lines(tb)) for tb, _, _ in study.long if pass_at_k_lines(tb)]
    plateau_beds = [tb.name for tb in beds if tb.plateau_held]  # (g) compares GRPO ± budget
    speed = "; ".join(f"{label(m.comparison.baseline)} on {m.sweep}: {escape_word(m.comparison)}" for m in escapes)
    rows = [("(a) The budget improves several RL baselines", f"§2, family `{fams.budget}` per testbed", a_m, a_v),
            *([("(a, speed) The budget leaves the shortcut sooner", "§2b, the study's family `escape`",
                speed or "no sweep logs the escape signal", "each member called in §2b (not a claim of the paper)")]
              if cfg.escape is not None else []),
            ("(b) Raising entropy does not reliably move the plateau",
             (f"family `{fams.entropy_vs_base}` where the plateau holds and entropy rose" if fams.entropy_vs_base
              else "no family named for X + entropy − X"), b_m, b_v),
            ("(c) The budget's gains come without preserving entropy", "§3 where §2 calls the budget higher", c_m, c_v),
            ("(d) The advantage gap shrinks as more rollouts are right (κ falls with K)",
             "`rbctl.algo.sharpness.kappa` on one group of G = 8, K = 1…7 (below)", d_m, d_v),
            *[("(e) κ_eff, not entropy, tracks premature sharpening", f"§5, {s.testbed}",
               f"{s.mixed}; lagged: " + ("; ".join(f"{m} r {r:+.2f} (Holm p {pval(p, '–')})" for m, r, p in
                                                   zip(s.rows["measure"], s.rows["r"], s.rows["p_holm"])
                                                   if math.isfinite(p)) or "no testable association")
               + f" over {s.rows['units'].max()} units", s.call) for s in sharp],
            ("(f) The unclipped budgeted estimator follows the gradient of the finite-G objective",
             "exact expectation over all 2^8 outcomes", f_m, f_v),
            ("(g) The budget keeps pass@k where GRPO's collapses",
             "§4's long sweeps (periodic evaluation; means over units)" + (
                 "" if plateau_beds else "; no testbed shows the plateau, so this is not about the plateau"),
             "; ".join(g) or "not run", "measured, not called")]
    kt = markdown_table(pd.DataFrame([{kk: (f"{vv:.3f}" if isinstance(vv, float) else vv) for kk, vv in r.items()}
                                      for r in k]))
    out += ["## 6. The claims", "", markdown_table(pd.DataFrame(rows, columns=["claim", "where tested", "measured",
                                                                               "at CPU scale"])), "",
            "κ per K (binary rewards, G = 8, B = 1):", "", kt, ""]
    return "\n".join(out)


def readme_block(study: Study) -> str:
    """One line per baseline of the budget family (its call on each testbed), and the long horizon's lines."""
    out = []
    fam = study.config.families.budget
    for b, name in BASELINES:
        parts = [f"{tb.name} {call_text(c)} ({delta(c.delta.mean, c.delta.lo, c.delta.hi)}, Holm p {pval(c.p_holm, '–')})"
                 for tb in study.testbeds for c in tb.members(fam, "budget") if tb.data.sweep.info[c.arm][0] == b]
        if parts:
            out.append(f"- **{name} + budget vs {name}** — " + "; ".join(parts))
    for tb, main_step, family in study.long:
        out += [f"- Long horizon: {line}" for line in long_rows(tb, main_step, family)[1]]
    if study.pending:
        out.append("- Not in these lines yet: " + "; ".join(f"{what} ({why})" for what, why in study.pending))
    return "\n".join(out)


CLAIMS_MD = "claims.md"


def is_study_file(path: Path) -> bool:
    """Whether ``path`` is a study file (a YAML mapping with ``testbeds``) rather than a run directory."""
    path = Path(path)
    if not (path.is_file() and path.suffix in (".yaml", ".yml")):
        return False
    return "testbeds" in read_yaml(path)


def make_study_report(path: Path, out: Path | None = None, command: str | None = None, n_boot: int = 1000) -> Path:
    """Read the study file ``path`` and every sweep it names, write ``OUT/claims.md`` (default OUT:
    runs/<study name>) and return its path."""
    from rbctl.store.atomic import write_atomic

    study = load_study(path, n_boot)
    out = Path(out) if out is not None else Path("runs") / study.config.name
    out.mkdir(parents=True, exist_ok=True)
    target = out / CLAIMS_MD
    write_atomic(target, claims_markdown(study, command) + "\n", kind="report")
    return target
