"""Print studies/reward_budgeting/docs/results.md: a dated, self-describing Markdown document of a sweep's results.

    python -m studies.reward_budgeting.documents.results SWEEP_DIR [--command "rbctl ablate ..."] \
        [--replication SWEEP_B --replication-command "..."] [--study STUDY_DIR --study-command "..."] > studies/reward_budgeting/docs/results.md
    python -m studies.reward_budgeting.documents.results SWEEP_DIR --headline [--replication SWEEP_B] [--study STUDY_DIR] [--write-readme [README]]

`--headline` prints only the principal verdicts and where they come from (the README's headline;
with `--replication`, the Δ on the disjoint seeds beside them; with `--study`, the test over warm
starts and the share of Δ's variance between them);
`--write-readme` puts that between the study README's (or the named file's) `<!-- headline: begin -->` and `<!-- headline: end -->`.

Builds the report's data (`rbctl.report.report_data`) and prints only its tables, as the report shows
them (`rbctl.report.render.report.shown_tables`), so the document is regenerated, never edited:
the date, the commit the runs ran (their provenance's ``git_commit``), the command, the machine
(CPU model and instruction sets from /proc/cpuinfo), then the principal verdicts, the power of the
design, the warm starts, the plateau test, escape times, final scores and the exploratory tables.
`--replication` adds the same sweep on disjoint seeds, its verdicts beside these
(`studies.reward_budgeting.documents.stability`); `--study` adds a second sweep's verdicts, power and warm-start tables
(the full study over the shipped warm starts).
"""

from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path

from rbctl.report import ReportData, report_data
from rbctl.report.provenance import cpu_description, provenance, write_block
from rbctl.report.render.answer import verdict_table, warm_start_rows
from rbctl.report.render.report import shown_tables
from rbctl.report.render.tables import delta, markdown_table, pval
from rbctl.report.stats import NOT_TESTABLE
from studies.reward_budgeting.documents import STUDY_README

# (table file, heading, what the document says about it)
SECTIONS = (
    ("verdicts", "Principal comparisons", "The comparisons the sweep file states before running (or, without them, every "
     "stated pair as one family): Δ in points with a 95% t-interval over units (clipped to [−100, +100]), Holm-adjusted p "
     "(a comparison with fewer than 3 units or the same Δ in every unit is not testable and not in the family), "
     "P(improvement) with a 95% paired-bootstrap interval and rliable's independent-bootstrap interval beside it; "
     "each called higher, lower, equivalent within the stated margin (TOST), or inconclusive with its direction and "
     "the smallest effect its test could detect."),
    ("power", "Power of the design", "Paired two-sided t-test at α/m, m the principal comparisons tested; planning SD "
     "from the sweep file, measured SD from these runs."),
    ("warm_starts", "Warm starts", "Per warm start (unadjusted), over warm starts (the warm start as the unit; Holm over "
     "the comparisons tested at that level) and pooled (Holm p of the principal family); the share of Δ's variance "
     "between warm starts."),
    ("plateau", "Plateau test (plain GRPO)", "Criterion by criterion over units."),
    ("plateau_units", None, "Per unit."),
    ("escape", "Escape time", "Kaplan–Meier median and restricted mean escape step per arm."),
    ("escape_logrank", None, "Log-rank tests (unadjusted)."),
    ("final_scores", "Final scores", "Mean over units with a 95% interval of the kind the `interval` column names (a "
     "t-interval over units, clipped to [0, 100]; a bootstrap over problems for an arm with one unit)."),
    ("iqm", None, "Interquartile mean with a stratified bootstrap interval."),
    ("exploratory", "Exploratory comparisons", "In no declared family: the interval and an unadjusted p, no call."),
    ("comparisons", "Comparisons in detail", "Every stated pair with its per-unit Δ."),
    ("entropy_cause", "Entropy and κ_eff vs pass@1", "Between arms (arm means) and within arms (run − arm mean)."),
    ("final_entropy_kappa", None, "Final entropy, κ and κ_eff (last quarter of each run)."),
)


def results_markdown(sweep: Path, data: ReportData, command: str | None = None, cpuinfo: Path = Path("/proc/cpuinfo"),
                     today: dt.date | None = None) -> str:
    """The document, from the tables of ``data`` (the report's data of ``sweep``)."""
    prov = provenance(sweep, runs=list(data.sweep.runs))
    runs, commits, last, per_arm = prov.runs, prov.code, prov.last, prov.per_arm
    name = next((r.sweep for r in runs if r.sweep), Path(sweep).name)
    out = ["# Results", "",
           f"Generated on {(today or dt.date.today()).isoformat()} by `python -m studies.reward_budgeting.documents.results {sweep}` from "
           "`rbctl report`'s tables; do not edit by hand.", "",
           f"- Sweep `{name}` in `{sweep}`: {len(runs)} runs, {len({r.arm for r in runs})} arms, units per arm: "
           f"{', '.join(map(str, per_arm)) or 'none'}; runs last logged on {last}.",
           f"- Code: {commits} (the runs' provenance).",
           f"- Command: `{command or f'rbctl ablate SWEEP.yaml -o {sweep}'}`.",
           f"- Machine (where this document was generated): {cpu_description(cpuinfo)}.", ""]
    tables = shown_tables(data)
    for name, heading, note in SECTIONS:
        if name not in tables:
            continue
        if heading:
            out += [f"## {heading}", ""]
        out += [note, "", markdown_table(tables[name]).rstrip(), ""]
    return "\n".join(out)


