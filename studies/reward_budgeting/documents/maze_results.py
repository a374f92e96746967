"""Print studies/reward_budgeting/docs/maze_results.md: the maze sweep's arms beside MaxRL's paper table, and plain GRPO's plateau test.

    python -m studies.reward_budgeting.documents.maze_results SWEEP_DIR [--command "rbctl ablate ..."] [--ceiling-run RUN_DIR] > studies/reward_budgeting/docs/maze_results.md
    python -m studies.reward_budgeting.documents.maze_results SWEEP_DIR --write-readme
    python -m studies.reward_budgeting.documents.maze_results SWEEP_DIR --horizon LONG_SWEEP_DIR --figures studies/reward_budgeting/docs/figures > studies/reward_budgeting/docs/maze_results.md

`--write-readme` puts only the arms-beside-the-paper table, with the line saying where it comes
from, between the study README's (or the named file's) `<!-- maze: begin -->` and `<!-- maze: end -->`.

Everything is read from the report's data of the run directories (`rbctl.report.report_data`),
so the document is regenerated, never edited: the date, the commit the runs ran, the command, the
machine; per arm its held-out pass@1 (avg@n of the final evaluation) and pass@k at the largest k
(k = n), with 95% t-intervals over units clipped to [0, 100], beside the paper's pass@1 / pass@128 / pass@256 (Tajwar
et al. 2026, arXiv 2602.02710, 17×17 mazes); the ordering of the arms in both; each arm's paired gap
to GRPO beside the paper's; whether the entropy bonus's gain is small against the budget-like
estimators'; the principal comparisons (Holm–Bonferroni, the sweep file's `comparisons`); and the
plateau test of plain GRPO, criterion by criterion (docs/method.md, "Premature convergence").

``--ceiling-run RUN_DIR`` first writes ``SWEEP_DIR/ceiling.json`` from the step-0 held-out pass@1 of
a run whose warm start is a policy trained longer on correct solutions (docs/maze_task.md §6), the
reachable ceiling the plateau test reads; without a ceiling file the test uses the best arm.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rbctl.errors import UserError, exit_code
from rbctl.config.sweep import Comparisons
from rbctl.report import ReportData, report_data
from rbctl.report.analyses.comparisons import call_text, deciding_p, untestable_note
from rbctl.report.analyses.plateau import PLATEAU_ARM
from rbctl.report.analyses.scores import ArmScores
from rbctl.report.load import Run, find_runs, sweep_settings
from rbctl.report.render.tables import delta, num, pct, points_list, pval, with_ci, yes_no
from rbctl.report.series import run_series
from rbctl.report.stats import DELTA_BOUNDS, NOT_TESTABLE, bounded_t_interval, paired_delta
from rbctl.store.atomic import write_atomic
from rbctl.store.read import read_yaml_file
from rbctl.store.rundir import CEILING, CONFIG, EVAL_LINES
from studies.reward_budgeting.published import maze_table
from rbctl.report.provenance import cpu_description, provenance, write_block
from rbctl.report.render.figures import draw_curves
from studies.reward_budgeting.documents import STUDY_README

# MaxRL's published maze table, (baseline, variant) -> (the paper's method, its scores at PAPER_KS), from its
# data file (`studies.reward_budgeting.published`), which also names the entropy-bonus arm and the budget-like arms
_PAPER_FILE = maze_table()
PAPER_KS = tuple(_PAPER_FILE["ks"])
PAPER = {(r["estimator"], r["variant"]): (r["method"], tuple(r["scores"])) for r in _PAPER_FILE["rows"]}
ENTROPY_ARM = tuple(_PAPER_FILE["entropy_arm"])
BUDGET_LIKE = tuple(tuple(x) for x in _PAPER_FILE["budget_like"])
SMALL = 0.5  # the entropy bonus's gain counts as small when under half a budget-like arm's (and that arm beats it)


def write_ceiling(sweep: Path, run_dir: Path, benchmark: str) -> dict:
    """Write ``sweep/ceiling.json`` from ``run_dir``'s step-0 avg@n on ``benchmark`` (its warm start's
    held-out pass@1, measured with the run's periodic-evaluation protocol); returns what it wrote."""
    runs, _ = find_runs([run_dir])
    step0 = run_series(runs[0], "avg@n", benchmark) if runs else None
    if step0 is None or 0 not in step0.index:
        raise UserError(f"{run_dir}: no step-0 evaluation on {benchmark} in its {EVAL_LINES} (train it with eval.every > 0)")
    builtin = ((read_yaml_file(Path(run_dir) / CONFIG).get("data") or {}).get("builtin") or {})
    sft = builtin.get("warm_start_steps")
    n = next((e.get("n") for e in runs[0].evals if e.get("step") == 0 and e.get("benchmark") == benchmark), None)
    ceiling = {"value": float(step0.loc[0]),
               "source": f"held-out pass@1 of a policy trained on correct solutions only: the warm start of {run_dir} "
                         f"({sft} SFT steps on BFS paths), its step-0 evaluation on {benchmark} (n = {n})"}
    write_atomic(Path(sweep) / CEILING, json.dumps(ceiling, indent=1) + "\n", kind="ceiling")
    return ceiling


