"""End-to-end checks of the trainer on the embedded default (tiny settings)."""

from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors.torch import load_file

from rbctl.train.batch import build_batch, response_logits
from rbctl.train.sampling import prompt_order
from rbctl.train.loop import train
from tests.conftest import tiny_llama

REQUIRED_KEYS = [
    "step", "reward/mean", "acc/mean", "entropy", "kappa", "kappa_eff", "adv/gap", "groups/frac_all_correct",
    "groups/frac_all_wrong", "clip/frac_low", "clip/frac_high", "kl", "response/len_mean", "grad_norm", "lr",
    "time/step_s", "throughput/tokens_per_s",
]
TIMING = ("time/", "throughput/")


def _lines(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _weights(run_dir, step):
    return load_file(str(run_dir / "checkpoints" / f"step_{step:06d}" / "model" / "model.safetensors"))


def test_smoke_run_changes_parameters_and_logs_every_metric(tiny_config, tmp_path):
    from rbctl.train.training_data import task_spec, warm_start_spec

    cfg = tiny_config()
    run = tmp_path / "run"
    train(cfg, run, progress=False, log=lambda *a: None)
    lines = _lines(run)
    assert [r["step"] for r in lines] == [1, 2, 3, 4]
    for r in lines:
        for k in REQUIRED_KEYS:
            assert k in r, k
            assert r[k] is not None and math.isfinite(r[k]), (k, r[k])
        assert 0.0 <= r["acc/mean"] <= 1.0
        assert r["entropy"] > 0
        assert r["kl"] >= 0
    assert lines[0]["kl"] == pytest.approx(0.0, abs=1e-6)  # step 1: the policy is the reference
    from rbctl.tasks.builtin import warm_start_path

    start = load_file(str(warm_start_path(task_spec(cfg), warm_start_spec(cfg)) / "model.safetensors"))
    end = _weights(run, 4)
    assert any(not torch.equal(start[k], end[k]) for k in start)
    for name in ("config.yaml", "provenance.json", "samples.jsonl"):
        assert (run / name).exists()
    # the checkpoint records its task, so `rbctl eval RUN --benchmarks builtin` tests on that task
    from rbctl.tasks.builtin import task_spec_of

    assert task_spec_of(run / "checkpoints" / "step_000004" / "model") == task_spec(cfg)
    prov = json.loads((run / "provenance.json").read_text())
    assert prov["seed"] == 0 and prov["torch"] == torch.__version__


def test_resume_continues_exactly_as_an_uninterrupted_run(tiny_config, tmp_path):
    cfg = tiny_config()
    straight = tmp_path / "straight"
    train(cfg, straight, progress=False, log=lambda *a: None)

    broken = tmp_path / "broken"

    def stop_after_two(step, metrics):
        if step == 2:
            raise KeyboardInterrupt  # after the step-2 checkpoint (save_every 2)

    with pytest.raises(KeyboardInterrupt):
        train(cfg, broken, progress=False, log=lambda *a: None, on_step=stop_after_two)
    assert len(_lines(broken)) == 2
    train(cfg, broken, progress=False, log=lambda *a: None)

    a, b = _lines(straight), _lines(broken)
    assert [r["step"] for r in b] == [1, 2, 3, 4]
    for ra, rb in zip(a, b):
        for k in ra:
            if not k.startswith(TIMING):
                assert ra[k] == rb[k], (ra["step"], k)
    wa, wb = _weights(straight, 4), _weights(broken, 4)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_a_ctrl_c_after_the_steps_save_point_still_saves_that_step(tiny_config, tmp_path):
    """A Ctrl-C that lands after the loop decided whether to save (in a sweep's progress message,
    `on_step`) stops after that step with its checkpoint all the same: a resume redoes nothing."""
    import os
    import signal

    from rbctl.store.rundir import checkpoint_dirs

    old = signal.signal(signal.SIGINT, signal.default_int_handler)  # as an interactive Python has it
    try:
        def ctrl_c_at_three(step, metrics):
            if step == 3:  # no save step (save_every 10)
                os.kill(os.getpid(), signal.SIGINT)

        run = tmp_path / "run"
        with pytest.raises(KeyboardInterrupt):
            train(tiny_config(steps=6, save_every=10), run, progress=False, log=lambda *a: None,
                  on_step=ctrl_c_at_three)
    finally:
        signal.signal(signal.SIGINT, old)
    assert [r["step"] for r in _lines(run)] == [1, 2, 3]
    assert [p.name for p in checkpoint_dirs(run)] == ["step_000003"]


def test_budget_changes_the_update_but_not_the_rollouts_of_step_one(tiny_config, tmp_path):
    base, budget = tmp_path / "base", tmp_path / "budget"
    train(tiny_config(steps=1), base, progress=False, log=lambda *a: None)
    train(tiny_config(steps=1, algo__budget=1.0), budget, progress=False, log=lambda *a: None)
    a, b = _lines(base)[0], _lines(budget)[0]
    # Same seed, same policy: the same step-1 rollouts and rewards (only their advantages differ).
    for k in ("reward/mean", "acc/mean", "response/len_mean", "groups/frac_all_correct", "groups/frac_all_wrong"):
        assert a[k] == b[k], k

    def rollouts(run):
        rows = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
        return [{k: v for k, v in r.items() if k != "advantage"} for r in rows if r["step"] == 1]

    assert rollouts(base) and rollouts(base) == rollouts(budget)
    assert a["groups/frac_all_correct"] + a["groups/frac_all_wrong"] < 1  # some group is mixed: a gradient
    # ... but not the same update: the weights after step 1 differ.
    wa, wb = _weights(base, 1), _weights(budget, 1)
    assert wa.keys() == wb.keys()
    assert any(not torch.equal(wa[k], wb[k]) for k in wa)


def test_existing_run_dir_with_another_config_is_refused(tiny_config, tmp_path):
    from rbctl.errors import UserError

    run = tmp_path / "run"
    train(tiny_config(steps=1), run, progress=False, log=lambda *a: None)
    with pytest.raises(UserError, match="different config.*algo.budget"):
        train(tiny_config(steps=1, algo__budget=1.0), run, progress=False, log=lambda *a: None)


def test_a_run_dir_left_by_a_failed_start_takes_the_corrected_config(tiny_config, tmp_path):
    from rbctl.errors import UserError
    from rbctl.train.run_setup import check_run_dir, write_config

    run = tmp_path / "run"
    write_config(tiny_config(algo__budget=1.0), run, 0)  # then the start failed: config.yaml only
    (run / "checkpoints").mkdir()
    (run / "metrics.jsonl").write_text("")
    write_config(check_run_dir(tiny_config(), run, force=False), run, 0)  # the corrected config is accepted
    assert "budget: null" in (run / "config.yaml").read_text()
    (run / "metrics.jsonl").write_text('{"step": 1}\n')  # once a step is logged, it is a run: refused
    with pytest.raises(UserError, match="different config.*algo.budget"):
        check_run_dir(tiny_config(algo__budget=1.0), run, force=False)


def test_prompt_order_is_a_permutation_per_epoch():
    # pool of 10, 4 per step: steps 1-2 take 8 of epoch 0, step 3 the last 2 of epoch 0 and 2 of epoch 1
    first_epoch = prompt_order(0, 1, 4, 10) + prompt_order(0, 2, 4, 10) + prompt_order(0, 3, 4, 10)[:2]
    assert sorted(first_epoch) == list(range(10))
    assert prompt_order(0, 3, 4, 10) == prompt_order(0, 3, 4, 10)
    assert prompt_order(1, 1, 4, 10) != prompt_order(0, 1, 4, 10)


def test_response_logits_are_invariant_to_left_padding():
    from rbctl.rollout.base import Sample

    model = tiny_llama(16, layers=1, max_position_embeddings=32)
    model.eval()
    prompt, resp = [3, 4, 5], [6, 7, 2]
    alone = build_batch([prompt], [[Sample(0, resp, "", True)]], pad_id=0)
    padded = build_batch([prompt, [3, 4, 5, 8, 9, 10]], [[Sample(0, resp, "", True)], [Sample(1, [6], "", True)]], pad_id=0)
    with torch.no_grad():
        la = response_logits(model, alone[0], alone[1], alone[4])[0]
        lb = response_logits(model, padded[0], padded[1], padded[4])[0]
    torch.testing.assert_close(la, lb, atol=1e-5, rtol=1e-5)


def test_shared_prompt_forward_gives_the_logits_and_gradients_of_the_full_forward():
    from rbctl.rollout.base import Sample

    model = tiny_llama(16, max_position_embeddings=32)
    # Two prompts of different lengths (left padding), G = 3 responses each, of different lengths.
    prompts = [[3, 4, 5], [3, 4, 5, 8, 9, 10]]
    resp = [[[6, 7, 2], [6], [11, 12, 13, 2]], [[7, 2], [14, 6, 6, 6, 2], [9]]]
    samples = [[Sample(p, r, "", True) for r in group] for p, group in enumerate(resp)]
    ids, attn, rids, rmask, lp = build_batch(prompts, samples, pad_id=0)

    def run(group_size):
        model.zero_grad()
        logits = response_logits(model, ids, attn, lp, group_size=group_size)
        logp = torch.log_softmax(logits, -1).gather(-1, rids.unsqueeze(-1)).squeeze(-1)
        (logp * rmask).sum().backward()
        return logits.detach() * rmask.unsqueeze(-1), [p.grad.clone() for p in model.parameters()]

    full, g_full = run(1)
    shared, g_shared = run(3)
    torch.testing.assert_close(shared, full)
    for a, b in zip(g_shared, g_full):
        torch.testing.assert_close(a, b)
    # Rows that do not come in groups of one prompt fall back to the full forward.
    swapped = torch.cat([ids[1:2], ids[:1], ids[2:]])
    torch.testing.assert_close(response_logits(model, swapped, torch.cat([attn[1:2], attn[:1], attn[2:]]), lp, 3),
                               response_logits(model, swapped, torch.cat([attn[1:2], attn[:1], attn[2:]]), lp, 1))


def test_tensorboard_receives_the_same_metrics(tiny_config, tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = tmp_path / "tb"
    train(tiny_config(steps=2, log__tensorboard="true"), run, progress=False, log=lambda *a: None)
    acc = EventAccumulator(str(run / "tb"))
    acc.Reload()
    logged = [e.value for e in acc.Scalars("reward/mean")]
    expected = [r["reward/mean"] for r in _lines(run)]
    assert logged == pytest.approx(expected)
    assert "kappa_eff" in acc.Tags()["scalars"] and "entropy" in acc.Tags()["scalars"]


def test_periodic_eval_writes_heldout_lines_with_the_rollout_protocol(tiny_config, tmp_path):
    run = tmp_path / "run"
    train(tiny_config(steps=4, eval__every=2, eval__n=2, eval__limit=4), run, progress=False, log=lambda *a: None)
    lines = [json.loads(x) for x in (run / "eval.jsonl").read_text().splitlines()]
    # step 0 is the warm start (the held-out curve starts there), then every 2 steps
    assert [(r["step"], r["benchmark"], r["n"]) for r in lines] == [(0, "builtin", 2), (2, "builtin", 2), (4, "builtin", 2)]
    for r in lines:
        assert 0.0 <= r["avg@n"] <= r["pass@2"] <= 1.0
    summary = json.loads((run / "eval" / "periodic" / "step_000004" / "builtin" / "summary.json").read_text())
    assert summary["num_problems"] == 4 and summary["step"] == 4
    # held-out samples come from the same distribution as the rollouts: temperature 1, no nucleus cut
    assert summary["protocol"]["temperature"] == 1.0 and summary["protocol"]["top_p"] == 1.0
    assert all("time/eval_s" in m for m in _lines(run) if m["step"] in (2, 4))


def test_maze_run_rewards_moves_and_labels_outcomes(tiny_config, tmp_path):
    """The maze task end to end: rollouts rewarded by the maze checker (the evaluation's grader),
    outcome shares in eval.jsonl, and `rbctl eval` of the run with the task's prompt and grader."""
    from rbctl.config.eval import EvalConfig
    from rbctl.eval.run import run_eval
    from rbctl.tasks import maze

    cfg = tiny_config(data__builtin="{task: maze, size: 7, train_size: 16, test_size: 8, warm_start_steps: 100, "
                      "warm_start_batch_size: 16, warm_start_lr: 3.0e-3, model_hidden_size: 32, model_layers: 1, "
                      "model_heads: 2, model_kv_heads: 1, model_intermediate_size: 64}",
                      rollout__max_new_tokens=24, steps=2, save_every=2, eval__every=2, eval__n=2, eval__limit=4)
    run = tmp_path / "run"
    train(cfg, run, progress=False, log=lambda *a: None)
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert samples
    for s in samples:  # the logged reward is the checker's verdict on the logged completion
        assert s["reward"] == float(maze.outcome(s["completion"], s["problem"]) == "solved")
    evals = [json.loads(line) for line in (run / "eval.jsonl").read_text().splitlines()]
    assert [e["step"] for e in evals] == [0, 2]
    for e in evals:
        shares = {k.removeprefix("label/outcome/"): v for k, v in e.items() if k.startswith("label/outcome/")}
        assert set(shares) <= set(maze.OUTCOMES) and sum(shares.values()) == pytest.approx(1.0)
        assert e["avg@n"] == pytest.approx(shares.get("solved", 0.0))
    summary = run_eval(str(run), EvalConfig(benchmarks=["builtin"], n=1, limit=2), out_dir=tmp_path / "ev")["builtin"]
    assert summary["protocol"]["max_new_tokens"] == 32 and summary["protocol"]["grader"] == "rbctl.tasks.maze.check"
