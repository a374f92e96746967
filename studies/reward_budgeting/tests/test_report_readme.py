"""studies/reward_budgeting/documents/results.py: studies/reward_budgeting/docs/results.md printed from a sweep's report data."""

from __future__ import annotations

import pytest
import datetime as dt
import json

from rbctl.report import report_data
from studies.reward_budgeting.documents.results import cpu_description, main, results_markdown
from tests.integration.test_report import CORRECT, make_run

# test_report's two seeds and a third, so that the paired comparisons are testable (3 units):
#   grpo s2 [3,1,1,1] -> avg .375, pass@4 1 | budget s2 [4,3,2,2] -> avg .6875, pass@4 1
# avg@n Δ per seed .1875, .25, .3125: mean .25, sd .0625, t = .25/(.0625/√3) = 4√3 on 2 df, where
# p = 1 − t/√(2 + t²) = 1 − 4√3/√50 = .0202; t-interval .25 ± 4.3027 · .0361 = [9.5, 40.5] points.
# pass@4 Δ .25, .25, 0: mean .1667, sd .1443, t = 2 on 2 df: p = 1 − 2/√6 = .1835.
# Holm over the 2: .0404 -> 0.040 (higher), max(.0404, .1835) -> 0.184 (inconclusive).
SEEDS3 = {**CORRECT, ("grpo", 2): [3, 1, 1, 1], ("grpo_budget", 2): [4, 3, 2, 2]}
CPUINFO = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512f sse\nprocessor\t: 1\nmodel name\t: AMD EPYC\n"


def test_cpu_description_reads_model_and_instruction_sets(tmp_path):
    f = tmp_path / "cpuinfo"
    f.write_text(CPUINFO)
    text = cpu_description(f)
    assert text.startswith("AMD EPYC (2 logical CPUs") and "avx2 yes, avx512f yes, amx_bf16 no" in text
    assert cpu_description(tmp_path / "absent").startswith("unknown")