def md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table; a `|` inside a cell is escaped."""
    line = lambda cells: "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"  # noqa: E731
    return [line(header), "|" + "---|" * len(header)] + [line(r) for r in rows] + [""]


def _order(scores: dict[str, float]) -> str:
    """``a > b > c`` by score, highest first."""
    return " > ".join(sorted(scores, key=lambda a: -scores[a]))


def _pairs_disagreeing(ours: dict[str, float], paper: dict[str, float]) -> list[str]:
    """The pairs of arms that the two orderings rank the other way round (a tie disagrees with nothing)."""
    arms = sorted(set(ours) & set(paper))
    return [f"{a} vs {b}" for i, a in enumerate(arms) for b in arms[i + 1:]
            if (ours[a] - ours[b]) * (paper[a] - paper[b]) < 0]


@dataclass
class Sweep:
    """One sweep's final scores on its benchmark, per arm, and the paper's rows of its arms, from its
    report's data (`data`)."""

    path: Path
    data: ReportData
    runs: list[Run]
    by_arm: dict[str, list[Run]]
    info: dict[str, tuple[str, str]]  # arm -> (baseline, variant)
    bench: str
    scores: dict[str, ArmScores]
    k: int  # the largest k every arm's final evaluation has (its n)
    spec: Comparisons | None

    @property
    def avg(self) -> dict[str, dict]:
        """arm -> {unit: held-out pass@1 (avg@n)}."""
        return {a: sc.per_unit("avg") for a, sc in self.scores.items()}

    @property
    def pass_k(self) -> dict[str, dict]:
        """arm -> {unit: pass@k}, k = `k`."""
        return {a: sc.per_unit("pass", self.k) for a, sc in self.scores.items()}

    def arm(self, role: tuple[str, str]) -> str | None:
        """The arm of a (baseline, variant), e.g. ("grpo", "base"), or None."""
        return next((a for a in self.scores if self.info[a] == role), None)

    @property
    def paper(self) -> dict[str, tuple[float, float, float]]:
        """arm -> the paper's pass@1, pass@128, pass@256 of its method, for the arms in the paper."""
        return {a: PAPER[self.info[a]][1] for a in self.scores if self.info[a] in PAPER}


def load(sweep: Path) -> Sweep:
    """The sweep's report data (200 bootstrap resamples: this document shows no bootstrap interval)
    and its final scores on the sweep file's first evaluation benchmark."""
    data = report_data([sweep], n_boot=200)
    sw = data.sweep
    runs = list(sw.runs)
    bench = (sweep_settings(runs)[2] or ["builtin"])[0]
    scores = {a: sw.scores[a, bench] for a in sw.arms if (a, bench) in sw.scores}
    if not scores:
        raise UserError(f"no final evaluation on {bench} under {sweep}")
    return Sweep(Path(sweep), data, runs, sw.by_arm, sw.info, bench, scores, min(sc.kmax for sc in scores.values()),
                 sw.spec)


