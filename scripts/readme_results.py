"""Print docs/results.md: a dated, self-describing Markdown document of a sweep's results.

    python -m scripts.readme_results SWEEP_DIR [--report REPORT_DIR] [--command "rbctl ablate ..."] > docs/results.md

Builds the report (`rbctl.report.make_report`, into a temporary folder unless ``--report`` names an
existing one) and prints only what its tables hold, so the document is regenerated, never edited:
the date, the commit the runs ran (their provenance's ``git_commit``), the command, the machine
(CPU model and instruction sets from /proc/cpuinfo), then the principal verdicts, the power of the
design, the warm starts, the plateau test, escape times, final scores and the exploratory tables.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import tempfile
from pathlib import Path


from rbctl.report import make_report
from rbctl.report.load import find_runs
from rbctl.store.read import newest_metrics_time

ISA_FLAGS = ("avx2", "avx512f", "amx_bf16", "amx_int8", "amx_tile")
# (table file, heading, what the document says about it)
SECTIONS = (
    ("verdicts", "Principal comparisons", "The comparisons the sweep file states before running (or, without them, every "
     "stated pair as one family): Δ in points with a 95% t-interval over units, Holm-adjusted p, P(improvement)."),
    ("power", "Power of the design", "Paired two-sided t-test at α/m; planning SD from the sweep file, measured SD from "
     "these runs."),
    ("warm_starts", "Warm starts", "Per warm start, over warm starts (the warm start as the unit) and pooled; the share "
     "of Δ's variance between warm starts."),
    ("plateau", "Plateau test (plain GRPO)", "Criterion by criterion over units; the last row is the old warm-start "
     "pass@G ceiling."),
    ("plateau_units", None, "Per unit."),
    ("escape", "Escape time", "Kaplan–Meier median and restricted mean escape step per arm."),
    ("escape_logrank", None, "Log-rank tests (unadjusted)."),
    ("final_scores", "Final scores", "Mean over units, 95% t-interval over units."),
    ("iqm", None, "Interquartile mean with a stratified bootstrap interval."),
    ("exploratory", "Exploratory comparisons", "Not in the principal family: unadjusted p, and Holm over this family."),
    ("comparisons", "Comparisons in detail", "Every stated pair with its per-unit Δ."),
    ("entropy_cause", "Entropy and κ_eff vs pass@1", "Between arms (arm means) and within arms (run − arm mean)."),
    ("final_entropy_kappa", None, "Final entropy, κ and κ_eff (last quarter of each run)."),
)


def cpu_description(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """``AMD EPYC (16 logical CPUs); avx2 yes, avx512f yes, amx_bf16 no, …`` from /proc/cpuinfo."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return "unknown (no /proc/cpuinfo)"
    model = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), "unknown")
    flags = set(next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), []))
    cpus = sum(line.startswith("processor") for line in text.splitlines())
    isa = ", ".join(f"{f} {'yes' if f in flags else 'no'}" for f in ISA_FLAGS)
    return f"{model} ({cpus} logical CPUs, {os.cpu_count()} usable); {isa}"


def results_markdown(sweep: Path, report_dir: Path, command: str | None = None, cpuinfo: Path = Path("/proc/cpuinfo"),
                     today: dt.date | None = None) -> str:
    """The document, from ``report_dir/tables/*.md`` (a report of ``sweep``)."""
    runs, _ = find_runs([sweep])
    commits = sorted({str(r.provenance.get("git_commit")) for r in runs if r.provenance.get("git_commit")})
    logged = newest_metrics_time(sweep)
    last = dt.datetime.fromtimestamp(logged, tz=dt.timezone.utc).date().isoformat() if logged else "unknown"
    per_arm = sorted({sum(r.arm == a for r in runs) for a in {r.arm for r in runs}})
    name = next((r.sweep for r in runs if r.sweep), Path(sweep).name)
    out = ["# Results", "",
           f"Generated on {(today or dt.date.today()).isoformat()} by `python -m scripts.readme_results {sweep}` from "
           "`rbctl report`'s tables; do not edit by hand.", "",
           f"- Sweep `{name}` in `{sweep}`: {len(runs)} runs, {len({r.arm for r in runs})} arms, units per arm: "
           f"{', '.join(map(str, per_arm)) or 'none'}; runs last logged on {last}.",
           f"- Commit: {', '.join(f'`{c}`' for c in commits) or 'unknown (no provenance)'} (the runs' provenance).",
           f"- Command: `{command or f'rbctl ablate SWEEP.yaml -o {sweep}'}`.",
           f"- Machine (where this document was generated): {cpu_description(cpuinfo)}.", ""]
    tables = Path(report_dir) / "tables"
    for name, heading, note in SECTIONS:
        f = tables / f"{name}.md"
        if not f.is_file():
            continue
        if heading:
            out += [f"## {heading}", ""]
        out += [note, "", f.read_text().rstrip(), ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("sweep", type=Path)
    p.add_argument("--report", type=Path, default=None, help="an existing report folder of SWEEP (else one is built)")
    p.add_argument("--command", default=None, help="the command that ran the sweep (printed in the document)")
    args = p.parse_args(argv)
    if args.report is not None:
        print(results_markdown(args.sweep, args.report, args.command))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        make_report([args.sweep], Path(tmp) / "report")
        print(results_markdown(args.sweep, Path(tmp) / "report", args.command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