STUDY_SECTIONS = ("verdicts", "power", "warm_starts", "escape", "final_scores")


def _replication(sweep_a: Path, sweep_b: Path, data_a: ReportData | None = None):
    """(units of A, units of B, the side-by-side verdict table, its conclusion (`conclusion`), shared units);
    ``data_a``: the report's data of ``sweep_a``, when the caller has it."""
    from studies.reward_budgeting.documents.stability import seed_units, conclusion, side_by_side, verdict_rows, verdicts

    a = verdict_rows(data_a, sweep_a) if data_a is not None else verdicts(sweep_a)
    b = verdicts(sweep_b)
    table, same = side_by_side(a, b)
    return seed_units(a), seed_units(b), table, conclusion(table, same), sorted(seed_units(a) & seed_units(b), key=_unit_key)


def replication_markdown(sweep_a: Path, sweep_b: Path, command: str | None = None,
                         data_a: ReportData | None = None) -> str:
    """The section saying whether the same sweep on disjoint seeds gets the same calls."""
    ua, ub, table, said, shared = _replication(sweep_a, sweep_b, data_a)
    prov = provenance(sweep_b)
    n, commits, last = len(prov.runs), prov.code, prov.last
    return "\n".join([
        "## Replication on disjoint seeds", "",
        f"A: `{sweep_a}` (units {span(ua)}); B: `{sweep_b}` (units {span(ub)}): {n} runs from {commits}, last logged {last}; command "
        f"`{command or 'rbctl ablate --seed-offset N'}`. Printed by `python -m studies.reward_budgeting.documents.stability {sweep_a} {sweep_b}`.",
        "", markdown_table(table), "",
        (f"**Not a replication: the two sweeps share units ({', '.join(shared)}).**" if shared else
         "**Every principal comparison gets the same call on both seed sets.**" if said.startswith("every") else
         "**The calls differ between the two seed sets.**" if said == "the calls differ" else f"**{said[0].upper()}{said[1:]}.**"),
        ""])


def _unit_key(u: str):
    return (0, int(u)) if u.lstrip("-").isdigit() else (1, u)


def span(units) -> str:
    """``0–23`` for a run of consecutive integer units, else the sorted list."""
    us = sorted(units, key=_unit_key)
    if us and all(u.lstrip("-").isdigit() for u in us) and [int(u) for u in us] == list(range(int(us[0]), int(us[-1]) + 1)):
        return f"{us[0]}–{us[-1]}" if len(us) > 1 else us[0]
    return ", ".join(us)


def study_markdown(study: Path, data: ReportData, command: str | None = None) -> str:
    """The full study's verdicts, power, warm-start and escape tables (``data``: its report's data)."""
    prov = provenance(study, runs=list(data.sweep.runs))
    n, commits, last = len(prov.runs), prov.code, prov.last
    out = ["## The full study over the warm starts", "",
           f"`{study}`: {n} runs from {commits}, last logged {last}; command `{command or 'rbctl ablate STUDY.yaml'}`. "
           "A unit is a (warm start, seed) pair; the warm-start table treats the warm start as the unit.", ""]
    notes = {name: note for name, _, note in SECTIONS}
    tables = shown_tables(data)
    for name in STUDY_SECTIONS:
        if name in tables:
            out += [f"### {name.replace('_', ' ').capitalize()}", "", notes[name], "",
                    markdown_table(tables[name]).rstrip(), ""]
    return "\n".join(out)


HEADLINE_BEGIN, HEADLINE_END = "<!-- headline: begin -->", "<!-- headline: end -->"


def replication_line(sweep_a: Path, sweep_b: Path, data_a: ReportData | None = None) -> str:
    """The README's short form of the replication: Δ on each seed set and whether the calls agree."""
    ua, ub, table, said, shared = _replication(sweep_a, sweep_b, data_a)
    if shared:
        raise SystemExit(f"{sweep_a} and {sweep_b} share units ({', '.join(shared)}): not a replication")
    short = table[["comparison", "A: Δ [95% t-CI]", "B: Δ [95% t-CI]", "same call"]].rename(
        columns={"A: Δ [95% t-CI]": f"seeds {span(ua)}: Δ [95% t-CI]", "B: Δ [95% t-CI]": f"seeds {span(ub)}: Δ [95% t-CI]"})
    return (f"The same sweep on disjoint seeds (`python -m studies.reward_budgeting.documents.stability {sweep_a} {sweep_b}`): "
            + (f"{said}." if said.startswith("every") else f"**{said}.**")
            + "\n\n" + markdown_table(short))