def _mean(per_unit: dict[str, dict]) -> dict[str, float]:
    return {a: float(np.mean(list(v.values()))) for a, v in per_unit.items()}


def header(sw: Sweep, command: str | None, cpuinfo: Path, today: dt.date | None, invocation: str | None) -> list[str]:
    prov = provenance(sw.path, runs=sw.runs)
    commits, last = prov.code, prov.last
    units = sorted({len(sc.units) for sc in sw.scores.values()})
    n_problems = len(next(iter(sw.scores.values())).ids)
    return ["# The maze at CPU scale: results beside MaxRL's paper", "",
            f"Generated on {(today or dt.date.today()).isoformat()} by "
            f"`{invocation or f'python -m studies.reward_budgeting.documents.maze_results {sw.path}'}` from "
            "the run directories (rbctl.report's functions); do not edit by hand.", "",
            f"- Sweep `{next((r.sweep for r in sw.runs if r.sweep), sw.path.name)}` in `{sw.path}`: {len(sw.runs)} runs, "
            f"{len(sw.by_arm)} arms, units per arm: {', '.join(map(str, units))}; runs last logged on {last}.",
            f"- Code: {commits} (the runs' provenance).",
            f"- Command: `{command or f'rbctl ablate SWEEP.yaml -o {sw.path}'}`.",
            f"- Machine (where this document was generated): {cpu_description(cpuinfo)}.",
            f"- Held-out set: {sw.bench}, {n_problems} problems × n = {sw.k} samples in each run's final evaluation.", ""]


README_ROLES = (*PAPER, ("grpo", "budget"))  # the README's short table: the paper's arms and GRPO + budget


def arms_table(sw: Sweep, roles: tuple | None = None) -> list[str]:
    """The arms beside the paper (only the arms whose (baseline, variant) is in ``roles``, if given)."""
    avg, pk, paper = sw.avg, sw.pass_k, sw.paper
    rows = []
    for a in sorted(sw.scores, key=lambda x: -_mean(avg)[x]):
        if roles is not None and sw.info[a] not in roles:
            continue
        rows.append([f"`{a}`", PAPER.get(sw.info[a], ("(not in the paper)",))[0], str(len(sw.scores[a].units)),
                     with_ci(*bounded_t_interval(list(avg[a].values()))), with_ci(*bounded_t_interval(list(pk[a].values())))]
                    + ([f"{x:.1f}" for x in paper[a]] if a in paper else ["–"] * 3))
    return ["## The arms beside the paper", "",
            f"Per arm: the mean over units of each run's held-out pass@1 (avg@{sw.k}) and unbiased pass@{sw.k}, with a "
            "95% t-interval over units (n − 1 df), clipped to the metric's range [0, 100]. The paper's numbers are its 17×17 maze table (3.9M-parameter "
            "policy, G = 128, pass@k from 2048 samples); this sweep is a smaller maze and model at CPU scale, so the "
            "columns compare orderings and gaps, not levels.", ""] + md_table(
        ["arm", "paper's method", "units", f"pass@1 (avg@{sw.k}) %", f"pass@{sw.k} %",
         *(f"paper pass@{x}" for x in PAPER_KS)], rows)


def ordering(sw: Sweep) -> list[str]:
    out = ["## Ordering", ""]
    paper = sw.paper
    for ours, label, j in ((_mean(sw.avg), "pass@1", 0), (_mean(sw.pass_k), f"pass@{sw.k}", 1)):
        theirs = {a: v[j] for a, v in paper.items()}
        off = _pairs_disagreeing(ours, theirs)
        out.append(f"- {label}: rbctl {_order(ours)}; the paper (pass@{PAPER_KS[j]}) {_order(theirs)}. Over the arms "
                   f"in both: {'the same order' if not off else 'ranked the other way round: ' + ', '.join(off)}.")
    return out + [""]


