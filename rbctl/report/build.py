"""`rbctl report`: assembling report.md and report.html from run directories (`make_report`), and the
CLI's table of final scores (`final_scores_table`).

Output folder: ``report.md`` and ``report.html`` (the same blocks in the same order: the answer
first, the list of runs last; the HTML self-contained); ``tables/<name>.{csv,md,tex}`` (CSV:
fractions in long form; Markdown/LaTeX: percent with 95% intervals); ``figures/<name>.{png,svg}``;
``data/*.csv`` (the numbers behind the curves). Statistics follow docs/method.md, "Comparing arms"
and "Premature convergence".
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from rbctl.errors import UserError
from rbctl.report import convergence, sections, verdict
from rbctl.report import diagnostics as diag
from rbctl.report.compare import ArmScores, Comparison, all_comparisons, arm_scores, common_problems
from rbctl.report.document import Doc
from rbctl.report.figures import arm_styles, panel_groups, save_figure
from rbctl.report.load import Issue, Run, default_out, find_runs, sweep_settings
from rbctl.report.tables import finite, with_ci, write_table
from rbctl.store.atomic import write_atomic
from rbctl.store.rundir import (EVAL_DIR, REPORT_DATA, REPORT_FIGURES, REPORT_HTML, REPORT_MD, REPORT_TABLES,
                                STEP_PREFIX)


class Report:
    """What the sections share: the runs by arm, the sweep's settings, scores, comparisons, the
    output folders and the document being written."""

    def __init__(self, runs: list[Run], issues: list[Issue], out: Path, dirs: list[Path], n_boot: int):
        self.runs, self.issues, self.out, self.dirs, self.n_boot = runs, issues, out, dirs, n_boot
        self.arms = sorted({r.arm for r in runs})
        self.by_arm = {a: [r for r in runs if r.arm == a] for a in self.arms}
        self.info = {a: (rs[0].baseline, rs[0].variant) for a, rs in self.by_arm.items()}
        self.styles, self.groups = arm_styles(self.info), panel_groups(self.info)
        self.tables, self.figures, self.data = out / REPORT_TABLES, out / REPORT_FIGURES, out / REPORT_DATA
        for d in (self.tables, self.figures, self.data):
            d.mkdir(parents=True, exist_ok=True)
        self.doc = Doc(out)
        self.spec, self.escape, _ = sweep_settings(runs)
        self.warm_starts = sorted({r.warm_start for r in runs if r.warm_start})
        # κ_eff is cumulative over a step's optimizer updates: "" when every arm's are alike, else why
        # the sections do not compare κ_eff between arms
        self.kappa_eff_note = diag.kappa_eff_refusal(self.by_arm)
        self.notes: list[str] = []  # remarks on the data, shown with the final scores
        self.issues += [Issue(r.name, "no final evaluation", f"nothing under {r.path}/{EVAL_DIR}/{STEP_PREFIX}*")
                        for r in runs if not r.finals and r.status in ("", "done")]
        self.scores: dict[tuple[str, str], ArmScores] = self._scores()
        self.benchmarks = sorted({b for _, b in self.scores})
        # the plateau test's ceiling, also drawn on the held-out trajectories
        self.ceiling = convergence.reachable_ceiling(self.by_arm, dirs, convergence.eval_benchmark(self))
        self.comparisons: list[Comparison] = all_comparisons(self.info, self.scores, self.benchmarks, self.spec,
                                                             self.same_config, n_boot)
        self.numbers = verdict.comparison_rows(self, self.comparisons)  # one row per comparison: comparisons.csv

    def _scores(self) -> dict[tuple[str, str], ArmScores]:
        out = {}
        for bench in sorted({b for r in self.runs for b in r.finals}):
            having = [r for r in self.runs if bench in r.finals and r.finals[bench].get("per_problem")]
            ids = common_problems(having, bench) if having else []
            if not ids:
                self.issues.append(Issue(bench, "no shared problems", "the runs' final evaluations share no problem id"))
                continue
            if {len(r.finals[bench]["per_problem"]) for r in having} != {len(ids)}:
                self.notes.append(f"{bench} is scored on the {len(ids)} problems every run evaluated.")
            for arm in self.arms:
                arm_runs = [r for r in having if r.arm == arm]
                if arm_runs:
                    out[arm, bench] = arm_scores(arm_runs, bench, ids)
        return out

    def same_config(self, arm: str, ref: str) -> bool:
        """Whether two arms ran the same training config: every pair of runs of one unit has equal
        configs but for the seed (`Run.training_config`). False when a run has no saved config."""
        a = {r.unit: r for r in self.by_arm[arm]}
        b = {r.unit: r for r in self.by_arm[ref]}
        common = sorted(set(a) & set(b))
        if not common or any(not a[u].config or not b[u].config for u in common):
            return False
        return all(a[u].training_config() == b[u].training_config() for u in common)

    def figure(self, fig, name: str, alt: str) -> None:
        self.doc.figure(save_figure(fig, self.figures, name), alt)

    def table(self, numbers: pd.DataFrame, shown: pd.DataFrame, name: str) -> None:
        self.doc.table(write_table(numbers, shown, self.tables, name))

    def write(self) -> Path:
        self.doc.heading(1, "rbctl report")
        self.doc.para("Inputs: " + ", ".join(f"`{d}`" for d in self.dirs))
        for section in (verdict.answer, verdict.power, verdict.warm_starts, convergence.plateau, convergence.escape,
                        sections.final_scores, sections.exploratory, sections.associations, sections.descriptives,
                        sections.trajectories, sections.runs):
            section(self)
        path = self.out / REPORT_MD
        write_atomic(path, self.doc.markdown(), kind="report")
        write_atomic(self.out / REPORT_HTML, self.doc.html("rbctl report"), kind="report")
        return path


def make_report(dirs: list[Path], out: Path | None = None, n_boot: int = 2000) -> Path:
    """Read every run under ``dirs``, write tables, figures, ``report.md`` and ``report.html`` into
    ``out`` (default: `rbctl.report.load.default_out`), and return the path of report.md. Errors come
    in the order a user can act on: no runs first, then the output folder."""
    dirs = [Path(d) for d in dirs]
    runs, issues = find_runs(dirs)
    if not runs:
        raise UserError("no run with metrics under " + ", ".join(map(str, dirs)))
    out = Path(out) if out is not None else default_out(dirs)
    out.mkdir(parents=True, exist_ok=True)
    return Report(runs, issues, out, dirs, n_boot).write()


def final_scores_table(report_dir: Path):
    """A Rich table of a written report's final scores (None when there are none)."""
    from rich.table import Table

    path = Path(report_dir) / REPORT_TABLES / "final_scores.csv"
    if not path.exists():
        return None
    df = pd.read_csv(path)
    table = Table(title=f"final scores: % correct with {sections.score_interval_caption(df['interval'])}")
    for col in ("arm", "benchmark", "units", "avg@n", "pass@n", "maj@k", "interval"):
        table.add_column(col, justify="left" if col in ("arm", "benchmark", "interval") else "right")
    for r in df.itertuples(index=False):
        maj = f"maj@{int(r.maj_k)} {with_ci(r.maj, r.maj_lo, r.maj_hi)}" if finite(r.maj_k) else "–"
        table.add_row(r.arm, r.benchmark, str(r.seeds), with_ci(r.avg, r.avg_lo, r.avg_hi),
                      with_ci(r.pass_k, r.pass_k_lo, r.pass_k_hi), maj, str(r.interval))
    return table
