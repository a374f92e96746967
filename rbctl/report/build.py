"""`rbctl report`: figures and tables that compare arms across seeds, rebuilt from run directories only.

Inputs: run directories (they hold ``metrics.jsonl``) and sweep directories (``runs/`` and/or
``state.json``, with runs at ``SWEEP/runs/<arm>/seed_<s>/``); other directories are searched a few
levels down. Whatever is on disk is used, so a partial sweep reports what it has and names the
runs that failed, are still running, or are missing.

Output folder (``make_report``):
- ``report.md``: a generated summary, every table, every figure (relative links).
- ``tables/<name>.{csv,md,tex}``: the CSV holds numbers (fractions, not percent) in long form;
  Markdown and LaTeX hold the same numbers formatted for reading (percent, 95% intervals).
- ``figures/<name>.{png,svg}``: one colour per arm in every figure (`arm_colors`).
- ``data/*.csv``: the numbers behind the curves (trajectories, pass@k).

Statistics (METHOD.md, "Evaluation metrics"):
- Final scores come from each run's last final evaluation, ``RUN/eval/step_<max>/<bench>/summary.json``
  (``RUN/eval/periodic/`` is ignored). Per (seed, problem) the accuracy is c/n; the score is the
  mean of that [seeds, problems] matrix and its 95% interval is `bootstrap_ci_2d` (seeds and
  problems resampled independently). pass@k is the unbiased estimator per (seed, problem), averaged
  and bootstrapped the same way. All arms of a benchmark are scored on the problems every run has.
- Δ (budget − base, entropy arm − budget arm): the same point estimate as the difference of the two
  scores; when both arms have the same seeds, the interval is `bootstrap_ci_2d` of the per-(seed,
  problem) difference (paired); otherwise seeds are resampled separately per arm while problems are
  resampled jointly (`bootstrap_diff_ci`). A difference is called significant only when its 95%
  interval excludes 0.
- Trajectories: mean over the seeds that logged a step; the band spans min–max over those seeds
  (with 2–5 seeds a standard error is itself too noisy to draw). κ_eff is smoothed per seed with a
  centred rolling mean over `KAPPA_EFF_WINDOW` logged values, since it is measured on one batch.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from rbctl.store.atomic import atomic_output, write_atomic
from rbctl.errors import UserError
from rbctl.grading.metrics import bootstrap_ci_2d, pass_at_k
from rbctl.train.tracking import read_jsonl

KAPPA_EFF_WINDOW = 5  # logged κ_eff values per centred rolling mean: one batch's κ_eff is noisy
FINAL_FRACTION = 0.1  # "final" entropy / κ_eff = mean over the last 10% of each run's logged values
SEARCH_DEPTH = 3  # levels below an input directory searched for runs and sweeps
SKIP_DIRS = {"eval", "checkpoints", "report", "tb", "wandb", "figures", "tables", "data"}
# matplotlib's tab10, then tab20's light shades: distinct, colour-blind-friendlier than the rest.
PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
    "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#c7c7c7",
    "#dbdb8d", "#9edae5",
)
BAND = "mean over seeds; band: min–max over seeds"
X_LABEL = "step (optimizer updates)"
ACC_LABEL = "accuracy (fraction correct)"


# --- reading run and sweep directories -----------------------------------------------------------


@dataclass
class Run:
    """One training run as found on disk."""

    path: Path
    arm: str
    seed: int
    baseline: str  # the estimator the arm builds on (grpo, dr_grpo, …)
    variant: str  # base, budget, entropy_static, entropy_adaptive, …
    sweep: str | None
    status: str  # from the sweep's state.json ("done", "failed", …); "" for a run given on its own
    config_steps: int | None
    metrics: list[dict]  # metrics.jsonl, one record per step
    evals: list[dict]  # eval.jsonl, one record per (step, benchmark)
    final_step: int | None  # step of the final evaluation used
    finals: dict[str, dict] = field(default_factory=dict)  # benchmark -> summary.json

    @property
    def name(self) -> str:
        return f"{self.arm}/seed_{self.seed}"

    @property
    def last_step(self) -> int:
        return max((int(m["step"]) for m in self.metrics if "step" in m), default=0)


@dataclass
class Issue:
    """A run the report cannot (fully) use: failed, running, pending, missing, or without results."""

    name: str
    status: str
    detail: str = ""


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: invalid JSON ({e})") from None


def _read_records(path: Path) -> list[dict]:
    try:
        return read_jsonl(path)
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: invalid JSON line before the last one ({e})") from None


def _variant(algo: dict) -> str:
    """The variant of a run without run.json: budget, else its entropy-bonus mode, else base."""
    if algo.get("budget") is not None:
        return "budget"
    mode = (algo.get("entropy") or {}).get("mode", "none")
    return "base" if mode in (None, "none") else f"entropy_{mode}"


def final_summaries(run_dir: Path) -> tuple[int | None, dict[str, dict]]:
    """The highest ``RUN/eval/step_XXXXXX`` holding a summary.json, and its summaries by benchmark."""
    found = []
    for d in (run_dir / "eval").glob("step_*"):
        m = re.fullmatch(r"step_(\d+)", d.name)
        if m and d.is_dir():
            files = sorted(d.glob("*/summary.json"))
            if files:
                found.append((int(m.group(1)), files))
    if not found:
        return None, {}
    step, files = max(found, key=lambda t: t[0])
    summaries = {}
    for f in files:
        s = _read_json(f)
        summaries[str(s.get("benchmark", f.parent.name))] = s
    return step, summaries


def load_run(path: Path, sweep: str | None = None, status: str = "") -> Run:
    """Read one run directory (see the module docstring for what is used)."""
    path = Path(path)
    info = _read_json(path / "run.json") if (path / "run.json").is_file() else {}
    cfg = {}
    if (path / "config.yaml").is_file():
        cfg = yaml.safe_load((path / "config.yaml").read_text()) or {}
    algo = cfg.get("algo") or {}
    seed_dir = re.fullmatch(r"seed_(\d+)", path.name)
    # A sweep's run dir is <arm>/seed_<s>: its name is the seed, its parent's the arm.
    default_arm = path.parent.name if seed_dir else path.name
    seed = info.get("seed", cfg.get("seed"))
    if seed is None:
        seed = int(seed_dir.group(1)) if seed_dir else 0
    final_step, finals = final_summaries(path)
    return Run(
        path=path,
        arm=str(info.get("arm") or default_arm),
        seed=int(seed),
        baseline=str(info.get("baseline") or algo.get("estimator") or "unknown"),
        variant=str(info.get("variant") or _variant(algo)),
        sweep=info.get("sweep") or sweep,
        status=status,
        config_steps=cfg.get("steps"),
        metrics=_read_records(path / "metrics.jsonl"),
        evals=_read_records(path / "eval.jsonl"),
        final_step=final_step,
        finals=finals,
    )


def _is_run(d: Path) -> bool:
    return (d / "metrics.jsonl").is_file()


def _is_sweep(d: Path) -> bool:
    return (d / "runs").is_dir() or (d / "state.json").is_file()


def _load_sweep(sweep: Path) -> tuple[list[Run], list[Issue]]:
    state = _read_json(sweep / "state.json").get("runs", {}) if (sweep / "state.json").is_file() else {}
    runs, issues, on_disk = [], [], set()
    for run_dir in sorted((sweep / "runs").glob("*/*")):
        if run_dir.is_dir() and _is_run(run_dir):
            key = f"{run_dir.parent.name}/{run_dir.name}"
            on_disk.add(key)
            status = (state.get(key) or {}).get("status", "")
            runs.append(load_run(run_dir, sweep=sweep.name, status=status))
    for key, entry in sorted(state.items()):
        entry = entry or {}
        status = entry.get("status", "unknown")
        if status != "done":
            kept = " (its logged steps are included)" if key in on_disk else ""
            issues.append(Issue(f"{sweep.name}/{key}", status, (entry.get("error") or "") + kept))
        elif key not in on_disk:
            issues.append(Issue(f"{sweep.name}/{key}", "missing", "state.json says done, but runs/" + key
                                + " has no metrics.jsonl"))
    return runs, issues


def _collect(d: Path, depth: int) -> tuple[list[Run], list[Issue], bool]:
    if _is_run(d):
        return [load_run(d)], [], True
    if _is_sweep(d):
        return (*_load_sweep(d), True)
    runs, issues, found = [], [], False
    if depth < SEARCH_DEPTH:
        for child in sorted(d.iterdir()):
            if child.is_dir() and child.name not in SKIP_DIRS and not child.name.startswith("."):
                r, i, f = _collect(child, depth + 1)
                runs, issues, found = runs + r, issues + i, found or f
    return runs, issues, found


def find_runs(dirs: list[Path]) -> tuple[list[Run], list[Issue]]:
    """Every run under ``dirs`` (each counted once) and the problems the sweeps' state files name.

    When two runs share an arm name and a seed (the same arm in two sweeps), those arms are
    qualified by their sweep: ``sweep:arm``.
    """
    runs: dict[Path, Run] = {}
    issues: list[Issue] = []
    for d in map(Path, dirs):
        if not d.is_dir():
            raise UserError(f"{d} is not a directory")
        r, i, found = _collect(d, 0)
        if not found:
            raise UserError(f"no run or sweep directory under {d} (a run holds metrics.jsonl; a sweep holds "
                            "runs/ or state.json)")
        runs.update({x.path.resolve(): x for x in r})
        issues += [x for x in i if x not in issues]
    out = sorted(runs.values(), key=lambda x: (x.arm, x.seed))
    clash = {a for (a, _), c in Counter((x.arm, x.seed) for x in out).items() if c > 1}
    for x in out:
        if x.arm in clash:
            x.arm = f"{x.sweep or x.path.parent.parent.name}:{x.arm}"
    dup = [k for k, c in Counter((x.arm, x.seed) for x in out).items() if c > 1]
    if dup:
        paths = [str(x.path) for x in out if (x.arm, x.seed) == dup[0]]
        raise UserError(f"runs {', '.join(paths)} are the same arm and seed ({dup[0][0]}, seed {dup[0][1]}); "
                        "report them separately")
    return sorted(out, key=lambda x: (x.arm, x.seed)), issues


# --- scores across seeds and problems ------------------------------------------------------------


@dataclass
class ArmScores:
    """One arm's final evaluation on one benchmark: ``correct[s, p]`` of ``n[s, p]`` samples."""

    arm: str
    benchmark: str
    seeds: list[int]  # [S]
    ids: list[str]  # [P]
    correct: np.ndarray  # [S, P] int
    n: np.ndarray  # [S, P] int
    steps: list[int]  # [S] step of each seed's final evaluation

    @property
    def accuracy(self) -> np.ndarray:
        """c/n per (seed, problem), ``[S, P]``; its mean is avg@n."""
        return self.correct / self.n

    @property
    def kmax(self) -> int:
        return int(self.n.min())

    def pass_at(self, k: int) -> np.ndarray:
        """Unbiased pass@k per (seed, problem), ``[S, P]``."""
        return np.array([[pass_at_k(int(n), int(c), k) for n, c in zip(nr, cr)]
                         for nr, cr in zip(self.n, self.correct)])

    def values(self, metric: str, k: int | None = None) -> np.ndarray:
        return self.accuracy if metric == "avg" else self.pass_at(k or self.kmax)