@pytest.mark.slow
def test_results_document_from_the_report_tables(tmp_path, capsys):
    sweep = _sweep(tmp_path / "sweep")
    (sweep / "state.json").write_text(json.dumps({"runs": {f"{a}/seed_{s}": {"status": "done"} for a, s in SEEDS3}}))
    (sweep / "ceiling.json").write_text(json.dumps({"value": 0.9, "source": "a longer run"}))
    assert main([str(sweep), "--command", "rbctl ablate t.yaml"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("# Results") and f"Generated on {dt.date.today().isoformat()}" in text
    assert "6 runs, 2 arms, units per arm: 3" in text
    assert "Code: one commit `0123abc` (every run from a clean tree)" in text
    assert "Command: `rbctl ablate t.yaml`" in text and "Machine (where this document was generated):" in text
    head = text.index("## Principal comparisons")
    assert head < text.index("## Plateau test") < text.index("## Final scores") < text.index("## Comparisons in detail")
    assert "| grpo_budget − grpo | builtin | avg@n | 3 | +25.0 [+9.5, +40.5] | 0.040 |" in text
    assert "| grpo_budget − grpo | builtin | pass@4 | 3 | +16.7 [-19.2, +52.5] | 0.184 |" in text
    assert "| Holm p | P(improvement) [95% paired-bootstrap CI] | rliable 95% CI (independent bootstrap) |" in text
    assert "P(improvement) with a 95% paired-bootstrap interval and rliable's independent-bootstrap interval" in text
    # plateau of grpo: held-out .40, .41, .42 at T = 4 vs .20, .21, .22 at step 2 (nearest ¾T = 3 before T)
    assert "| stalled | no | mean over 3 units of \\|pass@1(T) − pass@1(≈¾T)\\| = 20.00 points (≥ 2) |" in text
    assert "| below_ceiling | yes | ceiling 90.0 − final pass@1 41.0 = 49.0 points (≥ 15) |" in text
    assert "0.000" not in text


def test_results_document_of_a_sweep_without_comparisons(tmp_path):
    run = make_run(tmp_path / "sweep" / "runs" / "grpo" / "seed_0", "grpo", 0, CORRECT["grpo", 0])
    assert run.is_dir()
    text = results_markdown(tmp_path / "sweep", report_data([tmp_path / "sweep"], n_boot=50), today=dt.date(2026, 12, 1))
    assert "Generated on 2026-12-01" in text and "Code: unknown (no run of 1 records a commit)" in text
    # one arm: nothing to compare, so no verdict table; its final score is there
    assert "## Principal comparisons" not in text and "## Power" not in text
    assert "| grpo | builtin | 1 | 4 × 4 | 43.8 [" in text  # (4 + 2 + 0 + 1) / 16 correct


def test_headline_is_the_principal_verdicts_and_goes_into_the_readme_block(tmp_path):
    from studies.reward_budgeting.documents.results import HEADLINE_BEGIN, HEADLINE_END, headline_markdown, write_headline

    sweep = _sweep(tmp_path / "sweep")
    text = headline_markdown(sweep, report_data([sweep], n_boot=50))
    assert text.startswith("| comparison | benchmark | metric | units | Δ points [95% t-CI] | Holm p |")
    assert "| grpo_budget − grpo | builtin | avg@n | 3 | +25.0 [+9.5, +40.5] | 0.040 |" in text
    assert "6 runs (3 units per arm) from one commit `0123abc` (every run from a clean tree)" in text
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\nbefore\n{HEADLINE_BEGIN}\nold\n{HEADLINE_END}\nafter\n")
    write_headline(readme, text)
    assert readme.read_text() == f"# x\n\nbefore\n{HEADLINE_BEGIN}\n{text}\n{HEADLINE_END}\nafter\n"


def _sweep(root, seeds_offset=0, commit="0123abc", dirty=False):
    for (arm, seed), correct in SEEDS3.items():
        run = make_run(root / "runs" / arm / f"seed_{seed + seeds_offset}", arm, seed + seeds_offset, correct,
                       budget=1.0 if "budget" in arm else None)
        (run / "provenance.json").write_text(json.dumps({"git_commit": commit, "git_dirty": dirty}))
    return root


@pytest.mark.slow
def test_results_document_adds_the_replication_and_the_study(tmp_path, capsys):
    a, b = _sweep(tmp_path / "a"), _sweep(tmp_path / "b", seeds_offset=100, commit="4567def", dirty=True)
    assert main([str(a), "--replication", str(b), "--replication-command", "rbctl ablate --seed-offset 100",
                 "--study", str(b), "--study-command", "rbctl ablate study.yaml"]) == 0
    text = capsys.readouterr().out
    rep = text[text.index("## Replication on disjoint seeds"):text.index("## The full study")]
    assert "units 0–2" in rep and "units 100–102" in rep and "from commit `4567def` (6 of 6 runs from a dirty tree, 1 distinct uncommitted diff)" in rep
    assert "rbctl ablate --seed-offset 100" in rep
    # the same per-seed scores on both seed sets: the same Δ and the same call on every row
    assert rep.count("+25.0 [+9.5, +40.5]") >= 2 and "Every principal comparison gets the same call" in rep
    study = text[text.index("## The full study"):]
    assert "rbctl ablate study.yaml" in study and "### Verdicts" in study and "+25.0" in study


@pytest.mark.slow
def test_replication_sharing_units_is_not_called_the_same(tmp_path):
    from studies.reward_budgeting.documents.results import replication_markdown

    a = _sweep(tmp_path / "a")
    text = replication_markdown(a, a)
    assert "Not a replication: the two sweeps share units (0, 1, 2)" in text and "same call on both" not in text


@pytest.mark.slow
def test_headline_with_the_replication_quotes_both_seed_sets(tmp_path, capsys):
    a, b = _sweep(tmp_path / "a"), _sweep(tmp_path / "b", seeds_offset=100)
    assert main([str(a), "--headline", "--replication", str(b)]) == 0
    text = capsys.readouterr().out
    assert text.index("| grpo_budget − grpo | builtin | avg@n |") < text.index("The same sweep on disjoint seeds")
    assert "every principal comparison gets the same call." in text
    assert "| comparison | seeds 0–2: Δ [95% t-CI] | seeds 100–102: Δ [95% t-CI] | same call |" in text
    assert "| grpo_budget − grpo | +25.0 [+9.5, +40.5] | +25.0 [+9.5, +40.5] | yes |" in text


@pytest.mark.slow
def test_replication_of_untestable_comparisons_has_no_call_to_agree_on(tmp_path, capsys):
    from studies.reward_budgeting.documents.stability import conclusion, side_by_side

    a, b = (tmp_path / "a", tmp_path / "b")
    for root, offset in ((a, 0), (b, 100)):
        for (arm, seed), correct in CORRECT.items():  # two seeds: not testable
            make_run(root / "runs" / arm / f"seed_{seed + offset}", arm, seed + offset, correct,
                     budget=1.0 if "budget" in arm else None)
    assert main([str(a), "--headline", "--replication", str(b)]) == 0
    text = capsys.readouterr().out
    # before: "**the calls differ.**", as if the seed sets disagreed
    assert ("**not every principal comparison has a call on both seed sets (not testable: grpo_budget − grpo, "
            "grpo_budget − grpo).**") in text and "the calls differ" not in text
    assert "| grpo_budget − grpo | +25.0 [n/a] | +25.0 [n/a] | no call (not testable / not testable) |" in text
    import pandas as pd

    row = {"arm": "b", "ref": "a", "benchmark": "x", "metric": "avg@n", "delta": 0.05, "delta_lo": 0.01,
           "delta_hi": 0.09, "p_holm": 0.01, "significant": True, "verdict": "higher"}
    t = pd.DataFrame([row]).set_index(["arm", "ref", "benchmark", "metric"])
    u = pd.DataFrame([{**row, "verdict": "lower"}]).set_index(["arm", "ref", "benchmark", "metric"])
    assert conclusion(*side_by_side(t, u)) == "the calls differ"


@pytest.mark.slow
def test_headline_with_the_study_gives_the_test_over_warm_starts(tmp_path, capsys):
    study = tmp_path / "study"
    for ws, shift in (("ws0", 0), ("ws1", 100), ("ws2", 200)):
        for (arm, seed), correct in SEEDS3.items():
            make_run(study / "runs" / arm / ws / f"seed_{seed}", arm, seed + shift, correct,
                     budget=1.0 if "budget" in arm else None)
    a = _sweep(tmp_path / "a")
    assert main([str(a), "--headline", "--study", str(study)]) == 0
    text = capsys.readouterr().out
    part = text[text.index("The full study over the shipped warm starts"):]
    assert "6 runs" not in part and "18 runs" in part
    assert "| comparison | over 3 warm starts: Δ [95% t-CI], Holm p | pooled (9 units): Δ [95% t-CI], Holm p |" in part
    # each warm start has the same per-seed Δ (+18.75, +25, +31.25): over the 3 warm starts Δ = +25.0 with sd 0,
    # so no test (before: "+21.9 [+21.9, +21.9], 0.000"); pooled over 9 units t = 13.9 on 8 df, Holm p < 0.001
    assert "| grpo_budget − grpo | +25.0 [n/a], not testable | +25.0 [+20.8, +29.2], < 0.001 |" in part
    assert "0% between warm starts (F = 0.00)" in part
    assert "not testable: grpo_budget − grpo (sd(Δ) = 0: every unit gave the same Δ)" in part
    assert "0.000" not in text


def test_span_of_units():
    from studies.reward_budgeting.documents.results import span

    assert span({"3", "1", "2"}) == "1–3" and span({"0", "2"}) == "0, 2" and span({"ws0/1", "ws0/0"}) == "ws0/0, ws0/1"
    assert span({"5"}) == "5"
