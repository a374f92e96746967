"""Sweeps: expansion and validation, failures that don't stop the others, the lock, and resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from rbctl.store.read import read_sweep_state
from rbctl.sweep.ablate import load_sweep, run_sweep, sweep_lock
from rbctl.errors import UserError
from tests.conftest import TINY_TRAIN


def _write_sweep(tmp_path, arms, seeds=(0,), **extra):
    (tmp_path / "base.yaml").write_text(yaml.safe_dump({**TINY_TRAIN, "steps": 2}))
    sweep = {"name": "t", "base": "base.yaml", "seeds": list(seeds), "arms": arms,
             "eval": {"benchmarks": ["builtin"], "n": 2, "limit": 4}, "jobs": 2, **extra}
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep, sort_keys=False))
    return path


def test_sweep_expands_arms_over_the_base(tmp_path):
    path = _write_sweep(tmp_path, {"grpo": {}, "grpo_budget": {"algo.budget": 2.0}, "rloo": {"algo.estimator": "rloo"}})
    sweep, configs = load_sweep(path)
    assert list(configs) == ["grpo", "grpo_budget", "rloo"]
    assert configs["grpo"].algo.budget is None and configs["grpo_budget"].algo.budget == 2.0
    assert configs["rloo"].algo.loss_agg == "token-mean"  # the estimator's default, resolved per arm
    assert configs["grpo"].algo.loss_agg == "seq-mean-token-mean"
    assert configs["grpo"].steps == 2


def test_unknown_key_in_an_arm_names_the_arm_and_key(tmp_path):
    path = _write_sweep(tmp_path, {"grpo": {}, "typo": {"algo.buget": 1.0}})
    with pytest.raises(UserError, match=r"arm 'typo'.*'algo.buget'.*did you mean 'algo.budget'"):
        load_sweep(path)


def test_arms_with_unequal_compute_are_refused(tmp_path):
    path = _write_sweep(tmp_path, {"grpo": {}, "big": {"rollout.group_size": 8}})
    with pytest.raises(UserError, match="arm 'big' sets rollout.group_size=8.*equal compute"):
        load_sweep(path)


def test_default_sweep_is_valid_and_fair():
    from rbctl.sweep.ablate import DEFAULT_SWEEP, arm_metadata

    from rbctl.report.power import units_for_power

    sweep, configs = load_sweep(DEFAULT_SWEEP)
    variants = {arm: (c.algo.estimator, arm_metadata(c)["variant"]) for arm, c in configs.items()}
    assert set(variants.values()) == {("grpo", "base"), ("grpo", "budget"), ("grpo", "entropy_static")}
    # the principal comparisons answer the main job's question: budget vs GRPO, the entropy bonus vs both
    by_variant = {v[1]: arm for arm, v in variants.items()}
    c = sweep.comparisons
    assert [tuple(p) for p in c.principal] == [(by_variant["budget"], by_variant["base"]),
                                               (by_variant["entropy_static"], by_variant["budget"]),
                                               (by_variant["entropy_static"], by_variant["base"])]
    # powered as the file says: enough seeds for its MDE at its planning SD after Holm over the family
    assert len(sweep.seeds) >= units_for_power(c.planning_sd, c.mde, m=len(c.principal), power=c.power)
    assert c.metric == "avg@n" and c.mde <= 5.0 and sweep.eval.n >= 8 and sweep.escape is not None
    # practice-like updates: several mini-batches per rollout batch, the same for every arm
    assert {cfg.algo.ppo_mini_batch_size for cfg in configs.values()} == {4}
    assert {cfg.data.builtin.warm_start for cfg in configs.values()} == {"fixpoint-ws0"}


def test_shared_warm_start_is_built_with_the_runs_threads(tmp_path, monkeypatch):
    """The sweep builds the warm start in its own process with the config's `threads`, as `rbctl train`
    does (torch's default of one thread per core ran it 14× slower on a shared machine), then restores
    the process's setting; threads 0 keeps torch's default."""
    import torch

    from rbctl.sweep import ablate
    from rbctl.tasks import builtin

    seen = []
    monkeypatch.setattr(builtin, "warm_started", lambda *a, **k: seen.append(torch.get_num_threads()))
    _, configs = load_sweep(_write_sweep(tmp_path, {"a": {"threads": 1}, "b": {"threads": 0, "data.builtin.max_hops": 5}}, same_labels=True))
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # so that threads 1 differs from the process's setting on any machine
    try:
        ablate._prepare_shared(configs, log=lambda *a: None)
        assert seen == [1, 2] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def _broken_data(tmp_path) -> Path:
    """A data file that exists (so the sweep's checks before any run pass) but is not JSON lines: the run
    that reads it fails, and the sweep must isolate that failure."""
    path = tmp_path / "broken.jsonl"
    path.write_text("this is not JSON\n")
    return path


@pytest.mark.slow
def test_sweep_runs_isolates_failures_and_resumes_only_missing_work(tmp_path, rbctl_cache):
    path = _write_sweep(tmp_path, {"grpo": {}, "grpo_budget": {"algo.budget": 1.0},
                                   "broken": {"data.source": str(_broken_data(tmp_path))}},
                        same_labels=True)  # 'broken' is plain GRPO on unreadable data
    out = tmp_path / "sweep"
    state = run_sweep(path, out, progress=False, log=lambda *a: None)
    runs = state["runs"]
    assert runs["grpo/seed_0"]["status"] == "done" and runs["grpo_budget/seed_0"]["status"] == "done"
    assert runs["broken/seed_0"]["status"] == "failed" and "broken.jsonl" in runs["broken/seed_0"]["error"]
    done_run = out / "runs" / "grpo" / "seed_0"
    summary = json.loads((done_run / "eval" / "step_000002" / "builtin" / "summary.json").read_text())
    assert summary["n"] == 2 and summary["num_problems"] == 4
    assert json.loads((done_run / "run.json").read_text())["variant"] == "base"
    from rbctl.sweep.ablate import arm_final_lines

    budget = json.loads((out / "runs" / "grpo_budget" / "seed_0" / "eval" / "step_000002" / "builtin" / "summary.json")
                        .read_text())
    assert arm_final_lines(out, state) == [  # one seed each; the failed arm has no score
        f"final held-out builtin avg@2 grpo {100 * summary['metrics']['avg@n']['value']:.1f}% (mean over 1 seed, step 2)",
        f"final held-out builtin avg@2 grpo_budget {100 * budget['metrics']['avg@n']['value']:.1f}% (mean over 1 seed, step 2)"]

    # Lose one finished run: a re-run redoes that one (and retries the failed one) only.
    import shutil

    shutil.rmtree(out / "runs" / "grpo_budget")
    before = (done_run / "metrics.jsonl").stat().st_mtime_ns
    state = run_sweep(path, out, progress=False, log=lambda *a: None)
    assert state["runs"]["grpo_budget/seed_0"]["status"] == "done"
    assert (done_run / "metrics.jsonl").stat().st_mtime_ns == before
    assert read_sweep_state(out)["broken/seed_0"]["status"] == "failed"


def test_a_second_ablate_on_a_locked_directory_is_refused(tmp_path):
    path = _write_sweep(tmp_path, {"grpo": {}})
    out = tmp_path / "sweep"
    out.mkdir()
    with sweep_lock(out):
        with pytest.raises(UserError, match="in use by another rbctl ablate"):
            run_sweep(path, out, progress=False, log=lambda *a: None)


@pytest.mark.slow
def test_sweep_through_submitit_local_mode(tmp_path, rbctl_cache):
    pytest.importorskip("submitit")
    path = _write_sweep(tmp_path, {"grpo": {}, "broken": {"data.source": str(_broken_data(tmp_path))}},
                        launcher={"cluster": "local", "cpus_per_task": 1, "poll_s": 0.5}, same_labels=True)
    out = tmp_path / "sweep"
    state = run_sweep(path, out, progress=False, log=lambda *a: None, launcher="submitit")
    assert state["runs"]["grpo/seed_0"]["status"] == "done"
    assert state["runs"]["broken/seed_0"]["status"] == "failed"
    assert (out / "runs" / "grpo" / "seed_0" / "eval" / "step_000002" / "builtin" / "summary.json").exists()
    assert read_sweep_state(out)["grpo/seed_0"]["status"] == "done"


@pytest.mark.slow
def test_a_stated_ceiling_is_written_where_the_report_reads_it_and_seeds_shift(tmp_path, rbctl_cache):
    from rbctl.store.read import read_ceiling_file

    ceiling = {"value": 0.98, "source": "plain GRPO's longer runs"}
    path = _write_sweep(tmp_path, {"broken": {"data.source": str(_broken_data(tmp_path))}}, seeds=(0, 1),
                        ceiling=ceiling)
    state = run_sweep(path, tmp_path / "sweep", progress=False, log=lambda *a: None, seed_offset=100)
    assert sorted(state["runs"]) == ["broken/seed_100", "broken/seed_101"]  # the same sweep on disjoint seeds
    found, where = read_ceiling_file(tmp_path / "sweep")
    assert found == ceiling and json.loads(where.read_text()) == ceiling