def common_problems(runs: list[Run], benchmark: str) -> list[str]:
    """Ids present in every run's final ``benchmark`` evaluation, in the first run's order."""
    id_lists = [[str(p["id"]) for p in r.finals[benchmark].get("per_problem", [])] for r in runs]
    shared = set(id_lists[0]).intersection(*id_lists[1:])
    return [i for i in id_lists[0] if i in shared]


def arm_scores(runs: list[Run], benchmark: str, ids: list[str]) -> ArmScores:
    """Stack one arm's seeds (``runs`` all of one arm, each with ``benchmark`` evaluated)."""
    correct, n = [], []
    for r in runs:
        by_id = {str(p["id"]): p for p in r.finals[benchmark]["per_problem"]}
        correct.append([int(by_id[i]["correct"]) for i in ids])
        n.append([int(by_id[i].get("n", r.finals[benchmark].get("n"))) for i in ids])
    return ArmScores(runs[0].arm, benchmark, [r.seed for r in runs], ids, np.array(correct), np.array(n),
                     [r.final_step for r in runs])


def mean_ci(values: np.ndarray, n_boot: int) -> tuple[float, float, float]:
    """(mean, 95% low, 95% high) of ``values[seeds, problems]`` (`bootstrap_ci_2d`)."""
    lo, hi = bootstrap_ci_2d(values, n_boot=n_boot)
    return float(values.mean()), lo, hi