def gaps(sw: Sweep, grpo: str) -> list[str]:
    avg, pk, paper = sw.avg, sw.pass_k, sw.paper
    rows = []
    for a in sorted(sw.scores, key=lambda x: -_mean(avg)[x]):
        if a == grpo:
            continue
        d1, dk = paired_delta(avg[a], avg[grpo], bounds=DELTA_BOUNDS), paired_delta(pk[a], pk[grpo], bounds=DELTA_BOUNDS)
        theirs = [f"{x - y:+.1f}" for x, y in zip(paper[a], paper[grpo])] if a in paper and grpo in paper else ["–"] * 3
        rows.append([f"`{a}`", str(d1.n), delta(d1.mean, d1.lo, d1.hi), delta(dk.mean, dk.lo, dk.hi), *theirs])
    return ["## Gaps to GRPO", "",
            f"Δ = arm − `{grpo}` in points, paired by unit (mean, 95% t-interval over units, unadjusted, clipped to "
            "[−100, +100]; no interval where every unit gave the same Δ), beside the paper's gap.", ""] + md_table(
        ["arm", "units", "Δ pass@1", f"Δ pass@{sw.k}", *(f"paper Δ pass@{x}" for x in PAPER_KS)], rows)


def entropy_against_budget(sw: Sweep, grpo: str) -> list[str]:
    """Whether the entropy bonus's pass@1 gain over GRPO is small against each budget-like arm's: under
    `SMALL` times that arm's gain, and that arm beating the entropy arm (paired Δ's 95% t-interval
    above 0); the paper's ratio of the same gains beside it."""
    ent, budget_like = sw.arm(ENTROPY_ARM), [a for a in map(sw.arm, BUDGET_LIKE) if a]
    if ent is None or not budget_like:
        return []
    avg, paper = sw.avg, sw.paper
    gain = {a: paired_delta(avg[a], avg[grpo]).mean for a in (ent, *budget_like)}
    paper_gain = {a: v[0] - paper[grpo][0] for a, v in paper.items() if grpo in paper and a != grpo}
    rows = []
    for b in budget_like:
        d = paired_delta(avg[b], avg[ent], bounds=DELTA_BOUNDS)
        ratio = gain[ent] / gain[b] if gain[b] > 0 else float("nan")
        small = gain[b] > 0 and ratio < SMALL and d.lo > 0  # no interval (sd(Δ) = 0): not shown to beat it
        theirs = paper_gain[ent] / paper_gain[b] if ent in paper_gain and paper_gain.get(b, 0) > 0 else None
        rows.append([f"`{b}`", f"{100 * gain[b]:+.1f}", f"{100 * gain[ent]:+.1f}", num(ratio, 2),
                     delta(d.mean, d.lo, d.hi), "yes" if small else "no", num(theirs, 2)])
    return ["## Is the entropy bonus's gain small against the budget-like estimators'?", "",
            f"Gain = Δ pass@1 over `{grpo}` (mean over units). Small: under {SMALL:g}× the budget-like arm's gain, and "
            f"that arm beats `{ent}` (the 95% t-interval of their paired Δ above 0; with the same Δ in every unit there "
            "is no interval, so it is not shown to). The paper's gains: "
            + ", ".join(f"{a} {g:+.1f}" for a, g in paper_gain.items()) + " points.", ""] + md_table(
        ["budget-like arm", "its gain", "entropy bonus's gain", "ratio", f"Δ arm − {ent}", "small", "paper's ratio"],
        rows)


