"""studies/reward_budgeting/documents/maze_results.py: the maze sweep's arms beside MaxRL's paper table, on a hand-made sweep
directory (the five arms of studies/reward_budgeting/configs/ablate_maze.yaml × 2 seeds, 4 problems × n = 4), every number
below computed by hand from the counts."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import yaml

from studies.reward_budgeting.documents.maze_results import main, results_markdown

N = 4
ARMS = {  # arm -> (estimator, budget, entropy mode, run.json variant)
    "grpo": ("grpo", None, "none", "base"),
    "grpo_entropy": ("grpo", None, "static", "entropy_static"),
    "maxrl": ("maxrl", None, "none", "base"),
    "grpo_budget": ("grpo", 1.0, "none", "budget"),
    "passk": ("passk", None, "none", "base"),
}
# Final evaluation: correct of n = 4 per problem. avg@4 per seed (s0, s1) and pass@4 (a problem counts once c > 0):
#   grpo          4/16 = .25,    6/16 = .375    pass@4 .25, .75
#   grpo_entropy  6/16 = .375,   7/16 = .4375          .5,  .75
#   maxrl        11/16 = .6875, 12/16 = .75            1,   1
#   grpo_budget   9/16 = .5625, 10/16 = .625           .75, 1
#   passk         9/16 = .5625,  9/16 = .5625          1,   1
CORRECT = {
    ("grpo", 0): [4, 0, 0, 0], ("grpo", 1): [4, 1, 1, 0],
    ("grpo_entropy", 0): [4, 2, 0, 0], ("grpo_entropy", 1): [4, 2, 1, 0],
    ("maxrl", 0): [4, 4, 2, 1], ("maxrl", 1): [4, 4, 3, 1],
    ("grpo_budget", 0): [4, 3, 2, 0], ("grpo_budget", 1): [4, 3, 2, 1],
    ("passk", 0): [4, 3, 1, 1], ("passk", 1): [4, 2, 2, 1],
}
# Periodic held-out pass@1 at steps 0, 50, 100, 150, 200 (T = 200, ¾T = 150): GRPO's changes over the last
# quarter are |.26 − .25| = 1 (seed 0) and |.26 − .27| = 1 point (seed 1); maxrl ends highest (.70).
PERIODIC = {"grpo": [0.10, 0.20, 0.24, 0.25, 0.26], ("grpo", 1): [0.10, 0.22, 0.25, 0.27, 0.26],
            "grpo_entropy": [0.10, 0.25, 0.3, 0.35, 0.4],
            "maxrl": [0.10, 0.4, 0.5, 0.6, 0.7], "grpo_budget": [0.10, 0.3, 0.4, 0.5, 0.6],
            "passk": [0.10, 0.3, 0.4, 0.5, 0.55]}
PRINCIPAL = [["maxrl", "grpo"], ["grpo_budget", "grpo"], ["grpo_entropy", "grpo"]]


def make_maze_sweep(root: Path) -> Path:
    """A sweep directory as `rbctl ablate studies/reward_budgeting/configs/ablate_maze.yaml` leaves it (the files the script reads)."""
    state = {}
    for (arm, seed), correct in CORRECT.items():
        estimator, budget, mode, variant = ARMS[arm]
        d = root / "runs" / arm / f"seed_{seed}"
        (d / "eval" / "step_000200" / "builtin").mkdir(parents=True)
        algo = {"estimator": estimator, "budget": budget, "entropy": {"mode": mode}}
        (d / "config.yaml").write_text(yaml.safe_dump({"seed": seed, "steps": 200, "algo": algo,
                                                        "rollout": {"group_size": 8}}))
        (d / "run.json").write_text(json.dumps({"arm": arm, "seed": seed, "sweep": "maze", "baseline": estimator,
                                                "variant": variant}))
        (d / "provenance.json").write_text(json.dumps({"git_commit": "0123abc"}))
        # entropy 0.3 at step 1 (the warm start's), 0.06 over the last quarter (1 of 4 logged steps): ratio 0.2
        (d / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "entropy": e}) + "\n"
                                                 for s, e in zip((1, 2, 3, 200), (0.3, 0.2, 0.1, 0.06))))
        values = PERIODIC.get((arm, seed), PERIODIC[arm])
        (d / "eval.jsonl").write_text("".join(json.dumps({"step": s, "benchmark": "builtin", "n": N, "avg@n": v}) + "\n"
                                              for s, v in zip((0, 50, 100, 150, 200), values)))
        summary = {"benchmark": "builtin", "step": 200, "n": N, "num_problems": 4,
                   "per_problem": [{"id": f"maze-test-{i}", "n": N, "correct": c} for i, c in enumerate(correct)]}
        (d / "eval" / "step_000200" / "builtin" / "summary.json").write_text(json.dumps(summary))
        state[f"{arm}/seed_{seed}"] = {"status": "done"}
    (root / "state.json").write_text(json.dumps({"runs": state}))
    sweep = {"name": "maze", "base": "maze.yaml", "seeds": [0, 1], "arms": {a: {} for a in ARMS},
             "eval": {"benchmarks": ["builtin"], "n": N},
             "comparisons": {"principal": PRINCIPAL, "metric": "avg@n", "mde": 5.0, "planning_sd": 3.5}}
    (root / "sweep.yaml").write_text(yaml.safe_dump({"sweep": sweep, "configs": {}}, sort_keys=False))
    return root


def ceiling_run(root: Path) -> Path:
    """A one-step run whose warm start is a longer SFT: its step-0 held-out pass@1 is .5."""
    root.mkdir(parents=True)
    (root / "config.yaml").write_text(yaml.safe_dump({"seed": 0, "steps": 1, "data": {"builtin": {
        "task": "maze", "warm_start_steps": 3000}}}))
    (root / "metrics.jsonl").write_text(json.dumps({"step": 1, "entropy": 0.1}) + "\n")
    (root / "eval.jsonl").write_text("".join(json.dumps({"step": s, "benchmark": "builtin", "n": 16, "avg@n": v}) + "\n"
                                             for s, v in ((0, 0.5), (1, 0.51))))
    return root


def test_arms_beside_the_paper_with_gaps_and_the_entropy_question(tmp_path):
    text = results_markdown(make_maze_sweep(tmp_path / "sweep"), "rbctl ablate studies/reward_budgeting/configs/ablate_maze.yaml",
                            today=dt.date(2026, 3, 1))
    assert text.startswith("# The maze at CPU scale") and "Generated on 2026-03-01" in text
    assert "10 runs, 5 arms, units per arm: 2" in text and "Code: commit `0123abc` (10 of 10 runs record no dirty flag: unknown)" in text
    assert "4 problems × n = 4 samples" in text
    # maxrl: avg@4 mean (.6875 + .75)/2 = .71875; t-interval .71875 ± 12.706·.0442/√2 = ± .397, clipped to the
    # metric's range: [32.2, 100.0] (before: [32.2, 111.6]); budget's pass@4 87.5 ± 158.8 -> [0.0, 100.0]
    assert "| `maxrl` | MaxRL | 2 | 71.9 [32.2, 100.0] | 100.0 [100.0, 100.0] | 84.4 | 92.0 | 94.3 |" in text
    assert "| `grpo_budget` | (not in the paper) | 2 | 59.4 [19.7, 99.1] | 87.5 [0.0, 100.0] | – | – | – |" in text
    assert "95% t-interval over units (n − 1 df), clipped to the metric's range [0, 100]" in text
    assert "| `passk` | PKPO (closest arm: Pass@k Training) | 2 | 56.2 [56.2, 56.2]" in text
    # orderings: pass@1 maxrl .719 > budget .594 > passk .5625 > entropy .406 > grpo .3125; the paper's four agree
    assert "- pass@1: rbctl maxrl > grpo_budget > passk > grpo_entropy > grpo; the paper (pass@1) maxrl > passk > " \
           "grpo_entropy > grpo. Over the arms in both: the same order." in text
    # pass@4: maxrl = passk = 1 (a tie is no disagreement) > budget .875 > entropy .625 > grpo .5
    assert "- pass@4: rbctl maxrl > passk > grpo_budget > grpo_entropy > grpo" in text
    # maxrl − grpo per seed .4375, .375: +40.6 ± 12.706·.0442/√2 = ± 39.7; pass@4 .75, .25: +50 ± 12.706·.3536/√2
    # = ± 317.7, clipped to Δ's range [−100, +100] (before: [-267.7, +367.7])
    assert "| `maxrl` | 2 | +40.6 [+0.9, +80.3] | +50.0 [-100.0, +100.0] | +44.8 | +49.6 | +51.3 |" in text
    # entropy gain (.125, .0625) = +9.4; maxrl's +40.6: ratio .23, but maxrl − entropy is .3125 in both seeds:
    # sd 0, no interval, so not shown to beat it (before: "+31.2 [+31.2, +31.2] | yes"); paper 7.6 / 44.8 = .17
    assert "| `maxrl` | +40.6 | +9.4 | 0.23 | +31.2 [n/a] | no | 0.17 |" in text
    assert "| `grpo_budget` | +28.1 | +9.4 | 0.33 | +18.8 [n/a] | no | – |" in text
    # principal: two seeds are no test (before: t = 13, 9, 3 on 1 df, Holm .147, .147, .205)
    assert "| maxrl − grpo | 2 | +40.6 [+0.9, +80.3] | not testable | not testable | +43.8, +37.5 |" in text
    assert "| grpo_entropy − grpo | 2 | +9.4 [-30.3, +49.1] | not testable | not testable | +12.5, +6.2 |" in text
    assert "none is testable, so no Holm–Bonferroni family is formed and no verdict is called" in text
    # plateau without a ceiling file on a task that states none: the ceiling is unknown (never the best arm's
    # level, maxrl's .70 here), so below_ceiling is not evaluated and the plateau does not hold; GRPO ends at 26.0
    assert "Ceiling: unknown (no ceiling file, and the task states none)" in text
    assert "| stalled | yes | mean over 2 units of \\|pass@1(T) − pass@1(≈¾T)\\| = 1.00 points (< 2) |" in text
    assert "| below_ceiling | not evaluated | not evaluated: ceiling unknown |" in text
    assert "ratio 0.20 (< 0.333)" in text and "the plateau **did not hold**" in text
    assert "| 0 | 150, 200 | 1.00 | 26.0 | – | 0.20 |" in text and "| 1 | 150, 200 | 1.00 | 26.0 | – | 0.20 |" in text
    assert "The paper's gains: grpo_entropy +7.6, maxrl +44.8, passk +34.9 points." in text


def test_ceiling_run_writes_the_ceiling_file_the_plateau_test_reads(tmp_path, capsys):
    sweep = make_maze_sweep(tmp_path / "sweep")
    run = ceiling_run(tmp_path / "ceiling")
    assert main([str(sweep), "--ceiling-run", str(run)]) == 0
    written = json.loads((sweep / "ceiling.json").read_text())
    assert written["value"] == 0.5 and "3000 SFT steps" in written["source"] and "(n = 16)" in written["source"]
    text = capsys.readouterr().out
    assert f"by `python -m studies.reward_budgeting.documents.maze_results {sweep} --ceiling-run {run}` from the run directories" in text
    assert "| below_ceiling | yes | ceiling 50.0 − final pass@1 26.0 = 24.0 points (≥ 15) |" in text


def test_ceiling_run_without_a_step_zero_evaluation_is_a_one_line_error(tmp_path, capsys):
    sweep = make_maze_sweep(tmp_path / "sweep")
    run = ceiling_run(tmp_path / "ceiling")
    (run / "eval.jsonl").write_text(json.dumps({"step": 1, "benchmark": "builtin", "n": 16, "avg@n": 0.5}) + "\n")
    assert main([str(sweep), "--ceiling-run", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "no step-0 evaluation on builtin" in err and len(err.splitlines()) == 1
    assert not (sweep / "ceiling.json").exists()


def test_readme_block_is_the_arms_table_with_its_provenance(tmp_path):
    sweep = make_maze_sweep(tmp_path / "sweep")
    readme = tmp_path / "README.md"
    readme.write_text("# x\n<!-- maze: begin -->\nold\n<!-- maze: end -->\nafter\n")
    assert main([str(sweep), "--write-readme", str(readme)]) == 0
    text = readme.read_text()
    assert text.startswith("# x\n<!-- maze: begin -->\n| arm | paper's method |") and text.endswith("<!-- maze: end -->\nafter\n")
    assert "| `maxrl` | MaxRL | 2 | 71.9 [32.2, 100.0] | 100.0 [100.0, 100.0] | 84.4 | 92.0 | 94.3 |" in text
    assert "95% t-interval over seeds clipped to [0, 100]" in text
    assert "Full results: [maze_results.md](docs/maze_results.md)." in text  # relative to the study's README, its target
    assert "10 runs from commit `0123abc` (10 of 10 runs record no dirty flag: unknown)" in text and "avg@4 over 4 held-out mazes" in text and "old" not in text


def test_a_longer_sweep_gets_its_own_section_with_its_calls_and_curves(tmp_path: Path) -> None:
    sweep = make_maze_sweep(tmp_path / "maze")
    longer = make_maze_sweep(tmp_path / "long")
    doc = results_markdown(sweep, horizons=(longer,), figures=tmp_path / "figs", today=dt.date(2026, 12, 5))
    section = doc[doc.index(f"## The long horizon: `{longer}`"):]
    # 10 runs of the 5 arms to step 200; final pass@1 per arm as in the main table (maxrl .6875, .75 -> 71.9%)
    assert "10 runs of `grpo`, `grpo_budget`, `grpo_entropy`, `maxrl`, `passk` to step 200, commit `0123abc`" in section
    assert "| `maxrl` | 2 | 71.9 [32.2, 100.0] | 100.0 [100.0, 100.0] |" in section
    assert "| maxrl − grpo | 2 | +40.6 [+0.9, +80.3] | not testable |" in section  # as the sweep's report calls it
    # the periodic lines hold avg@n only: its curve is drawn, pass@4's is not (no such line to draw)
    assert "(figures/long_avg_n.png)" in section and (tmp_path / "figs" / "long_avg_n.png").stat().st_size > 10_000
    assert "long_pass_4" not in section