def bootstrap_diff_ci(a: np.ndarray, b: np.ndarray, n_boot: int = 2000, alpha: float = 0.05,
                      seed: int = 0) -> tuple[float, float]:
    """Percentile interval of mean(a) − mean(b) for arms with different seeds.

    ``a`` is ``[Sa, P]``, ``b`` is ``[Sb, P]`` over the same P problems: each resample draws P problem
    indices shared by both arms (the problems are the same) and seeds independently per arm.
    """
    rng = np.random.default_rng(seed)
    n_problems = a.shape[1]
    diffs = np.empty(n_boot)
    for i in range(n_boot):
        p = rng.integers(0, n_problems, size=n_problems)
        sa = rng.integers(0, a.shape[0], size=a.shape[0])
        sb = rng.integers(0, b.shape[0], size=b.shape[0])
        diffs[i] = a[np.ix_(sa, p)].mean() - b[np.ix_(sb, p)].mean()
    lo, hi = np.quantile(diffs, [alpha / 2, 1 - alpha / 2])
    return float(lo), float(hi)


def diff_ci(a: ArmScores, b: ArmScores, metric: str, k: int | None, n_boot: int) -> dict:
    """Δ = score(a) − score(b) with a 95% interval, paired by seed when both have the same seeds."""
    va, vb = a.values(metric, k), b.values(metric, k)
    paired = sorted(a.seeds) == sorted(b.seeds)
    if paired:
        order_b = [b.seeds.index(s) for s in a.seeds]
        lo, hi = bootstrap_ci_2d(va - vb[order_b], n_boot=n_boot)
    else:
        lo, hi = bootstrap_diff_ci(va, vb, n_boot=n_boot)
    return {"delta": float(va.mean() - vb.mean()), "delta_lo": lo, "delta_hi": hi,
            "pairing": "paired by seed" if paired else "unpaired"}


# --- trajectories --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Trajectory:
    """One per-step curve of metrics.jsonl."""

    key: str  # metrics.jsonl key
    slug: str  # file name
    title: str
    ylabel: str
    window: int = 1  # centred rolling mean over logged values (1 = raw)


