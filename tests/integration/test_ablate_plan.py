"""`rbctl ablate --dry-run`: the plan of a sweep before anything runs (arms × seeds, each arm's resolved
difference from the base, the design's power, a wall time from measured or stated per-step times),
and `--arms`, `--seeds`, `--set` selecting and overriding. Nothing here trains."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rbctl.cli import run

REPO = Path(__file__).resolve().parents[2]
QUICK = str(REPO / "configs" / "ablate_quickstart.yaml")
CLAIMS = str(REPO / "studies" / "reward_budgeting" / "configs" / "ablate_claims_fixpoint.yaml")  # a sweep with families


@pytest.fixture(autouse=True)
def _here(tmp_path, monkeypatch, rbctl_cache):
    monkeypatch.chdir(tmp_path)  # runs/ is this test's: no finished run of the user's is measured


def _plan(capsys, *argv) -> str:
    assert run(["ablate", *argv, "--dry-run"]) == 0
    return capsys.readouterr().out


def test_the_quickstart_sweep_is_planned_without_running_anything(tmp_path, capsys):
    out = _plan(capsys, QUICK, "-o", str(tmp_path / "s"))
    assert "8 arms × 3 seeds = 24 runs, 2 in parallel" in out
    assert "120 steps of P 16 × G 8 rollouts" in out
    assert "every arm     eval.every: 40 -> 20 (the sweep's set:)" in out
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ")}
    assert rows["grpo"].endswith("(the base as it is)")
    assert rows["grpo_budget"].endswith("algo.budget: null -> 1.0")
    # a resolved difference: Dr. GRPO's own loss aggregation comes with its estimator
    assert 'algo.estimator: "grpo" -> "dr_grpo"' in rows["dr_grpo"] and "algo.loss_agg" in rows["dr_grpo"]
    assert "comparisons   none stated" in out
    # no finished run of this shape here: a stated per-step time, labelled so, scaled to the config
    # a run: 5 s start + 120 steps · 0.25 s + (7 periodic evaluations of 64 × 4 samples + the final one of
    # 256 × 8) · 1.5 s / 2048 = 5 + 30 + 3840 · 1.5 / 2048 = 37.8 s; 24 runs 2 at a time: 12 · 37.8 s = 7.6 min
    assert "an assumption, not measured here: 0.25 s per step" in out
    assert "≈ 7.6 min wall for 24 runs (0 of 24 already done" in out and "≈ 38 s a run" in out
    assert not (tmp_path / "s").exists() and not (tmp_path / "runs").exists()


def test_power_of_the_main_job_from_the_report_power_functions(tmp_path, capsys):
    from rbctl.report.power import mde_paired, power_paired, units_for_power

    out = _plan(capsys, "ablate_fixpoint", "-o", str(tmp_path / "s"))
    # 3 principal comparisons, Holm at 0.05: the first step at 0.05/3; mde 5 points, planning SD 7, 24 seeds
    level = 0.05 / 3
    assert (f"power         {power_paired(5.0, 7.0, 24, level):.2f} to detect Δ = 5 points (planning SD 7) with 24 "
            f"seeds, paired two-sided t-test at α/m = 0.0167; power 0.8 needs {units_for_power(7.0, 5.0, 3)} units; "
            f"with 24 the detectable Δ at power 0.8 is {mde_paired(7.0, 24, level, 0.8):.1f} points") in out
    assert "3 arms × 24 seeds = 72 runs" in out
    # its final evaluation has the config of the periodic one at step 100, so it is a copy and costs
    # nothing: 5 s start + 100 steps · 0.25 s + 6 periodic evaluations (steps 0, 20, …, 100) of
    # 256 × 8 samples · 1.5 s / 2048 = 5 + 25 + 9 = 39 s a run; 72 runs 2 at a time: 36 · 39 s = 23.4 min
    assert "≈ 23.4 min wall for 72 runs (0 of 72 already done" in out and "≈ 39 s a run" in out


def test_every_declared_family_gets_its_power_and_a_margin_its_tost_power(tmp_path, capsys):
    from rbctl.report.power import power_tost, units_for_tost

    out = _plan(capsys, CLAIMS, "-o", str(tmp_path / "s"))
    for name in ("principal", "entropy_vs_budget", "entropy_vs_base"):
        assert f"comparisons   {name} (4, Holm at α 0.05): " in out
    # 12 (warm start, seed) units, planning SD 7, margin ±5, a family of 4: TOST at 0.05/4
    assert (f"equivalence: power {power_tost(5.0, 7.0, 12, 0.0125):.2f} to call a true Δ = 0 equivalent within ±5 "
            f"(TOST at α/m); power 0.8 needs {units_for_tost(7.0, 5.0, 4)} units") in out
    assert out.count("equivalence: power 0.14") == 3


def test_arms_seeds_and_set_select_and_override(tmp_path, capsys):
    out = _plan(capsys, "ablate_fixpoint", "-o", str(tmp_path / "s"), "--arms", "grpo,grpo_budget", "--seeds", "0-1",
                "--set", "steps=20")
    assert "2 arms × 2 seeds = 4 runs" in out and "seeds         0, 1" in out
    assert "every arm     steps: 100 -> 20; algo.log_kl: true -> false (the sweep's set: and --set)" in out
    assert "grpo_entropy" not in out
    # the stated comparisons keep the pairs among the arms selected: one, at α/1
    assert "principal (1, Holm at α 0.05): grpo_budget − grpo" in out and "at α/m = 0.05;" in out
    assert f"run it: rbctl ablate ablate_fixpoint -o {tmp_path / 's'} --arms grpo,grpo_budget --seeds 0,1 --set steps=20" in out
    assert run(["ablate", "ablate_fixpoint", "--arms", "grpo,nope", "--dry-run"]) == 2
    assert "--arms:" in capsys.readouterr().err
    assert run(["ablate", "ablate_fixpoint", "--set", "algo.budgt=1", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "--set 'algo.budgt=1'" in err and "did you mean 'algo.budget'" in err


def test_the_wall_time_comes_from_finished_runs_of_the_same_shape(tmp_path, capsys):
    from rbctl.config.base import dump_config
    from rbctl.sweep.ablate import load_sweep

    sweep_dir = tmp_path / "s"
    _, configs = load_sweep(QUICK)
    for seed, step_s in ((0, 0.5), (1, 0.7)):  # medians 0.5 and 0.7 s a step: 0.6 over the two runs
        run_dir = sweep_dir / "runs" / "grpo" / f"seed_{seed}"
        run_dir.mkdir(parents=True)
        (run_dir / "config.yaml").write_text(dump_config(configs["grpo"]))
        rows = [{"step": i + 1, "time/step_s": step_s} for i in range(5)]
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = _plan(capsys, QUICK, "-o", str(sweep_dir))
    assert f"measured on this machine: 2 finished run(s) of this shape in {sweep_dir}" in out
    assert "(0.6 s a step)" in out
    # another shape (more rollouts per step) is not measured by them
    out = _plan(capsys, QUICK, "-o", str(sweep_dir), "--set", "rollout.group_size=16")
    assert "an assumption, not measured here" in out


def test_a_run_check_fails_the_dry_run_naming_the_arm(tmp_path, capsys):
    assert run(["ablate", QUICK, "-o", str(tmp_path / "s"), "--set", "eval.benchmarks=[gsm8kk]", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: arm 'grpo': eval.benchmarks: unknown benchmark 'gsm8kk'")


def test_a_selection_runs_in_the_sweep_directory_it_belongs_to():
    from rbctl.sweep.ablate import load_sweep
    from rbctl.sweep.start import _compatible

    def resolved(**selection):
        sweep, configs = load_sweep(QUICK, **selection)
        return {"sweep": sweep.model_dump(mode="json"), "configs": {a: c.model_dump(mode="json") for a, c in configs.items()}}

    whole, part = resolved(), resolved(arms=["grpo", "grpo_budget"], seeds=[0])
    assert _compatible(whole, part) and _compatible(part, whole)
    assert not _compatible(whole, resolved(arms=["grpo"], overrides=["steps=7"]))  # another config of the arm
