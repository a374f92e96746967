"""Print the measured part of studies/reward_budgeting/docs/real_model.md: the SmolLM2 addition sweep, from its run directories.

    python -m studies.reward_budgeting.documents.real_model SWEEP_DIR [--command "rbctl ablate ..."] [--write-doc studies/reward_budgeting/docs/real_model.md]
    python -m studies.reward_budgeting.documents.real_model SWEEP_DIR --write-readme

Everything is read from the runs (`rbctl.report.report_data` and each run's logs), so the text is
regenerated, never edited: the date, the commit the runs ran, the command, the machine; per arm its
held-out pass@1 (avg@n of the periodic evaluations, step 0 included) over the run, with each
seed's rise from step 0 to the last step; the training curves (reward, entropy, κ_eff, response
length) in bins of steps; the principal comparisons (`studies.reward_budgeting.documents.maze_results.principal`, as the
report adjusts them); and what the same step-0 samples score with the math grader's default
extraction (`final`: a box or a final-answer phrase only), re-graded from each run's samples.jsonl.

`--figure PATH` also draws held-out pass@1 and the training curves of every arm (mean over seeds,
each seed faint) into a PNG. `--write-doc` replaces the block between `<!-- real_model: begin -->` and `<!-- real_model: end -->`
of that document; `--write-readme` puts the short form (the pass@1 table and where it comes from)
between the study README's (or the named file's) markers of the same names.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import warnings
from pathlib import Path

import numpy as np

from rbctl.report.render.tables import delta, pval, with_ci
from rbctl.report.series import run_series
from rbctl.report.stats import DELTA_BOUNDS, bounded_t_interval, paired_delta
from rbctl.store.rundir import EVAL_SAMPLES, periodic_eval_dir
from studies.reward_budgeting.documents.maze_results import Sweep, md_table, load, principal
from rbctl.report.provenance import cpu_description, provenance, write_block
from studies.reward_budgeting.documents import STUDY_README

BEGIN, END = "<!-- real_model: begin -->", "<!-- real_model: end -->"
CURVES = (("reward/mean", "training reward %", 100.0), ("entropy", "entropy, nats/token", 1.0),
          ("kappa_eff", "κ_eff", 1.0), ("response/len_mean", "response tokens", 1.0))
BIN = 5  # steps per bin of the training curves


def _arms(sw: Sweep) -> list[str]:
    return sorted(sw.by_arm, key=lambda a: (sw.info[a][1] != "base", a))


def pass1_by_step(sw: Sweep) -> dict[str, dict[int, dict]]:
    """arm -> step -> {unit: held-out pass@1} from the periodic evaluations (step 0 = zero-shot)."""
    out: dict[str, dict[int, dict]] = {}
    for arm in _arms(sw):
        for run in sw.by_arm[arm]:
            for step, v in run_series(run, "avg@n", sw.bench).items():
                out.setdefault(arm, {}).setdefault(int(step), {})[run.unit] = float(v)
    return out


def pass1_table(sw: Sweep) -> list[str]:
    by_step = pass1_by_step(sw)
    steps = sorted({s for per in by_step.values() for s in per})
    rows = []
    for arm in _arms(sw):
        per = by_step.get(arm, {})
        first, last = per.get(steps[0], {}), per.get(steps[-1], {})
        rise = paired_delta(last, first, bounds=DELTA_BOUNDS)
        seeds = ", ".join(f"{100 * (last[u] - first[u]):+.1f}" for u in sorted(set(first) & set(last)))
        rows.append([f"`{arm}`", str(len(last))]
                    + [with_ci(*bounded_t_interval(list(per.get(s, {}).values()))) if per.get(s) else "–" for s in steps]
                    + [delta(rise.mean, rise.lo, rise.hi), seeds])
    return md_table(["arm", "seeds", *(f"step {s}" for s in steps), f"rise {steps[0]} → {steps[-1]}", "rise per seed"], rows)


def curves_table(sw: Sweep) -> list[str]:
    """Per arm and bin of `BIN` steps, the mean over steps and seeds of each training metric."""
    rows = []
    for arm in _arms(sw):
        series = {key: [run_series(r, key) for r in sw.by_arm[arm]] for key, _, _ in CURVES}
        last = max((int(s.index.max()) for ss in series.values() for s in ss if len(s)), default=0)
        for lo in range(1, last + 1, BIN):
            hi = min(lo + BIN - 1, last)
            cells = []
            for key, _, scale in CURVES:
                vals = [v for s in series[key] for st, v in s.items() if lo <= st <= hi]
                cells.append(f"{scale * np.mean(vals):.2f}" if vals else "–")
            rows.append([f"`{arm}`", f"{lo}–{hi}", *cells])
    return md_table(["arm", "steps", *(label for _, label, _ in CURVES)], rows)


def strict_step0(sw: Sweep) -> tuple[float, float, int] | None:
    """(pass@1 with the run's extraction, with the default `final` extraction, samples) over every run's
    step-0 evaluation samples, re-graded from samples.jsonl; None if none are there."""
    from rbctl.grading.verify import grade_many

    texts, golds, ours = [], [], []
    for run in sw.runs:
        for f in sorted(periodic_eval_dir(run.path, 0).glob(f"*/{EVAL_SAMPLES}")):
            for line in f.read_text().splitlines():
                s = json.loads(line)
                texts.append(s["completion"]), golds.append(s["gold"]), ours.append(bool(s["correct"]))
    if not texts:
        return None
    strict = grade_many(texts, golds, extraction="final")
    return float(np.mean(ours)), float(np.mean([g.correct for g in strict])), len(texts)


def block(sw: Sweep, command: str | None, today: dt.date | None) -> list[str]:
    prov = provenance(sw.path, runs=sw.runs)
    n_problems = len(next(iter(sw.scores.values())).ids)
    out = [f"Generated on {(today or dt.date.today()).isoformat()} by `python -m studies.reward_budgeting.documents.real_model {sw.path}` "
           "from the run directories; do not edit by hand.", "",
           f"- Sweep in `{sw.path}`: {len(sw.runs)} runs, {len(sw.by_arm)} arms; runs last logged on {prov.last}.",
           f"- Code: {prov.code} (the runs' provenance).",
           f"- Command: `{command or f'rbctl ablate SWEEP.yaml -o {sw.path}'}`.",
           f"- Machine: {cpu_description()}.",
           f"- Held-out set: {sw.bench}, {n_problems} problems × n = {sw.k} samples at each periodic evaluation "
           "(step 0 is the model before training, its zero-shot pass@1).", "",
           "### Held-out pass@1 over the run", "",
           "Per arm and evaluation step: the mean over seeds of avg@n in percent, with a 95% t-interval over "
           "seeds clipped to [0, 100]; the rise is the paired difference last step − step 0 in points (95% "
           "t-interval over seeds).", ""]
    out += pass1_table(sw)
    strict = strict_step0(sw)
    if strict is not None:
        ours, default, n = strict
        out += [f"The step-0 samples of all runs ({n}) score {100 * ours:.1f}% with this task's extraction "
                f"(`last_number`) and {100 * default:.1f}% with the math grader's default (`final`: a box or a "
                "final-answer phrase only), re-graded from the same completions.", ""]
    out += ["### Training curves", "",
            f"Mean over the steps of each bin of {BIN} and over seeds (κ_eff is measured every other step).", ""]
    out += curves_table(sw)
    return out + [line.replace("## ", "### ", 1) if line.startswith("## ") else line for line in principal(sw)]


def figure(sw: Sweep, path: Path) -> None:
    """Held-out pass@1 and the training curves (`CURVES`), per arm: the mean over seeds (lines) and
    each seed (faint), into one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 1 + len(CURVES), figsize=(4.2 * (1 + len(CURVES)), 3.4))
    by_step = pass1_by_step(sw)
    for i, arm in enumerate(_arms(sw)):
        colour = f"C{i}"
        per = by_step.get(arm, {})
        steps = sorted(per)
        axes[0].plot(steps, [100 * np.mean(list(per[s].values())) for s in steps], "o-", color=colour, label=arm)
        for key, ax, (_, label, scale) in zip([c[0] for c in CURVES], axes[1:], CURVES):
            runs = [run_series(r, key) for r in sw.by_arm[arm]]
            for r in runs:
                ax.plot(r.index, scale * r.values, color=colour, alpha=0.2, lw=0.8)
            frame = np.array([[scale * r.get(st, np.nan) for st in range(1, int(max(r.index.max() for r in runs)) + 1)]
                              for r in runs if len(r)])
            if frame.size:
                steps_all = np.arange(1, frame.shape[1] + 1)
                with warnings.catch_warnings():  # a step where no seed measured κ_eff: no point
                    warnings.simplefilter("ignore", RuntimeWarning)
                    mean = np.nanmean(frame, axis=0)
                keep = np.isfinite(mean)
                ax.plot(steps_all[keep], mean[keep], color=colour, lw=1.8, label=arm)
            ax.set_title(label, fontsize=10)
            ax.set_xlabel("step (rollout batches)")
    axes[0].set_title(f"held-out pass@1 % (avg@{sw.k})", fontsize=10)
    axes[0].set_xlabel("step (rollout batches)")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def readme_block(sw: Sweep) -> str:
    from rbctl.report.analyses.comparisons import call_text, deciding_p

    prov = provenance(sw.path, short=True, runs=sw.runs)
    comps = "; ".join(f"{c.label} {delta(c.delta.mean, c.delta.lo, c.delta.hi)} ({call_text(c)}, "
                      f"{deciding_p(c)[0]} {pval(deciding_p(c)[1])})"  # the p that decided the call
                      if c.delta.testable else f"{c.label}: not testable" for c in sw.data.verdict.comparisons)
    return "\n".join(pass1_table(sw)).rstrip() + (
        f"\n\n{len(sw.runs)} runs from {prov.code}, last logged {prov.last}; held-out pass@1 = avg@{sw.k} over "
        f"{len(next(iter(sw.scores.values())).ids)} sums never trained on, mean over seeds [95% t-interval]; step 0 is "
        f"the model before training. At step {max(max(p) for p in pass1_by_step(sw).values())}, in points: "
        f"{comps or 'no principal comparison'}. Curves, entropy, κ_eff: [real_model.md](docs/real_model.md).")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("sweep", type=Path)
    p.add_argument("--command", default=None, help="the command that ran the sweep (printed in the document)")
    p.add_argument("--write-doc", type=Path, default=None, help="write the block into this document's markers")
    p.add_argument("--write-readme", type=Path, nargs="?", const=STUDY_README, default=None,
                   help="write the short form into this README's markers (no path: the study's README)")
    p.add_argument("--figure", type=Path, default=None, help="also draw the curves of every arm into this PNG")
    args = p.parse_args(argv)
    sw = load(args.sweep)
    if args.figure is not None:
        figure(sw, args.figure)
    if args.write_readme is not None:
        write_block(args.write_readme, readme_block(sw), BEGIN, END)
        return 0
    text = "\n".join(block(sw, args.command, None)).rstrip()
    if args.write_doc is not None:
        write_block(args.write_doc, text, BEGIN, END)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
