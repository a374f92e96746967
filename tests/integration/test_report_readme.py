"""scripts/readme_results.py: the README's Results section printed from a sweep's report numbers."""

from __future__ import annotations

import json

from scripts.readme_results import main
from tests.integration.test_report import CORRECT, make_run


def test_readme_results_prints_report_numbers(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    for (arm, seed), correct in CORRECT.items():
        make_run(sweep / "runs" / arm / f"seed_{seed}", arm, seed, correct, budget=1.0 if "budget" in arm else None)
    (sweep / "state.json").write_text(json.dumps({"runs": {f"{a}/seed_{s}": {"status": "done"} for a, s in CORRECT}}))
    (sweep / "ceiling.json").write_text(json.dumps({"value": 0.9, "source": "a longer run"}))
    assert main([str(sweep)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("## Results") and "seeds per arm: 2" in text and "4 runs, 2 arms" in text
    # avg@n Δ per seed .1875 and .25 (tests/integration/test_report.py): mean +21.9 [−17.8, +61.6], not significant
    assert "| grpo_budget − grpo | builtin | avg@n | 2 | +21.9 [-17.8, +61.6] | +18.8, +25.0 |" in text
    assert "| grpo_budget − grpo | builtin | pass@4 | 2 | +25.0 [+25.0, +25.0] | +25.0, +25.0 | 0.000 | yes |" in text
    assert "| grpo | 2 | 0.205 [" in text  # final entropy: last quarter of 0.20, 0.21
    # plateau of grpo: held-out 0.4 and 0.41 at T = 4 vs 0.2, 0.21 at step 2 (the evaluation nearest ¾T = 3 before T is step 2)
    assert "- stalled: no — mean over 2 units of |pass@1(T) − pass@1(≈¾T)| = 20.00 points" in text
    assert "- below_ceiling: yes — ceiling 90.0 − final pass@1 40.5 = 49.5 points" in text
    assert "the plateau did not hold" in text
