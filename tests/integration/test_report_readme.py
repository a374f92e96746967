"""scripts/readme_results.py: docs/results.md printed from a sweep's report tables."""

from __future__ import annotations

import datetime as dt
import json

from scripts.readme_results import cpu_description, main, results_markdown
from tests.integration.test_report import CORRECT, make_run

CPUINFO = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512f sse\nprocessor\t: 1\nmodel name\t: AMD EPYC\n"


def test_cpu_description_reads_model_and_instruction_sets(tmp_path):
    f = tmp_path / "cpuinfo"
    f.write_text(CPUINFO)
    text = cpu_description(f)
    assert text.startswith("AMD EPYC (2 logical CPUs") and "avx2 yes, avx512f yes, amx_bf16 no" in text
    assert cpu_description(tmp_path / "absent").startswith("unknown")


def test_results_document_from_the_report_tables(tmp_path, capsys):
    sweep = _sweep(tmp_path / "sweep")
    (sweep / "state.json").write_text(json.dumps({"runs": {f"{a}/seed_{s}": {"status": "done"} for a, s in CORRECT}}))
    (sweep / "ceiling.json").write_text(json.dumps({"value": 0.9, "source": "a longer run"}))
    assert main([str(sweep), "--command", "rbctl ablate t.yaml"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("# Results") and f"Generated on {dt.date.today().isoformat()}" in text
    assert "4 runs, 2 arms, units per arm: 2" in text and "Commit: `0123abc`" in text
    assert "Command: `rbctl ablate t.yaml`" in text and "Machine (where this document was generated):" in text
    head = text.index("## Principal comparisons")
    assert head < text.index("## Plateau test") < text.index("## Final scores") < text.index("## Comparisons in detail")
    # avg@n Δ per seed .1875 and .25 (tests/integration/test_report.py): +21.9 [−17.8, +61.6], Holm p .090
    assert "| grpo_budget − grpo | builtin | avg@n | 2 | +21.9 [-17.8, +61.6] | 0.090 |" in text
    assert "| grpo_budget − grpo | builtin | pass@4 | 2 | +25.0 [+25.0, +25.0] | 0.000 | 1.00 [1.00, 1.00] | higher |" in text
    # plateau of grpo: held-out 0.4 and 0.41 at T = 4 vs 0.2, 0.21 at step 2 (nearest ¾T = 3 before T)
    assert "| stalled | no | mean over 2 units of \\|pass@1(T) − pass@1(≈¾T)\\| = 20.00 points (≥ 2) |" in text
    assert "| below_ceiling | yes | ceiling 90.0 − final pass@1 40.5 = 49.5 points (≥ 15) |" in text


def test_results_document_reuses_an_existing_report(tmp_path):
    (tmp_path / "rep" / "tables").mkdir(parents=True)
    (tmp_path / "rep" / "tables" / "verdicts.md").write_text("| a |\n| --- |\n| 1 |\n")
    run = make_run(tmp_path / "sweep" / "runs" / "grpo" / "seed_0", "grpo", 0, CORRECT["grpo", 0])
    assert run.is_dir()
    text = results_markdown(tmp_path / "sweep", tmp_path / "rep", today=dt.date(2026, 12, 1))
    assert "Generated on 2026-12-01" in text and "## Principal comparisons" in text and "| 1 |" in text
    assert "## Power" not in text and "Commit: unknown (no provenance)" in text


def test_headline_is_the_principal_verdicts_and_goes_into_the_readme_block(tmp_path):
    from scripts.readme_results import HEADLINE_BEGIN, HEADLINE_END, headline_markdown, write_headline

    (tmp_path / "rep" / "tables").mkdir(parents=True)
    (tmp_path / "rep" / "tables" / "verdicts.md").write_text("| comparison | verdict |\n| --- | --- |\n| b − a | higher |\n")
    run = make_run(tmp_path / "sweep" / "runs" / "grpo" / "seed_0", "grpo", 0, CORRECT["grpo", 0])
    (run / "provenance.json").write_text(json.dumps({"git_commit": "0123abcdef"}))
    text = headline_markdown(tmp_path / "sweep", tmp_path / "rep")
    assert text.startswith("| comparison | verdict |\n| --- | --- |\n| b − a | higher |")
    assert "1 runs (1 units per arm) at commit `0123abc`" in text
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\nbefore\n{HEADLINE_BEGIN}\nold\n{HEADLINE_END}\nafter\n")
    write_headline(readme, text)
    assert readme.read_text() == f"# x\n\nbefore\n{HEADLINE_BEGIN}\n{text}\n{HEADLINE_END}\nafter\n"


def _sweep(root, seeds_offset=0, commit="0123abc"):
    for (arm, seed), correct in CORRECT.items():
        run = make_run(root / "runs" / arm / f"seed_{seed + seeds_offset}", arm, seed + seeds_offset, correct,
                       budget=1.0 if "budget" in arm else None)
        (run / "provenance.json").write_text(json.dumps({"git_commit": commit}))
    return root


def test_results_document_adds_the_replication_and_the_study(tmp_path, capsys):
    a, b = _sweep(tmp_path / "a"), _sweep(tmp_path / "b", seeds_offset=100, commit="4567def")
    assert main([str(a), "--replication", str(b), "--replication-command", "rbctl ablate --seed-offset 100",
                 "--study", str(b), "--study-command", "rbctl ablate study.yaml"]) == 0
    text = capsys.readouterr().out
    rep = text[text.index("## Replication on disjoint seeds"):text.index("## The full study")]
    assert "units 0–1" in rep and "units 100–101" in rep and "at commit `4567def`" in rep
    assert "rbctl ablate --seed-offset 100" in rep
    # the same per-seed scores on both seed sets: the same Δ and the same call on every row
    assert rep.count("+21.9 [-17.8, +61.6]") >= 2 and "Every principal comparison gets the same call" in rep
    study = text[text.index("## The full study"):]
    assert "rbctl ablate study.yaml" in study and "### Verdicts" in study and "+21.9" in study


def test_replication_sharing_units_is_not_called_the_same(tmp_path):
    from scripts.readme_results import replication_markdown

    a = _sweep(tmp_path / "a")
    text = replication_markdown(a, a)
    assert "Not a replication: the two sweeps share units (0, 1)" in text and "same call on both" not in text


def test_headline_with_the_replication_quotes_both_seed_sets(tmp_path, capsys):
    a, b = _sweep(tmp_path / "a"), _sweep(tmp_path / "b", seeds_offset=100)
    assert main([str(a), "--headline", "--replication", str(b)]) == 0
    text = capsys.readouterr().out
    assert text.index("| grpo_budget − grpo | builtin | avg@n |") < text.index("The same sweep on disjoint seeds")
    assert "every principal comparison gets the same call." in text and "| comparison | seeds 0–1: Δ [95% CI] | seeds 100–101: Δ [95% CI] |" in text
    assert "| grpo_budget − grpo | +21.9 [-17.8, +61.6] | +21.9 [-17.8, +61.6] | yes |" in text


def test_headline_with_the_study_gives_the_test_over_warm_starts(tmp_path, capsys):
    study = tmp_path / "study"
    for ws, shift in (("ws0", 0), ("ws1", 100)):
        for (arm, seed), correct in CORRECT.items():
            make_run(study / "runs" / arm / ws / f"seed_{seed}", arm, seed + shift, correct,
                     budget=1.0 if "budget" in arm else None)
    a = _sweep(tmp_path / "a")
    assert main([str(a), "--headline", "--study", str(study)]) == 0
    text = capsys.readouterr().out
    part = text[text.index("The full study over the shipped warm starts"):]
    assert "4 runs" not in part and "8 runs" in part
    # each warm start has the same per-seed Δ (+18.75, +25): over the 2 warm starts Δ = +21.9 with 0 spread
    assert "| grpo_budget − grpo | +21.9 [+21.9, +21.9], 0.000 | +21.9 [" in part
    assert "0% between warm starts" in part


def test_span_of_units():
    from scripts.readme_results import span

    assert span({"3", "1", "2"}) == "1–3" and span({"0", "2"}) == "0, 2" and span({"ws0/1", "ws0/0"}) == "ws0/0, ws0/1"
    assert span({"5"}) == "5"
