"""`rbctl report`: assembling report.md from run directories (`make_report`), and the CLI's table of
final scores (`final_scores_table`).

Output folder: ``report.md`` (generated summary, every table, every figure, relative links);
``tables/<name>.{csv,md,tex}`` (CSV: fractions in long form; Markdown/LaTeX: percent with 95%
intervals); ``figures/<name>.{png,svg}``; ``data/*.csv`` (the numbers behind the curves).
Statistics follow docs/method.md, "Comparing arms": the seed is the unit of replication; every
stated comparison is a paired per-seed Δ with a t-interval, Holm–Bonferroni adjusted as one family.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd

from rbctl.errors import UserError
from rbctl.store.atomic import write_atomic
from rbctl.report import diagnostics as diag
from rbctl.report.compare import ALPHA, ArmScores, Comparison, all_comparisons, arm_scores, common_problems, sentence
from rbctl.report.figures import arm_styles, panel_groups, plot_pass_at_k, plot_scatter, plot_trajectory, save_figure
from rbctl.report.load import Issue, Run, default_out, find_runs, read_ceiling
from rbctl.report.series import KAPPA_EFF_WINDOW, band, seed_frame
from rbctl.report.stats import bootstrap_mean_ci, t_interval
from rbctl.report.tables import delta, finite, num, pct, points_list, with_ci, write_csv, write_table

# (metrics.jsonl key, file slug, title, y label, rolling window). No response-length panel: the
# built-in tasks' length follows the prompt mix, identical across arms.
TRAJECTORIES = (
    ("reward/mean", "reward", "Training reward (reward/mean)", "reward per rollout", 1),
    ("entropy", "entropy", "Token entropy (pre-update policy)", "entropy (nats/token)", 1),
    ("kappa", "kappa", "Nominal sharpness κ", "κ (advantage gap per unit reward gap)", 1),
    ("kappa_eff", "kappa_eff", f"Measured sharpness κ_eff (rolling mean of {KAPPA_EFF_WINDOW})",
     "κ_eff (log-ratio gap per unit reward gap)", KAPPA_EFF_WINDOW),
)
PLATEAU_ARM = ("grpo", "base")


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "x"


def _n(count: int, word: str) -> str:
    return f"{count} {word}{'s' * (count != 1)}"


def seed_interval(per_seed: list[float], per_problem_single=None) -> tuple[float, float, float, str]:
    """(mean, lo, hi, basis): t-interval over seeds; with one seed a bootstrap over its problems."""
    if len(per_seed) >= 2 or per_problem_single is None:
        return (*t_interval(per_seed), "t over seeds")
    return (float(per_seed[0]), *bootstrap_mean_ci(per_problem_single), "bootstrap over problems (1 seed)")


class _Report:
    """The state the sections share: runs by arm, scores, comparisons, summary lines, Markdown."""

    def __init__(self, runs: list[Run], issues: list[Issue], out: Path, dirs: list[Path], n_boot: int):
        self.runs, self.issues, self.out, self.dirs, self.n_boot = runs, issues, out, dirs, n_boot
        self.arms = sorted({r.arm for r in runs})
        self.by_arm = {a: [r for r in runs if r.arm == a] for a in self.arms}
        self.info = {a: (rs[0].baseline, rs[0].variant) for a, rs in self.by_arm.items()}
        self.styles, self.groups = arm_styles(self.info), panel_groups(self.info)
        self.tables, self.figures, self.data = out / "tables", out / "figures", out / "data"
        for d in (self.tables, self.figures, self.data):
            d.mkdir(parents=True, exist_ok=True)
        self.md: list[str] = []
        self.summary: list[str] = []
        self.scores: dict[tuple[str, str], ArmScores] = {}
        self.benchmarks: list[str] = []
        self.comparisons: list[Comparison] = []
        self.ceiling = None

    def figure(self, fig, slug: str, alt: str) -> None:
        png = save_figure(fig, self.figures, slug)
        self.md += [f"![{alt}](figures/{png.name})", ""]

    def runs_section(self) -> None:
        rows = []
        for r in self.runs:
            notes = [n for n, bad in (("no eval.jsonl", not r.evals), ("no final evaluation", not r.finals)) if bad]
            if r.config_steps and r.last_step < r.config_steps:
                notes.append(f"stopped at step {r.last_step} of {r.config_steps}")
            if r.final_step is not None and r.final_step < r.last_step:
                notes.append(f"final evaluation at step {r.final_step}")
            rows.append({"run": r.name, "arm": r.arm, "seed": r.seed, "baseline": r.baseline, "variant": r.variant,
                         "sweep": r.sweep or "", "status": r.status, "last_step": r.last_step,
                         "config_steps": r.config_steps, "final_eval_step": "" if r.final_step is None else r.final_step,
                         "benchmarks": ",".join(sorted(r.finals)), "notes": "; ".join(notes), "path": str(r.path)})
            if r.finals == {} and r.status in ("", "done"):
                self.issues.append(Issue(r.name, "no final evaluation", f"nothing under {r.path / 'eval'}/step_*"))
        numbers = pd.DataFrame(rows)
        shown = numbers[["run", "baseline", "variant", "status", "last_step", "final_eval_step", "notes"]]
        shown.columns = ["run", "baseline", "variant", "status", "steps logged", "final eval step", "notes"]
        self.md += ["## Runs", "", f"{_n(len(self.runs), 'run')}, {_n(len(self.arms), 'arm')}.", "",
                    write_table(numbers, shown, self.tables, "runs")]
        if self.issues:
            self.md += ["### Failed, unfinished or missing runs", ""]
            self.md += [f"- **{i.name}**: {i.status}" + (f" — {i.detail}" if i.detail else "") for i in self.issues]
            self.md.append("")

    def _score_row(self, sc: ArmScores) -> dict:
        row = {"arm": sc.arm, "baseline": self.info[sc.arm][0], "variant": self.info[sc.arm][1],
               "benchmark": sc.benchmark, "seeds": len(sc.seeds), "seed_list": ",".join(map(str, sc.seeds)),
               "problems": len(sc.ids), "n": sc.kmax, "k": sc.kmax,
               "eval_steps": ",".join(map(str, sorted(set(sc.steps))))}
        for name, values in (("avg", sc.accuracy), ("pass_k", sc.pass_at(sc.kmax))):
            per_seed = list(values.mean(axis=1))
            m, lo, hi, basis = seed_interval(per_seed, values[0] if len(per_seed) == 1 else None)
            row.update({name: m, f"{name}_lo": lo, f"{name}_hi": hi,
                        f"{name}_per_seed": ",".join(f"{v:.4f}" for v in per_seed)})
        row["interval"] = basis
        m, lo, hi = t_interval([sc.maj[s] for s in sc.seeds]) if sc.maj else (math.nan,) * 3
        row.update({"maj_k": sc.maj_k, "maj": m, "maj_lo": lo, "maj_hi": hi})
        return row

    def final_section(self) -> None:
        rows, curve_rows = [], []
        for bench in sorted({b for r in self.runs for b in r.finals}):
            having = [r for r in self.runs if bench in r.finals and r.finals[bench].get("per_problem")]
            ids = common_problems(having, bench) if having else []
            if not ids:
                self.issues.append(Issue(bench, "no shared problems", "the runs' final evaluations share no problem id"))
                continue
            self.benchmarks.append(bench)
            if {len(r.finals[bench]["per_problem"]) for r in having} != {len(ids)}:
                self.md += [f"Note: {bench} is scored on the {len(ids)} problems every run evaluated.", ""]
            for arm in self.arms:
                arm_runs = [r for r in having if r.arm == arm]
                if not arm_runs:
                    continue
                sc = self.scores[arm, bench] = arm_scores(arm_runs, bench, ids)
                rows.append(self._score_row(sc))
                for k in range(1, sc.kmax + 1):
                    per_seed = list(sc.pass_at(k).mean(axis=1))
                    v, lo, hi = t_interval(per_seed)
                    curve_rows.append({"arm": arm, "benchmark": bench, "k": k, "value": v, "lo": lo, "hi": hi,
                                       "seeds": len(per_seed)})
        self.md += ["## Final scores", ""]
        if not rows:
            self.md += ["No final evaluations found (`rbctl eval RUN` writes RUN/eval/step_XXXXXX/).", ""]
            return
        numbers = pd.DataFrame(rows)
        maj = [f"maj@{int(k)} " + with_ci(v, lo, hi) if finite(k) else "–"
               for k, v, lo, hi in zip(numbers["maj_k"], numbers["maj"], numbers["maj_lo"], numbers["maj_hi"])]
        shown = pd.DataFrame({
            "arm": numbers["arm"], "benchmark": numbers["benchmark"], "seeds": numbers["seeds"],
            "problems × n": [f"{p} × {n}" for p, n in zip(numbers["problems"], numbers["n"])],
            "avg@n % [95% CI]": [with_ci(*x) for x in zip(numbers["avg"], numbers["avg_lo"], numbers["avg_hi"])],
            "pass@k (k = n) % [95% CI]": [with_ci(*x) for x in zip(numbers["pass_k"], numbers["pass_k_lo"],
                                                                    numbers["pass_k_hi"])],
            "maj@k % [95% CI]": maj, "interval": numbers["interval"]})
        self.md += ["Each seed's score is its mean over the problems; shown: the mean over seeds with a 95% "
                    "t-interval over seeds (n − 1 df; a bootstrap over problems where an arm has one seed). avg@n "
                    "is pass@1 from n samples; pass@k is unbiased at k = n; maj@k (largest k ≤ n the evaluation "
                    "logged) is each seed's summary value, over all the problems it evaluated.", "",
                    write_table(numbers, shown, self.tables, "final_scores")]
        curves = pd.DataFrame(curve_rows)
        write_csv(curves, self.data / "pass_at_k.csv")
        for bench in self.benchmarks:
            c = curves[curves["benchmark"] == bench]
            fig = plot_pass_at_k({a: g for a, g in c.groupby("arm", sort=True)}, self.styles, self.groups, bench)
            self.figure(fig, f"pass_at_k_{_slug(bench)}", f"pass@k on {bench}")

    @staticmethod
    def _comparison_row(c: Comparison) -> dict:
        d = c.delta
        return {"kind": c.kind, "baseline": c.baseline, "arm": c.arm, "ref": c.ref, "benchmark": c.benchmark,
                "metric": c.metric, "k": c.k, "arm_score": c.arm_score, "ref_score": c.ref_score, "delta": d.mean,
                "delta_lo": d.lo, "delta_hi": d.hi, "p": d.p, "p_holm": c.p_holm, "significant": c.significant,
                "seeds": d.n, "seed_list": ",".join(map(str, d.seeds)),
                "per_seed_delta": ",".join(f"{x:.4f}" for x in d.deltas), "hb_lo": c.hb_lo, "hb_hi": c.hb_hi}

    def comparison_section(self) -> None:
        self.comparisons = all_comparisons(self.info, self.scores, self.benchmarks, self.n_boot, ALPHA)
        self.md += ["## Comparisons (paired by seed)", ""]
        if not self.comparisons:
            self.md += ["No stated comparison (baseline + budget vs baseline; entropy arm vs baseline + budget "
                        "and vs baseline) has final evaluations on both sides.", ""]
            return
        family = len(self.comparisons)
        self.summary += [sentence(c, family) for c in self.comparisons]
        numbers = pd.DataFrame([self._comparison_row(c) for c in self.comparisons])
        shown = pd.DataFrame({
            "comparison": [f"{a} − {r}" for a, r in zip(numbers["arm"], numbers["ref"])],
            "benchmark": numbers["benchmark"], "metric": numbers["metric"], "seeds": numbers["seeds"],
            "Δ points [95% t-CI, unadj.]": [delta(*x) for x in zip(numbers["delta"], numbers["delta_lo"],
                                                                   numbers["delta_hi"])],
            "per-seed Δ": [points_list(c.delta.deltas) for c in self.comparisons],
            "hier. bootstrap [95%]": [delta(d, lo, hi) for d, lo, hi in zip(numbers["delta"], numbers["hb_lo"],
                                                                             numbers["hb_hi"])],
            "Holm p": [num(p, 3) for p in numbers["p_holm"]],
            "significant": ["yes" if s else "no" for s in numbers["significant"]]})
        self.md += [f"Δ = arm − reference per seed, over the seeds both arms have; mean Δ with a 95% t-interval "
                    f"over seeds (n − 1 df), not adjusted for multiplicity; a hierarchical bootstrap (seeds, then "
                    f"problems within seeds) beside it. \"significant\": Holm–Bonferroni adjusted p ≤ {ALPHA} over "
                    f"all {family} comparisons of this report.", "",
                    write_table(numbers, shown, self.tables, "comparisons")]
        budget = numbers[numbers["kind"] == "budget_vs_base"]
        for prefix, name in (("avg@n", "budget_vs_base_avg"), ("pass@", "budget_vs_base_pass_k")):
            part = budget[budget["metric"].str.startswith(prefix)]
            if len(part):
                wide = pd.DataFrame({"baseline": part["baseline"], "comparison": part["arm"] + " − " + part["ref"],
                                     "benchmark": part["benchmark"], "metric": part["metric"],
                                     "base": [pct(v) for v in part["ref_score"]],
                                     "budget": [pct(v) for v in part["arm_score"]],
                                     "Δ [95% CI]": [delta(*x) for x in zip(part["delta"], part["delta_lo"],
                                                                           part["delta_hi"])],
                                     "seeds": part["seeds"]})
                self.md += [f"### Budget vs base, {prefix.rstrip('@')}", "", write_table(part, wide, self.tables, name)]

    def descriptive_section(self) -> None:
        numbers = diag.final_descriptives(self.by_arm)
        shown = pd.DataFrame({"arm": numbers["arm"], "seeds": numbers["seeds"]})
        for key, label in diag.DESCRIPTIVE:
            shown[f"final {label} [95% CI]"] = [
                f"{num(m)} [{num(lo)}, {num(hi)}]" for m, lo, hi in
                zip(numbers[f"{key}_final"], numbers[f"{key}_final_lo"], numbers[f"{key}_final_hi"])]
        self.md += ["## Final entropy, κ and κ_eff", "", "Each run's mean over the last quarter of its logged values; "
                    "mean over seeds with a 95% t-interval over seeds (descriptive).", "",
                    write_table(numbers, shown, self.tables, "final_entropy_kappa")]

    def plateau_section(self) -> None:
        self.md += ["## Plateau test (premature convergence)", ""]
        bench = next((b for b in dict.fromkeys(e.get("benchmark") for r in self.runs for e in r.evals) if b),
                     self.benchmarks[0] if self.benchmarks else None)
        self.ceiling = read_ceiling(self.runs, self.dirs, bench)
        arm = next((a for a in self.arms if self.info[a] == PLATEAU_ARM), None)
        ceiling = "unknown" if self.ceiling.value is None else f"{pct(self.ceiling.value)}% ({self.ceiling.source})"
        if arm is None or bench is None:
            self.md += ["No GRPO base arm (baseline grpo, variant base) with held-out evaluations.", ""]
            return
        v = diag.plateau_of_arm(self.by_arm[arm], bench, self.ceiling.value)
        table = diag.plateau_table(arm, v)
        shown = table.assign(held=["not evaluated" if h is None else ("yes" if h else "no") for h in table["held"]])
        shown = shown[["criterion", "held", "detail"]]
        self.md += [f"Arm `{arm}` on {bench}, {_n(v.seeds, 'seed')}; ceiling: {ceiling}. Criteria of docs/method.md: "
                    "held-out pass@1 changes < 2 points over the last quarter, ≥ 15 points below the ceiling, "
                    "final entropy < 1/3 of the warm start's.", "", write_table(table, shown, self.tables, "plateau")]
        self.summary.append(f"Plateau test on {arm} ({bench}, {_n(v.seeds, 'seed')}, ceiling {ceiling}): "
                            + ("the plateau held" if v.held else "the plateau did not hold") + " — "
                            + "; ".join(f"{c.name}: {'not evaluated' if c.held is None else ('yes' if c.held else 'no')}"
                                        for c in v.criteria) + ".")

    def entropy_cause_section(self) -> None:
        if not self.benchmarks:
            return
        bench = self.benchmarks[0]
        points = diag.run_points(self.runs, bench)
        write_csv(points, self.data / "run_finals.csv")
        corr = diag.correlations(points)
        shown = pd.DataFrame({"x": corr["x"].map({"entropy_final": "final entropy", "kappa_eff_final": "final κ_eff"}),
                              "runs": corr["runs"], "n": corr["n"],
                              "Spearman ρ [95% CI]": [f"{num(r, 2)} [{num(lo, 2)}, {num(hi, 2)}]" for r, lo, hi in
                                                      zip(corr["rho"], corr["rho_lo"], corr["rho_hi"])]})
        self.md += ["## Is entropy the cause?", "", f"One point per run (arm × seed): final entropy and final κ_eff "
                    f"(mean over the last quarter of logged values) against held-out pass@1 (avg@n of the final "
                    f"evaluation on {bench}). Spearman ρ with a Fisher-z 95% interval (SE 1.03/√(n − 3); none for "
                    "n < 5), across all runs and within each arm; unadjusted.", "",
                    write_table(corr, shown, self.tables, "entropy_cause")]
        for key, label in (("entropy_final", "final entropy (nats/token)"), ("kappa_eff_final", "final κ_eff")):
            if points[key].notna().any():
                r = corr[(corr["x"] == key) & (corr["runs"] == "all runs")].iloc[0]
                fig = plot_scatter(points, self.styles, key, "heldout_pass1", label, f"held-out pass@1 on {bench}",
                                   f"{label} vs held-out pass@1\none point per run; all runs: Spearman ρ = "
                                   f"{num(r['rho'], 2)} [{num(r['rho_lo'], 2)}, {num(r['rho_hi'], 2)}]")
                self.figure(fig, f"scatter_{key}", f"{label} vs held-out pass@1")

    def trajectory_section(self) -> None:
        self.md += ["## Training trajectories", "", "Mean over the seeds that logged the step; band: 95% t-interval "
                    f"over those seeds. κ_eff: centred rolling mean over {KAPPA_EFF_WINDOW} logged values per seed. "
                    "Dotted line on held-out curves: the ceiling of the plateau test, where known.", ""]
        benches = list(dict.fromkeys(e["benchmark"] for r in self.runs for e in r.evals if "benchmark" in e))
        specs = [TRAJECTORIES[0]] + [(f"heldout:{b}", f"heldout_{_slug(b)}", f"Held-out pass@1 on {b} (avg@n, "
                                      "periodic eval)", "held-out pass@1", 1) for b in benches] + list(TRAJECTORIES[1:])
        data = []
        for key, slug, title, ylabel, window in specs:
            bench = key.split(":", 1)[1] if key.startswith("heldout:") else None
            bands = {}
            for arm in self.arms:
                frame = seed_frame(self.by_arm[arm], key, window, benchmark=bench)
                if not frame.empty:
                    bands[arm] = band(frame)
                    data.append(bands[arm].rename_axis("step").reset_index().assign(arm=arm, metric=key))
            if bands:
                hline = None
                if bench and self.ceiling is not None and self.ceiling.value is not None:
                    hline = (self.ceiling.value, f"ceiling {pct(self.ceiling.value)}%")
                self.figure(plot_trajectory(bands, self.styles, self.groups, title, ylabel, hline), f"traj_{slug}", title)
        if data:
            write_csv(pd.concat(data)[["arm", "metric", "step", "mean", "lo", "hi", "seeds"]],
                      self.data / "trajectories.csv")

    def write(self) -> Path:
        for section in (self.runs_section, self.final_section, self.comparison_section, self.plateau_section,
                        self.descriptive_section, self.entropy_cause_section, self.trajectory_section):
            section()
        seeds = sorted({len(rs) for rs in self.by_arm.values()})
        head = ["# rbctl report", "", "Inputs: " + ", ".join(f"`{d}`" for d in self.dirs), "",
                "## Summary (generated)", "",
                f"Seeds per arm: {', '.join(map(str, seeds))} (the seed is the unit of replication). "
                f"{len(self.comparisons)} comparisons, Holm–Bonferroni adjusted at α = {ALPHA} as one family; "
                "the intervals shown are 95% t-intervals over seeds, unadjusted for multiplicity.", ""]
        head += [f"- {s}" for s in self.summary] or ["- No comparison could be made (see the tables below)."]
        if self.issues:
            head.append("- Incomplete: " + "; ".join(f"{i.name} ({i.status})" for i in self.issues) + ".")
        head.append("")
        path = self.out / "report.md"
        write_atomic(path, "\n".join(head + self.md), kind="report")
        return path


def make_report(dirs: list[Path], out: Path | None = None, n_boot: int = 2000) -> Path:
    """Read every run under ``dirs``, write tables, figures and ``report.md`` into ``out``
    (default: `rbctl.report.load.default_out`), and return the path of report.md."""
    dirs = [Path(d) for d in dirs]
    out = Path(out) if out is not None else default_out(dirs)
    runs, issues = find_runs(dirs)
    if not runs:
        raise UserError("no run with a metrics.jsonl under " + ", ".join(map(str, dirs)))
    out.mkdir(parents=True, exist_ok=True)
    return _Report(runs, issues, out, dirs, n_boot).write()


def final_scores_table(report_dir: Path):
    """A Rich table of a written report's final scores (None when there are none)."""
    from rich.table import Table

    path = Path(report_dir) / "tables" / "final_scores.csv"
    if not path.exists():
        return None
    df = pd.read_csv(path)
    table = Table(title="final scores: % correct [95% t-interval over seeds]")
    for col in ("arm", "benchmark", "seeds", "avg@n", "pass@n", "maj@k"):
        table.add_column(col, justify="left" if col in ("arm", "benchmark") else "right")
    for r in df.itertuples(index=False):
        maj = f"maj@{int(r.maj_k)} {with_ci(r.maj, r.maj_lo, r.maj_hi)}" if finite(r.maj_k) else "–"
        table.add_row(r.arm, r.benchmark, str(r.seeds), with_ci(r.avg, r.avg_lo, r.avg_hi),
                      with_ci(r.pass_k, r.pass_k_lo, r.pass_k_hi), maj)
    return table
