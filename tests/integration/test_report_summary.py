"""A report a person reads (hand-made sweep, no training): its first screen is the question, the calls in
plain words, the design and the per-unit Δ figure; report.html folds the details and shows every
figure; summary.md and summary.tex (a LaTeX fragment that compiles); the calls fit 80 columns in the
terminal; missing runs are summarised by arm; and a run its sweep records as failed is never scored,
whatever final evaluation its directory holds."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from rbctl.report import make_report, report_data
from rbctl.report.render.terminal import calls_table
from rbctl.report.stats import paired_delta
from tests.integration.report_sweeps import N, final_correct, make_sweep

ARMS = ("grpo", "grpo_budget", "grpo_entropy_static")
PRINCIPAL = [["grpo_budget", "grpo"], ["grpo_entropy_static", "grpo_budget"], ["grpo_entropy_static", "grpo"]]
DESIGN = {"principal": PRINCIPAL, "metric": "avg@n", "mde": 5.0, "planning_sd": 7.0, "power": 0.8}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """8 seeds of 3 arms; grpo seed 7 failed (its final evaluation still on disk: what an earlier
    config left), and 2 more seeds of every arm pending."""
    root = make_sweep(tmp_path_factory.mktemp("summary") / "s", arms=ARMS, seeds=range(8), comparisons=DESIGN)
    state = json.loads((root / "state.json").read_text())["runs"]
    state["grpo/seed_7"] = {"status": "failed", "error": "UserError: run directory was made with steps=100"}
    for arm in ARMS:
        for s in (8, 9):
            state[f"{arm}/seed_{s}"] = {"status": "pending", "error": None}
    (root / "state.json").write_text(json.dumps({"runs": state}))
    return root, make_report([root], root / "report", n_boot=50)


def _avg(sweep, arm, seeds):
    return {s: final_correct(sweep, arm, f"seed_{s}").mean() / N for s in seeds}


def test_a_failed_run_is_never_scored(sweep):
    root, report = sweep
    scores = pd.read_csv(report.parent / "tables" / "final_scores.csv").set_index("arm")
    assert scores.loc["grpo", "seeds"] == 7 and scores.loc["grpo_budget", "seeds"] == 8
    assert scores.loc["grpo", "avg"] == pytest.approx(np.mean(list(_avg(root, "grpo", range(7)).values())))
    verdicts = pd.read_csv(report.parent / "tables" / "verdicts.csv").set_index(["arm", "ref"])
    # budget − grpo over the 7 seeds grpo has scored, from the per-problem counts on disk
    d = paired_delta(_avg(root, "grpo_budget", range(8)), _avg(root, "grpo", range(7)))
    row = verdicts.loc[("grpo_budget", "grpo")]
    assert row["seeds"] == 7 and row["delta"] == pytest.approx(d.mean) and row["p"] == pytest.approx(d.p)
    assert "7" not in str(row["seed_list"]).split(",")
    assert verdicts.loc[("grpo_entropy_static", "grpo_budget"), "seeds"] == 8


def test_the_first_screen_is_the_question_the_calls_the_design_and_the_figure(sweep):
    _, report = sweep
    text = report.read_text()
    first = text[:text.index("## Calls in detail")]
    assert first.index("## The question") < first.index("## The answer") < first.index("**Design.**") < first.index(
        "![per-unit Δ of each comparison](figures/per_unit_delta.png)")
    assert ("The sweep file declares 3 principal comparisons on held-out avg@n (builtin): grpo_budget vs grpo; "
            "grpo_entropy_static vs grpo_budget; grpo_entropy_static vs grpo.") in first
    verdicts = pd.read_csv(report.parent / "tables" / "verdicts.csv")
    for r in verdicts.itertuples():  # each call in words, with Δ, its interval, the units and the deciding p
        lo, hi = 100 * r.delta_lo, 100 * r.delta_hi
        p = "< 0.001" if r.p_holm < 0.001 else f"{r.p_holm:.3f}"
        deciding = "" if r.verdict == "interim" else f", Holm p {p}"  # interim: no call, so no p decided one
        line = next(x for x in first.splitlines() if x.startswith(f"- **{r.arm} − {r.ref}** (avg@n): **{r.call}**"))
        assert line.endswith(f"Δ = {100 * r.delta:+.1f} [{lo:+.1f}, {hi:+.1f}] points over {r.seeds} seeds{deciding}.")
    assert "(paired t-test at α/m = 0.0167)" in first and "No equivalence margin" in first
    assert "3 arms, 7–8 seeds each scored on builtin" in first
    # missing runs summarised by arm, not listed run by run
    assert "grpo: 1 of 10 seeds failed (UserError: run directory was made with steps=100)" in first
    assert "2 of 10 seeds not finished in each arm" in first
    assert "grpo_budget/seed_8" not in text and "seed_9" not in text
    incomplete = pd.read_csv(report.parent / "tables" / "incomplete.csv")
    assert len(incomplete) == 7 and set(incomplete["status"]) == {"failed", "pending"}
    # the method as footnotes (GitHub Markdown), linked from the question and the calls
    assert "[^1]" in first and re.search(r"^\[\^1\]: Δ = arm − reference.*docs/method\.md", first, re.M)


def test_report_html_folds_the_details_and_shows_every_figure(sweep):
    _, report = sweep
    html = (report.parent / "report.html").read_text()
    md = report.read_text()
    assert html.count("<img") == md.count("![") > 5
    for folded in re.findall(r"<details>.*?</details>", html, re.S):
        assert "<img" not in folded and "<h2" not in folded
    first = html[:html.index("<h2>Calls in detail")]
    assert "<details>" not in first and 'class="lead"' in first  # the first screen is not folded
    assert html.count("<details>") >= 8 and "<table>" not in first
    assert '<li id="note-1" value="1">' in html and '<a href="#note-1"' in html


def _balanced(tex: str) -> None:
    """Every \\begin{x} closed by its \\end{x} in order; braces balanced (escaped ones aside)."""
    body = "\n".join(line.split("%")[0] if not line.lstrip().startswith("%") else "" for line in
                     tex.replace("\\%", "").splitlines())
    stack = []
    for kind, env in re.findall(r"\\(begin|end)\{(\w+)\}", body):
        if kind == "begin":
            stack.append(env)
        else:
            assert stack and stack.pop() == env, env
    assert not stack
    depth = 0
    for ch in body.replace("\\{", "").replace("\\}", ""):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        assert depth >= 0
    assert depth == 0


def test_summary_md_and_a_latex_fragment_that_compiles(sweep, tmp_path):
    _, report = sweep
    out = report.parent
    md = (out / "summary.md").read_text()
    assert md.startswith("# Summary\n\n**Question.** Does each arm differ")
    assert "| comparison | metric | units | Δ points [95% CI] | p (decides the call) | call |" in md
    assert "![per-unit Δ of each comparison](figures/per_unit_delta.png)" in md and "**Design.**" in md
    tex = (out / "summary.tex").read_text()
    assert tex.isascii()
    _balanced(tex)
    assert tex.count("\\begin{tabular}") == 1 and "\\includegraphics[width=\\linewidth]{figures/per_unit_delta.png}" in tex
    assert "grpo\\_budget - grpo" in tex and "$\\Delta$" in tex
    text = "\n".join(x for x in tex.splitlines() if not x.startswith(("%", "\\includegraphics")))
    text = re.sub(r"\$[^$]*\$", "", text.replace("\\$", "").replace("\\\\", "")).replace(" & ", " ")
    assert not re.search(r"(?<!\\)[_%&#$^~]", text), "every special character escaped outside math"
    if shutil.which("pdflatex") is None:
        return  # not installed here: the checks above stand in for a compile
    doc = tmp_path / "doc.tex"
    shutil.copytree(out / "figures", tmp_path / "figures")
    doc.write_text("\\documentclass{article}\\usepackage{booktabs,graphicx}\\begin{document}\n" + tex
                   + "\\end{document}\n")
    done = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", doc.name], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:]


def test_the_calls_fit_80_columns(sweep):
    root, _ = sweep
    data = report_data([root], n_boot=50)
    console = Console(width=80, record=True, file=io.StringIO(), color_system=None)
    console.print(calls_table(data))
    lines = console.export_text().rstrip().splitlines()
    assert max(map(len, lines)) <= 80
    assert lines[0].strip() == "calls: declared comparisons"
    flat = " ".join(" ".join(lines).split())
    verdicts = pd.read_csv(root / "report" / "tables" / "verdicts.csv")
    for r in verdicts.itertuples():
        assert f"{100 * r.delta:+.1f} [{100 * r.delta_lo:+.1f}, {100 * r.delta_hi:+.1f}]" in flat
    assert lines[4].split()[:3] == ["grpo_budget", "−", "grpo"]