TRAJECTORIES = (
    Trajectory("reward/mean", "reward", "Training reward (reward/mean)", "reward per rollout (fraction correct for 0/1 rewards)"),
    Trajectory("entropy", "entropy", "Token entropy (pre-update policy)", "entropy (nats/token)"),
    Trajectory("kappa", "kappa", "Nominal sharpness κ", "κ (advantage gap per unit reward gap)"),
    Trajectory("kappa_eff", "kappa_eff", f"Measured sharpness κ_eff (rolling mean of {KAPPA_EFF_WINDOW})",
               "κ_eff (log-ratio gap per unit reward gap)", window=KAPPA_EFF_WINDOW),
    Trajectory("response/len_mean", "response_len", "Response length", "response length (tokens)"),
)


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _avg_value(record: dict):
    """avg@n of an eval.jsonl line (the key is literally ``avg@n``; older lines: ``avg@<n>``)."""
    if "avg@n" in record:
        return record["avg@n"]
    return next((v for k, v in record.items() if k.startswith("avg@")), None)


def seed_frame(runs: list[Run], key: str, window: int = 1, benchmark: str | None = None) -> pd.DataFrame:
    """``[steps, seeds]`` of one metric (``benchmark`` given: avg@n of that benchmark in eval.jsonl).

    Null and non-finite values are dropped; ``window`` > 1 smooths each seed before averaging.
    """
    cols = {}
    for r in runs:
        if benchmark is None:
            points = {m["step"]: m.get(key) for m in r.metrics if "step" in m}
        else:
            points = {e["step"]: _avg_value(e) for e in r.evals if e.get("benchmark") == benchmark and "step" in e}
        s = pd.Series({int(k): float(v) for k, v in points.items() if _finite(v)}, dtype=float).sort_index()
        if window > 1:
            s = s.rolling(window, center=True, min_periods=1).mean()
        if len(s):
            cols[r.seed] = s
    return pd.DataFrame(cols).sort_index()


def band(frame: pd.DataFrame) -> pd.DataFrame:
    """Per step: mean, min and max over the seeds that logged it, and how many did."""
    return pd.DataFrame({"mean": frame.mean(axis=1), "lo": frame.min(axis=1), "hi": frame.max(axis=1),
                         "seeds": frame.count(axis=1)})


def final_value(runs: list[Run], key: str) -> tuple[float, float, float] | None:
    """Mean over seeds (and min, max over seeds) of each run's mean over its last 10% of logged values."""
    per_seed = []
    for r in runs:
        vals = [m[key] for m in r.metrics if _finite(m.get(key))]
        if vals:
            tail = max(1, math.ceil(FINAL_FRACTION * len(vals)))
            per_seed.append(float(np.mean(vals[-tail:])))
    if not per_seed:
        return None
    return float(np.mean(per_seed)), min(per_seed), max(per_seed)


# --- figures -------------------------------------------------------------------------------------


def arm_colors(arms) -> dict[str, str]:
    """One colour per arm, from `PALETTE` in sorted arm order (cycling past 20 arms): every figure of a
    report takes its colours from this one dict."""
    return {a: PALETTE[i % len(PALETTE)] for i, a in enumerate(sorted(set(arms)))}


def _figure():
    # Figure without pyplot: rendering goes through the Agg/SVG canvases (headless) and no global
    # backend or figure registry is touched.
    from matplotlib.figure import Figure

    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(6.4, 4.2), layout="constrained")
    ax = fig.add_subplot()
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps and k are whole numbers
    return fig, ax


def _save(fig, figures_dir: Path, slug: str) -> Path:
    png = figures_dir / f"{slug}.png"
    with atomic_output(png) as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    with atomic_output(figures_dir / f"{slug}.svg") as tmp:
        fig.savefig(tmp, format="svg", metadata={"Date": None})  # no timestamp: reproducible files
    return png