def principal(sw: Sweep) -> list[str]:
    """The sweep file's principal comparisons, Holm-adjusted as the report adjusts them."""
    if sw.spec is None:
        return []
    comps = list(sw.data.verdict.comparisons)
    m = sum(c.delta.testable for c in comps)
    note = untestable_note(comps)
    return ["## Principal comparisons", "",
            f"Stated in the sweep file before running, on {sw.spec.metric}: "
            + (f"Holm–Bonferroni over the {m} that {'is' if m == 1 else 'are'} testable at α = {sw.spec.alpha:g}" if m else
               "none is testable, so no Holm–Bonferroni family is formed and no verdict is called")
            + " (docs/method.md, \"Comparing arms\"); a comparison with fewer than 3 "
            "units or the same Δ in every unit is not testable. Δ's 95% t-interval is clipped to [−100, +100].", ""] + md_table(
        ["comparison", "units", f"Δ {sw.spec.metric} [95% t-interval]", "p that decided the call", "verdict", "per unit Δ"],
        [[c.label, str(c.delta.n), delta(c.delta.mean, c.delta.lo, c.delta.hi), _deciding(c), call_text(c),
          points_list(c.delta.deltas)] for c in comps]) + ([note, ""] if note else [])


def _deciding(c) -> str:
    """The p beside a call: the one that decided it (`deciding_p`: TOST's for "equivalent")."""
    if not c.delta.testable:
        return NOT_TESTABLE
    name, p = deciding_p(c)
    return f"{name} {pval(p, '–')}"


def plateau(sw: Sweep, grpo: str | None) -> list[str]:
    """Plain GRPO's plateau test (docs/method.md, "Premature convergence") against the report's ceiling."""
    out = ["## Plateau test of plain GRPO", ""]
    if grpo is None:
        return out + ["No plain GRPO arm (baseline grpo, variant base).", ""]
    p = sw.data.plateau
    bench, ceiling, v = p.benchmark, p.ceiling, p.verdict
    out += [f"`{grpo}` over {v.seeds} units, periodic held-out evaluation on {bench}: the plateau "
            f"**{'held' if v.held else 'did not hold'}**. Ceiling: "
            f"{'unknown' if ceiling.value is None else pct(ceiling.value) + '%'} ({ceiling.source}).", ""]
    out += md_table(["criterion", "held", "detail"], [[c.name, yes_no(c.held), c.detail] for c in v.criteria])
    return out + md_table(
        ["unit", "steps ¾T, T", "|Δ pass@1| (points)", "final pass@1", "below ceiling (points)", "entropy final / warm"],
        [[u["unit"], f"{num(u['t_ref'], 0)}, {num(u['t'], 0)}", num(u["change"], 2), num(u["final"], 1),
          num(u["gap"], 1), num(u["entropy_ratio"], 2)] for u in p.units.to_dict("records")])


def horizon(path: Path, figures: Path | None, link: str) -> list[str]:
    """A longer sweep of some of the arms: its provenance, each arm's final pass@1 and pass@k, its
    principal comparisons, and the held-out curves (`draw_curves`: pass@1 and pass@k over its periodic
    evaluations, one line per arm, bands over units) drawn into ``figures`` and linked as ``link/…``."""
    sw = load(path)
    prov = provenance(sw.path, runs=sw.runs)
    steps = sorted({r.last_step for r in sw.runs})
    avg, pk = sw.avg, sw.pass_k
    rows = [[f"`{a}`", str(len(sw.scores[a].units)), with_ci(*bounded_t_interval(list(avg[a].values()))),
             with_ci(*bounded_t_interval(list(pk[a].values())))] for a in sorted(sw.scores, key=lambda x: -_mean(avg)[x])]
    out = [f"## The long horizon: `{sw.path}`", "",
           f"{len(sw.runs)} runs of {', '.join(f'`{a}`' for a in sw.by_arm)} to step {', '.join(map(str, steps))}, "
           f"{prov.code}, last logged {prov.last}. Final held-out pass@1 (avg@{sw.k}) and pass@{sw.k} per arm, mean over "
           "units with a 95% t-interval clipped to [0, 100]; the claims that read this sweep are called in "
           "[studies/reward_budgeting/docs/claims.md](claims.md).", ""]
    out += md_table(["arm", "units", f"pass@1 (avg@{sw.k}) %", f"pass@{sw.k} %"], rows)
    out += principal(sw)[2:]
    for metric in ("avg@n", f"pass@{sw.k}"):
        slug = f"{sw.path.name}_{metric.replace('@', '_')}"
        what = "pass@1 (avg@n)" if metric == "avg@n" else metric
        if figures is not None and draw_curves(sw.by_arm, metric, sw.bench, Path(figures), slug,
                                               f"{sw.path.name}: held-out {what} over the periodic evaluations"):
            out += [f"![{sw.path.name}: held-out {what} over the run]({link}/{slug}.png)", ""]
    return out


