"""Print studies/reward_budgeting/docs/maze_setting.md: where MaxRL's published ordering (MaxRL above GRPO on pass@1) holds on
the CPU-scale maze, from the sweep studies/reward_budgeting/configs/ablate_maze_setting.yaml.

    python -m studies.reward_budgeting.documents.maze_setting SWEEP_DIR [--command "rbctl ablate ..."] > studies/reward_budgeting/docs/maze_setting.md

The sweep's arms are named ``grpo_<setting>`` and ``maxrl_<setting>``; per setting, the document
gives GRPO's and MaxRL's held-out pass@1 and pass@k at every periodic evaluation and at the final
one, the paired gap MaxRL − GRPO over seeds with its 95% t-interval and unadjusted p (the sweep's
principal comparisons are Holm-adjusted in its own report), and names the setting where the
final pass@1 gap is largest: the CPU-scale maze setting of the other maze sweeps.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
from pathlib import Path

import numpy as np
import pandas as pd

from rbctl.errors import UserError, exit_code
from rbctl.report.analyses.scores import arm_scores, common_problems
from rbctl.report.load import Run, find_runs
from rbctl.report.provenance import cpu_description, provenance
from rbctl.report.render.tables import delta, markdown_table, pct, pval
from rbctl.report.series import at_step, eval_steps_of
from rbctl.report.stats import DELTA_BOUNDS, holm, paired_delta

ARMS = ("grpo", "maxrl")


def settings(runs: list[Run]) -> dict[str, dict[str, list[Run]]]:
    """{setting: {"grpo": runs, "maxrl": runs}} from arm names ``<estimator>_<setting>``."""
    out: dict[str, dict[str, list[Run]]] = {}
    for r in runs:
        est, _, setting = r.arm.partition("_")
        if est in ARMS and setting:
            out.setdefault(setting, {}).setdefault(est, []).append(r)
    return {s: v for s, v in sorted(out.items()) if all(a in v for a in ARMS)}


def describe(run: Run) -> str:
    c = run.config
    ro, al, op = c.get("rollout", {}), c.get("algo", {}), c.get("optim", {})
    p, g, mb = ro.get("prompts_per_step"), ro.get("group_size"), al.get("ppo_mini_batch_size")
    updates = 1 if mb is None else (p // mb if p and mb else "?")
    return f"P {p} × G {g}, {updates} update{'s' * (updates != 1)} per rollout step, lr {op.get('lr'):g}, {c.get('steps')} steps"


def final_rows(by: dict[str, dict[str, list[Run]]], benchmark: str) -> list[dict]:
    rows = []
    for s, arms in by.items():
        all_runs = arms["grpo"] + arms["maxrl"]
        ids = common_problems(all_runs, benchmark)
        sc = {a: arm_scores(arms[a], benchmark, ids) for a in ARMS}
        kmax = min(x.kmax for x in sc.values())
        for label, metric, k in (("pass@1", "avg", None), (f"pass@{kmax}", "pass", kmax)):
            g, m = sc["grpo"].per_unit(metric, k), sc["maxrl"].per_unit(metric, k)
            d = paired_delta(m, g, bounds=DELTA_BOUNDS)
            rows.append({"setting": s, "what": describe(arms["grpo"][0]), "metric": f"final {label}", "seeds": d.n,
                         "GRPO %": pct(np.mean(list(g.values()))), "MaxRL %": pct(np.mean(list(m.values()))),
                         "MaxRL − GRPO [95% CI]": delta(d.mean, d.lo, d.hi), "p": d.p, "_mean": d.mean})
    return rows


def periodic_rows(by: dict[str, dict[str, list[Run]]], benchmark: str) -> list[dict]:
    rows = []
    for s, arms in by.items():
        steps = eval_steps_of(arms["grpo"] + arms["maxrl"], benchmark)
        keys = sorted({k for r in arms["grpo"] for e in r.evals for k in e if k.startswith("pass@")}, key=lambda x: int(x[5:]))
        for key in ["avg@n"] + keys[-1:]:
            for step in steps:
                g, m = at_step(arms["grpo"], step, benchmark, key), at_step(arms["maxrl"], step, benchmark, key)
                if not g or not m:
                    continue
                d = paired_delta(m, g, bounds=DELTA_BOUNDS)
                rows.append({"setting": s, "metric": "pass@1" if key == "avg@n" else key, "step": step, "seeds": d.n,
                             "GRPO %": pct(np.mean(list(g.values()))), "MaxRL %": pct(np.mean(list(m.values()))),
                             "MaxRL − GRPO [95% CI]": delta(d.mean, d.lo, d.hi), "p (unadjusted)": pval(d.p, "–")})
    return rows


def best_setting(rows: list[dict]) -> tuple[str, float]:
    p1 = [r for r in rows if r["metric"] == "final pass@1" and math.isfinite(r["_mean"])]
    best = max(p1, key=lambda r: r["_mean"])
    return best["setting"], best["_mean"]


def load(sweep: Path) -> tuple[list[Run], str, dict[str, dict[str, list[Run]]], list[dict]]:
    """The sweep's runs, its benchmark, its settings with finished runs and their final-evaluation rows."""
    runs, _ = find_runs([sweep])
    bench = next(iter(runs[0].finals)) if runs and runs[0].finals else "builtin"
    by = settings([r for r in runs if bench in r.finals])
    if not by:
        raise UserError(f"{sweep}: no setting with finished GRPO and MaxRL runs (arms grpo_<setting>, maxrl_<setting>)")
    return runs, bench, by, final_rows(by, bench)