def plot_trajectory(bands: dict[str, pd.DataFrame], colors: dict[str, str], title: str, ylabel: str):
    """Mean line and min–max band per arm over steps; ``bands[arm]`` comes from `band`."""
    fig, ax = _figure()
    for arm, b in bands.items():
        seeds = int(b["seeds"].max())
        ax.plot(b.index, b["mean"], color=colors[arm], label=f"{arm} ({seeds} seed{'s' * (seeds != 1)})",
                marker="o" if len(b) < 3 else None, markersize=3)
        if seeds > 1:
            ax.fill_between(b.index, b["lo"], b["hi"], color=colors[arm], alpha=0.2, linewidth=0)
    ax.set_title(f"{title}\n{BAND}", fontsize=10)
    ax.set_xlabel(X_LABEL)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def plot_pass_at_k(curves: dict[str, pd.DataFrame], colors: dict[str, str], benchmark: str):
    """pass@k against k per arm with its 95% band; ``curves[arm]`` has columns k, value, lo, hi."""
    fig, ax = _figure()
    kmax = 1
    for arm, c in curves.items():
        ax.plot(c["k"], c["value"], color=colors[arm], marker="o", markersize=3, label=arm)
        ax.fill_between(c["k"], c["lo"], c["hi"], color=colors[arm], alpha=0.2, linewidth=0)
        kmax = max(kmax, int(c["k"].max()))
    if kmax >= 8:
        ax.set_xscale("log", base=2)
    ax.set_title(f"pass@k on {benchmark} (final evaluation)\nmean over seeds and problems; "
                 "band: 95% bootstrap over seeds × problems", fontsize=10)
    ax.set_xlabel("k (samples per problem)")
    ax.set_ylabel("pass@k (fraction of problems solved)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


# --- tables --------------------------------------------------------------------------------------


def _pct(v: float) -> str:
    return f"{100 * v:.1f}"


def _with_ci(v: float, lo: float, hi: float) -> str:
    return f"{100 * v:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]"


def _delta(v: float, lo: float, hi: float) -> str:
    return f"{100 * v:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]"


def markdown_table(df: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table of ``df`` (no index); cells are str() of the values."""

    def cell(v) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    header = [cell(c) for c in df.columns]
    rows = [[cell(v) for v in row] for row in df.itertuples(index=False)]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


# Characters used in our headers that pdflatex does not take as text.
_LATEX_SYMBOLS = {"κ\\_eff": r"$\kappa_{\mathrm{eff}}$", "κ": r"$\kappa$", "Δ": r"$\Delta$", "×": r"$\times$",
                  "–": "--", "−": "-"}


def latex_table(df: pd.DataFrame) -> str:
    text = df.to_latex(index=False, escape=True)
    for k, v in _LATEX_SYMBOLS.items():
        text = text.replace(k, v)
    return text


def write_table(numbers: pd.DataFrame, shown: pd.DataFrame, tables_dir: Path, name: str) -> str:
    """CSV of ``numbers``; Markdown and LaTeX of ``shown`` (the same results, formatted). Returns the Markdown."""
    write_atomic(tables_dir / f"{name}.csv", numbers.to_csv(index=False))
    md = markdown_table(shown)
    write_atomic(tables_dir / f"{name}.md", md)
    write_atomic(tables_dir / f"{name}.tex", latex_table(shown))
    return md


# --- the report ----------------------------------------------------------------------------------


def default_out(dirs: list[Path]) -> Path:
    """``SWEEP/report`` for a single sweep directory; anything else needs an explicit output folder."""
    if len(dirs) == 1 and _is_sweep(Path(dirs[0])) and not _is_run(Path(dirs[0])):
        return Path(dirs[0]) / "report"
    raise UserError("pass -o OUT: the output folder defaults to SWEEP/report only for a single sweep directory")


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "x"


class _Report:
    """Builds the tables, figures and text of one report (state shared by the sections)."""

    def __init__(self, runs: list[Run], issues: list[Issue], out: Path, n_boot: int):
        self.runs, self.issues, self.out, self.n_boot = runs, issues, out, n_boot
        self.arms = sorted({r.arm for r in runs})
        self.colors = arm_colors(self.arms)
        self.by_arm = {a: [r for r in runs if r.arm == a] for a in self.arms}
        self.info = {a: (rs[0].baseline, rs[0].variant) for a, rs in self.by_arm.items()}
        self.tables_dir, self.figures_dir, self.data_dir = out / "tables", out / "figures", out / "data"
        for d in (self.tables_dir, self.figures_dir, self.data_dir):
            d.mkdir(parents=True, exist_ok=True)
        self.md: list[str] = []
        self.summary: list[str] = []
        self.scores: dict[tuple[str, str], ArmScores] = {}  # (arm, benchmark)
        self.benchmarks: list[str] = []

    # -- sections --

    def runs_section(self) -> None:
        rows = []
        for r in self.runs:
            notes = []
            if not r.evals:
                notes.append("no eval.jsonl")
            if not r.finals:
                notes.append("no final evaluation")
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
        self.md += ["## Runs", "", f"{len(self.runs)} runs, {len(self.arms)} arms.", "",
                    write_table(numbers, shown, self.tables_dir, "runs")]
        if self.issues:
            self.md += ["### Failed, unfinished or missing runs", ""]
            self.md += [f"- **{i.name}**: {i.status}" + (f" — {i.detail}" if i.detail else "") for i in self.issues]
            self.md.append("")

    def final_section(self) -> None:
        benchmarks = sorted({b for r in self.runs for b in r.finals})
        rows, curve_rows = [], []
        for bench in benchmarks:
            having = [r for r in self.runs if bench in r.finals and r.finals[bench].get("per_problem")]
            ids = common_problems(having, bench) if having else []
            if not ids:
                self.issues.append(Issue(bench, "no shared problems", "the runs' final evaluations share no problem id"))
                continue
            self.benchmarks.append(bench)
            totals = {len(r.finals[bench]["per_problem"]) for r in having}
            if totals != {len(ids)}:
                self.md += [f"Note: {bench} is scored on the {len(ids)} problems every run evaluated.", ""]
            for arm in self.arms:
                arm_runs = [r for r in having if r.arm == arm]
                if not arm_runs:
                    continue
                sc = arm_scores(arm_runs, bench, ids)
                self.scores[arm, bench] = sc
                avg = mean_ci(sc.accuracy, self.n_boot)
                curve = []
                for k in range(1, sc.kmax + 1):
                    v, lo, hi = mean_ci(sc.pass_at(k), self.n_boot)
                    curve.append({"arm": arm, "benchmark": bench, "k": k, "value": v, "lo": lo, "hi": hi})
                curve_rows += curve
                baseline, variant = self.info[arm]
                rows.append({"arm": arm, "baseline": baseline, "variant": variant, "benchmark": bench,
                             "seeds": len(sc.seeds), "seed_list": ",".join(map(str, sc.seeds)),
                             "problems": len(ids), "n": sc.kmax, "eval_steps": ",".join(map(str, sorted(set(sc.steps)))),
                             "avg": avg[0], "avg_lo": avg[1], "avg_hi": avg[2], "k": sc.kmax,
                             "pass_k": curve[-1]["value"], "pass_k_lo": curve[-1]["lo"], "pass_k_hi": curve[-1]["hi"]})
        self.md += ["## Final scores", ""]
        if not rows:
            self.md += ["No final evaluations found (`rbctl eval RUN` writes RUN/eval/step_XXXXXX/).", ""]
            return
        numbers = pd.DataFrame(rows)
        shown = pd.DataFrame({
            "arm": numbers["arm"], "benchmark": numbers["benchmark"], "seeds": numbers["seeds"],
            "problems × n": [f"{p} × {n}" for p, n in zip(numbers["problems"], numbers["n"])],
            "avg@n % [95% CI]": [_with_ci(*x) for x in zip(numbers["avg"], numbers["avg_lo"], numbers["avg_hi"])],
            "pass@k (k = n) % [95% CI]": [_with_ci(*x) for x in zip(numbers["pass_k"], numbers["pass_k_lo"], numbers["pass_k_hi"])],
        })
        self.md += ["Mean over seeds and problems of each seed's final evaluation; 95% bootstrap interval over "
                    "seeds × problems. avg@n is the mean fraction of correct samples (pass@1 from n samples); "
                    "pass@k is unbiased, at k = n.", "", write_table(numbers, shown, self.tables_dir, "final_scores")]
        curves = pd.DataFrame(curve_rows)
        write_atomic(self.data_dir / "pass_at_k.csv", curves.to_csv(index=False))
        for bench in self.benchmarks:
            c = curves[curves["benchmark"] == bench]
            fig = plot_pass_at_k({a: g for a, g in c.groupby("arm", sort=True)}, self.colors, bench)
            png = _save(fig, self.figures_dir, f"pass_at_k_{_slug(bench)}")
            self.md += [f"![pass@k on {bench}](figures/{png.name})", ""]

    def _arms_of(self, baseline: str, variant: str) -> list[str]:
        return [a for a in self.arms if self.info[a] == (baseline, variant)]

    @staticmethod
    def _metric_name(metric: str, k: int) -> str:
        return "avg@n" if metric == "avg" else f"pass@{k}"

    def _compare(self, a: ArmScores, b: ArmScores, metric: str) -> dict:
        k = min(a.kmax, b.kmax)
        va, vb = a.values(metric, k).mean(), b.values(metric, k).mean()
        return {"metric": self._metric_name(metric, k), "k": k, "a": float(va), "b": float(vb),
                **diff_ci(a, b, metric, k, self.n_boot), "seeds_a": len(a.seeds), "seeds_b": len(b.seeds),
                "problems": len(a.ids)}

    def _say(self, what: str, c: dict, bench: str, up: str, down: str) -> str:
        d, lo, hi = (100 * c[x] for x in ("delta", "delta_lo", "delta_hi"))
        basis = f"{c['pairing']}, {c['seeds_a']} vs {c['seeds_b']} seeds × {c['problems']} problems"
        if max(c["seeds_a"], c["seeds_b"]) < 2:
            basis += "; one seed per arm, so the interval covers problem sampling only"
        if lo > 0:
            return f"{what} {up} {c['metric']} on {bench} by {d:+.1f} points [{lo:+.1f}, {hi:+.1f}] ({basis})."
        if hi < 0:
            return f"{what} {down} {c['metric']} on {bench} by {d:+.1f} points [{lo:+.1f}, {hi:+.1f}] ({basis})."
        return (f"{what}: no significant difference in {c['metric']} on {bench} "
                f"(Δ {d:+.1f} points [{lo:+.1f}, {hi:+.1f}], the 95% interval includes 0; {basis}).")

    def budget_section(self) -> None:
        self.md += ["## Reward budget vs base estimator", ""]
        pairs = []
        for baseline in sorted({b for b, _ in self.info.values()}):
            bases, budgets = self._arms_of(baseline, "base"), self._arms_of(baseline, "budget")
            pairs += [(baseline, x, y) for x in bases for y in budgets]
        rows = []
        for baseline, base, budget in pairs:
            for bench in self.benchmarks:
                if (base, bench) not in self.scores or (budget, bench) not in self.scores:
                    continue
                for metric in ("avg", "pass"):
                    c = self._compare(self.scores[budget, bench], self.scores[base, bench], metric)
                    rows.append({"baseline": baseline, "base_arm": base, "budget_arm": budget, "benchmark": bench,
                                 "metric": c["metric"], "k": c["k"], "base": c["b"], "budget": c["a"],
                                 "delta": c["delta"], "delta_lo": c["delta_lo"], "delta_hi": c["delta_hi"],
                                 "pairing": c["pairing"], "seeds_base": c["seeds_b"], "seeds_budget": c["seeds_a"],
                                 "problems": c["problems"]})
                    label = baseline if len(pairs) == 1 or sum(p[0] == baseline for p in pairs) == 1 else f"{budget} vs {base}"
                    self.summary.append(self._say(f"{label} + budget", c, bench, "improves", "lowers"))
        if not rows:
            self.md += ["No baseline has both a base and a budget arm with final evaluations.", ""]
            return
        numbers = pd.DataFrame(rows)
        self.md += ["Rows: baseline estimator. Scores in %, Δ = budget − base in points with a 95% bootstrap "
                    "interval over seeds × problems (paired by seed when both arms have the same seeds).", ""]
        for metric, title in (("avg@n", "avg@n"), ("pass@", "pass@k at the largest common k")):
            part = numbers[numbers["metric"].str.startswith(metric)]
            shown = self._wide(part, ("base", "budget"))
            name = "budget_vs_base_avg" if metric == "avg@n" else "budget_vs_base_pass_k"
            self.md += [f"### {title}", "", write_table(part, shown, self.tables_dir, name)]

    def _wide(self, part: pd.DataFrame, cols: tuple[str, str]) -> pd.DataFrame:
        """Paper layout: one row per (baseline, arms), per benchmark the two scores and Δ [95% CI]."""
        out = {}
        several = part.groupby("baseline")["budget_arm"].nunique().max() > 1 or \
            part.groupby("baseline")["base_arm"].nunique().max() > 1
        for _, r in part.iterrows():
            key = r["baseline"] if not several else f"{r['baseline']} ({r['budget_arm']} vs {r['base_arm']})"
            row = out.setdefault(key, {"baseline": key})
            tag = f"{r['benchmark']} {r['metric']}"
            row[f"{tag} {cols[0]}"] = _pct(r[cols[0]])
            row[f"{tag} {cols[1]}"] = _pct(r[cols[1]])
            row[f"{tag} Δ [95% CI]"] = _delta(r["delta"], r["delta_lo"], r["delta_hi"])
        return pd.DataFrame(list(out.values())).fillna("–")

    def entropy_section(self) -> None:
        self.md += ["## Entropy bonus vs reward budget", ""]
        rows, skipped = [], []
        for baseline in sorted({b for b, _ in self.info.values()}):
            budgets = self._arms_of(baseline, "budget")
            entropy_arms = [a for a in self.arms if self.info[a][0] == baseline and self.info[a][1].startswith("entropy")]
            if entropy_arms and len(budgets) != 1:
                skipped.append(f"{baseline}: {len(budgets)} budget arms ({', '.join(budgets) or 'none'}), "
                               "need exactly one to compare the entropy arms with")
            if len(budgets) != 1 or not entropy_arms:
                continue
            budget = budgets[0]
            for arm in [budget, *entropy_arms]:
                ent = final_value(self.by_arm[arm], "entropy")
                keff = final_value(self.by_arm[arm], "kappa_eff")
                row = {"baseline": baseline, "arm": arm, "variant": self.info[arm][1], "budget_arm": budget,
                       "seeds": len(self.by_arm[arm]),
                       "entropy_final": ent[0] if ent else None, "entropy_final_min": ent[1] if ent else None,
                       "entropy_final_max": ent[2] if ent else None,
                       "kappa_eff_final": keff[0] if keff else None, "kappa_eff_final_min": keff[1] if keff else None,
                       "kappa_eff_final_max": keff[2] if keff else None}
                for bench in self.benchmarks:
                    if (arm, bench) not in self.scores:
                        continue
                    sc = self.scores[arm, bench]
                    for metric in ("avg", "pass"):
                        tag = f"{bench}:{'avg@n' if metric == 'avg' else 'pass@k'}"
                        v, lo, hi = mean_ci(sc.values(metric), self.n_boot)
                        row.update({tag: v, f"{tag}_lo": lo, f"{tag}_hi": hi, f"{tag}_k": sc.kmax if metric == "pass" else None})
                        if arm != budget and (budget, bench) in self.scores:
                            c = self._compare(sc, self.scores[budget, bench], metric)
                            row.update({f"{tag}_delta_vs_budget": c["delta"], f"{tag}_delta_lo": c["delta_lo"],
                                        f"{tag}_delta_hi": c["delta_hi"], f"{tag}_pairing": c["pairing"]})
                            self.summary.append(self._say(f"{arm} (entropy bonus) vs {budget}", c, bench,
                                                          "is higher in", "is lower in"))
                rows.append(row)
        self.md += [f"Skipped {s}." for s in skipped] + ([""] if skipped else [])
        if not rows:
            self.md += ["No baseline has one budget arm and an entropy-bonus arm.", ""]
            return
        numbers = pd.DataFrame(rows)
        shown = pd.DataFrame({"baseline": numbers["baseline"], "arm": numbers["arm"], "variant": numbers["variant"]})
        for bench in self.benchmarks:
            for m in ("avg@n", "pass@k"):
                tag = f"{bench}:{m}"
                if tag not in numbers:
                    continue
                shown[f"{bench} {m} %"] = [_with_ci(v, lo, hi) if _finite(v) else "–"
                                          for v, lo, hi in zip(numbers[tag], numbers[f"{tag}_lo"], numbers[f"{tag}_hi"])]
                if f"{tag}_delta_vs_budget" in numbers:
                    shown[f"{bench} {m} Δ vs budget"] = [
                        _delta(d, lo, hi) if _finite(d) else "–"
                        for d, lo, hi in zip(numbers[f"{tag}_delta_vs_budget"], numbers[f"{tag}_delta_lo"],
                                             numbers[f"{tag}_delta_hi"])]
        shown["final entropy (nats/token)"] = [f"{v:.3f}" if _finite(v) else "–" for v in numbers["entropy_final"]]
        shown["final κ_eff"] = [f"{v:.3f}" if _finite(v) else "–" for v in numbers["kappa_eff_final"]]
        self.md += [f"Final entropy and κ_eff: each run's mean over its last {FINAL_FRACTION:.0%} of logged values, "
                    "averaged over seeds (descriptive, no interval). Scores in %, Δ = entropy arm − budget arm "
                    "in points [95% CI over seeds × problems]; pass@k at k = n.", "",
                    write_table(numbers, shown, self.tables_dir, "entropy_vs_budget")]
        for r in rows:
            if r["arm"] != r["budget_arm"] and _finite(r["entropy_final"]):
                b = next(x for x in rows if x["arm"] == r["budget_arm"])
                if _finite(b["entropy_final"]):
                    self.summary.append(f"Final entropy (descriptive): {r['arm']} {r['entropy_final']:.3f} vs "
                                        f"{b['arm']} {b['entropy_final']:.3f} nats/token.")

    def trajectory_section(self) -> None:
        self.md += ["## Training trajectories", "", f"Lines: {BAND} (seeds that logged the step). "
                    f"κ_eff: centred rolling mean over {KAPPA_EFF_WINDOW} logged values per seed, nulls dropped.", ""]
        eval_benches = list(dict.fromkeys(e["benchmark"] for r in self.runs for e in r.evals if "benchmark" in e))
        heldout = [Trajectory(f"heldout:{b}", f"heldout_{_slug(b)}", f"Held-out accuracy on {b} (avg@n, periodic eval)",
                              ACC_LABEL) for b in eval_benches]
        specs = [TRAJECTORIES[0], *heldout, *TRAJECTORIES[1:]]
        data = []
        for spec in specs:
            bench = spec.key.split(":", 1)[1] if spec.key.startswith("heldout:") else None
            bands = {}
            for arm in self.arms:
                frame = seed_frame(self.by_arm[arm], spec.key, spec.window, benchmark=bench)
                if not frame.empty:
                    bands[arm] = band(frame)
                    data.append(bands[arm].rename_axis("step").reset_index().assign(arm=arm, metric=spec.key))
            if not bands:
                continue
            png = _save(plot_trajectory(bands, self.colors, spec.title, spec.ylabel), self.figures_dir, f"traj_{spec.slug}")
            self.md += [f"![{spec.title}](figures/{png.name})", ""]
        if data:
            write_atomic(self.data_dir / "trajectories.csv",
                         pd.concat(data)[["arm", "metric", "step", "mean", "lo", "hi", "seeds"]].to_csv(index=False))

    def write(self, dirs: list[Path]) -> Path:
        self.runs_section()
        self.final_section()
        self.budget_section()
        self.entropy_section()
        self.trajectory_section()
        head = ["# rbctl report", "", "Inputs: " + ", ".join(f"`{d}`" for d in dirs), "",
                "## Summary (generated)", ""]
        head += [f"- {s}" for s in self.summary] or ["- No comparison could be made (see the tables below)."]
        if self.issues:
            head.append("- Incomplete: " + "; ".join(f"{i.name} ({i.status})" for i in self.issues) + ".")
        head.append("")
        path = self.out / "report.md"
        write_atomic(path, "\n".join(head + self.md))
        return path


def make_report(dirs: list[Path], out: Path | None = None, n_boot: int = 2000) -> Path:
    """Read every run under ``dirs``, write tables, figures and ``report.md`` into ``out``
    (default: `default_out`), and return the path of report.md."""
    dirs = [Path(d) for d in dirs]
    out = Path(out) if out is not None else default_out(dirs)
    runs, issues = find_runs(dirs)
    if not runs:
        raise UserError("no run with a metrics.jsonl under " + ", ".join(map(str, dirs)))
    out.mkdir(parents=True, exist_ok=True)
    return _Report(runs, issues, out, n_boot).write(dirs)


def final_scores_table(report_dir: Path):
    """A Rich table of a written report's final scores (None when there are none)."""
    from rich.table import Table

    path = Path(report_dir) / "tables" / "final_scores.csv"
    if not path.exists():
        return None
    df = pd.read_csv(path)
    table = Table(title="final scores: % correct [95% bootstrap CI over seeds × problems]")
    for col in ("arm", "benchmark", "seeds", "avg@n", "pass@n"):
        table.add_column(col, justify="left" if col in ("arm", "benchmark") else "right")
    for r in df.itertuples(index=False):
        table.add_row(r.arm, r.benchmark, str(r.seeds), _with_ci(r.avg, r.avg_lo, r.avg_hi),
                      _with_ci(r.pass_k, r.pass_k_lo, r.pass_k_hi))
    return table