def results_markdown(sweep: Path, command: str | None = None, cpuinfo: Path = Path("/proc/cpuinfo"),
                     today: dt.date | None = None, invocation: str | None = None, horizons: tuple = (),
                     figures: Path | None = None, link: str = "figures") -> str:
    """The document (module docstring), from the runs of ``sweep``, and a section per longer sweep of
    ``horizons`` (`horizon`); ``invocation`` is the command line that generated it (default: the plain one)."""
    sw = load(sweep)
    grpo = sw.arm(PLATEAU_ARM)
    out = header(sw, command, cpuinfo, today, invocation) + arms_table(sw) + ordering(sw)
    if grpo is not None:
        out += gaps(sw, grpo) + entropy_against_budget(sw, grpo)
    out += principal(sw) + plateau(sw, grpo)
    for h in horizons:
        out += [""] + horizon(Path(h), figures, link)
    return "\n".join(out)


MAZE_BEGIN, MAZE_END = "<!-- maze: begin -->", "<!-- maze: end -->"


def readme_table(sweep: Path) -> str:
    """The README's short form: the arms table and where it comes from."""
    sw = load(sweep)
    prov = provenance(sweep, short=True, runs=sw.runs)
    commits, last = prov.code, prov.last
    table = arms_table(sw, README_ROLES)[4:]  # without the heading and its paragraph
    shown = sum(sw.info[a] in README_ROLES for a in sw.scores)
    rest = f" (the paper's arms and GRPO + budget; the other {len(sw.scores) - shown} arms in the full results)" if shown < len(sw.scores) else ""
    return "\n".join(table).rstrip() + (
        f"\n\n{len(sw.runs)} runs{rest} from {commits}, last logged {last}; pass@1 = avg@{sw.k} over "
        f"{len(next(iter(sw.scores.values())).ids)} held-out mazes, 95% t-interval over seeds clipped to [0, 100]; "
        "the paper's columns: "
        "its 17×17 table. Full results: [maze_results.md](docs/maze_results.md).")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("sweep", type=Path)
    p.add_argument("--command", default=None, help="the command that ran the sweep (printed in the document)")
    p.add_argument("--ceiling-run", type=Path, default=None,
                   help="write SWEEP/ceiling.json from this run's step-0 held-out pass@1 first")
    p.add_argument("--benchmark", default="builtin", help="benchmark of --ceiling-run's evaluation")
    p.add_argument("--write-readme", type=Path, nargs="?", const=STUDY_README, default=None,
                   help="write the arms table into this README's maze block (no path: the study's README)")
    p.add_argument("--horizon", type=Path, action="append", default=[],
                   help="a longer sweep of some of the arms: its final scores, calls and curves in a section of its own")
    p.add_argument("--figures", type=Path, default=None,
                   help="where --horizon's curve figures are drawn (linked as figures/NAME.png: docs/figures beside the document)")
    args = p.parse_args(argv)
    invocation = "python -m studies.reward_budgeting.documents.maze_results " + shlex.join(sys.argv[1:] if argv is None else argv)

    def run() -> None:
        if args.ceiling_run is not None:
            write_ceiling(args.sweep, args.ceiling_run, args.benchmark)
        if args.write_readme is not None:
            write_block(args.write_readme, readme_table(args.sweep), MAZE_BEGIN, MAZE_END)
            return
        print(results_markdown(args.sweep, args.command, invocation=invocation, horizons=tuple(args.horizon),
                               figures=args.figures))

    return exit_code(run)


if __name__ == "__main__":
    raise SystemExit(main())