def study_line(study: Path) -> str:
    """The README's short form of the full study: per principal comparison, the test over warm starts
    (the warm start as the unit; its p Holm-adjusted over the comparisons tested at that level), the
    pooled one (Holm p of the principal family), and the share of Δ's variance between warm starts."""
    import pandas as pd

    data = report_data([study])
    if data.warm_starts is None or not data.warm_starts.comparisons:
        raise SystemExit(f"{study}: its report has no warm-start table (is it a sweep over warm starts?)")
    t = warm_start_rows(data.warm_starts)
    prov = provenance(study, short=True, runs=list(data.sweep.runs))
    n, commits, last = len(prov.runs), prov.code, prov.last
    rows, untested = [], []
    for comp, g in t.groupby("comparison", sort=False):
        over = g[g["level"].str.startswith("over warm starts")].iloc[0]
        pooled = g[g["level"].str.startswith("pooled")].iloc[0]
        var = g[g["level"] == "variance of Δ"].iloc[0]
        why = {name: "" if pd.isna(r["not_testable"]) else str(r["not_testable"]) for name, r in (("over", over), ("pooled", pooled))}
        if why["over"]:
            untested.append(f"{comp} ({why['over']})")
        rows.append({"comparison": comp,
                     f"over {int(over['units'])} warm starts: Δ [95% t-CI], Holm p":
                         f"{delta(over['delta'], over['lo'], over['hi'])}, {pval(over['p_holm'], NOT_TESTABLE if why['over'] else '–')}",
                     f"pooled ({int(pooled['units'])} units): Δ [95% t-CI], Holm p":
                         f"{delta(pooled['delta'], pooled['lo'], pooled['hi'])}, {pval(pooled['p_holm'], NOT_TESTABLE if why['pooled'] else '–')}",
                     "variance of Δ between / within warm starts": str(var["per_unit"])})
    m = len(rows) - len(untested)
    note = (f"Over warm starts: Holm over the {m} comparison{'s' * (m != 1)} tested at that level"
            + (f"; not testable: {'; '.join(untested)}" if untested else "") + ". Pooled: Holm p of the principal family.")
    return (f"The full study over the shipped warm starts (`{study}`, {n} runs from {commits}, last logged {last}):"
            "\n\n" + markdown_table(pd.DataFrame(rows)) + "\n" + note)


def headline_markdown(sweep: Path, data: ReportData) -> str:
    """The principal verdict table of a report (what its ``tables/verdicts.md`` holds; ``data``: the
    report's data of ``sweep``) and one line saying which runs, commit and date it comes from."""
    prov = provenance(sweep, short=True, runs=list(data.sweep.runs))
    table = markdown_table(verdict_table(data.verdict.rows)).rstrip()
    return (f"{table}\n\n{len(prov.runs)} runs ({', '.join(map(str, prov.per_arm))} units per arm) from "
            f"{prov.code}, last logged {prov.last}; Δ in points of each row's held-out metric (avg@n: pass@1) "
            "with a 95% t-interval over units (clipped to [−100, +100]); Holm-adjusted over the rows' family (the "
            "sweep's principal comparisons that are testable: at least 3 units and not the same Δ in every unit); "
            "P(improvement), rliable's unpaired P(a run of the arm beats a run of the reference), with a 95% "
            "paired-bootstrap interval (units resampled, each unit's two runs kept together) and rliable's "
            "independent-bootstrap interval beside it.")


def write_headline(readme: Path, text: str, begin: str = HEADLINE_BEGIN, end: str = HEADLINE_END) -> None:
    """Replace the README's block between the markers `begin` and `end` with `text`."""
    write_block(readme, text, begin, end)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("sweep", type=Path)
    p.add_argument("--command", default=None, help="the command that ran the sweep (printed in the document)")
    p.add_argument("--replication", type=Path, default=None, help="the same sweep on disjoint seeds (a section beside it)")
    p.add_argument("--replication-command", default=None, help="the command that ran the replication")
    p.add_argument("--study", type=Path, default=None, help="a second sweep, the full study (a section)")
    p.add_argument("--study-command", default=None, help="the command that ran the study")
    p.add_argument("--headline", action="store_true", help="print only the principal verdicts (the README's headline)")
    p.add_argument("--write-readme", type=Path, nargs="?", const=STUDY_README, default=None,
                   help="with --headline: write it into this README's block (no path: the study's README)")
    args = p.parse_args(argv)

    data = report_data([args.sweep])
    if not args.headline:
        parts = [results_markdown(args.sweep, data, args.command)]
        if args.replication is not None:
            parts.append(replication_markdown(args.sweep, args.replication, args.replication_command, data))
        if args.study is not None:
            parts.append(study_markdown(args.study, report_data([args.study]), args.study_command))
        print("\n".join(parts))
    else:
        text = headline_markdown(args.sweep, data)
        if args.replication is not None:
            text += "\n\n" + replication_line(args.sweep, args.replication, data)
        if args.study is not None:
            text += "\n\n" + study_line(args.study)
        if args.write_readme is not None:
            write_headline(args.write_readme, text)
        else:
            print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