def markdown(sweep: Path, command: str | None = None, cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    runs, bench, by, fin = load(sweep)
    adj, _ = holm([r["p"] for r in fin if r["metric"] == "final pass@1"])
    it = iter(adj)
    for r in fin:
        r["Holm p (pass@1, over settings)"] = pval(next(it), "–") if r["metric"] == "final pass@1" else ""
        r["p (unadjusted)"] = pval(r.pop("p"), "–")
    best, gap = best_setting(fin)
    prov = provenance(sweep, short=True, runs=runs)
    out = ["# Where MaxRL's ordering holds on the CPU-scale maze", "",
           f"Generated by `python -m studies.reward_budgeting.documents.maze_setting` on {dt.date.today().isoformat()}"
           + (f" from `{command}`" if command else "") + f"; runs from {prov.code}, last logged {prov.last}; "
           f"{len(runs)} runs. Machine: {cpu_description(cpuinfo)}.", "",
           "GRPO and MaxRL only (the paper's arms), under what the paper's code does differently from "
           "configs/maze.yaml: the group size at equal rollouts per step, one update per rollout batch instead of 4 "
           "mini-batches, and a 4× longer horizon. Held-out pass@1 is avg@n over the 256 test mazes; Δ paired over "
           "seeds, 95% t-interval clipped to [−100, +100].", "",
           "## Final evaluation", "", markdown_table(pd.DataFrame(fin).drop(columns=["_mean"])), "",
           "## Periodic evaluations (the horizon)", "", markdown_table(pd.DataFrame(periodic_rows(by, bench))), "",
           "## The setting kept", "",
           f"The largest final pass@1 gap MaxRL − GRPO is at **{best}** ({100 * gap:+.1f} points; "
           + ("MaxRL above GRPO, the paper's ordering" if gap > 0 else "no setting puts MaxRL above GRPO: the paper's "
              "ordering is not reproduced here, and this is the closest") + ")."]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m studies.reward_budgeting.documents.maze_setting", description=__doc__.split("\n")[0])
    ap.add_argument("sweep", type=Path)
    ap.add_argument("--command")
    ap.add_argument("--best", action="store_true", help="print only the name of the setting kept")
    a = ap.parse_args(argv)
    return exit_code(lambda: print(best_setting(load(a.sweep)[3])[0] if a.best else markdown(a.sweep, a.command)))


if __name__ == "__main__":
    raise SystemExit(main())
