"""Which engine evaluates a run: periodic evaluation and a sweep's final evaluation go through the
run's own vLLM engine (the stand-in of tests/vllm_standin.py) or an hf engine over the policy; the
one evaluation schema (rbctl.config.eval) and its checks."""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from rbctl.config.eval import EvalConfig
from rbctl.config.train import for_run
from rbctl.config.sweep import SweepEval
from rbctl.errors import UserError
from rbctl.store.rundir import checkpoint_dir, final_eval_dir, periodic_eval_dir
from rbctl.sweep.ablate import _run_one, load_sweep
from rbctl.train.loop import train
from tests.conftest import TINY_TRAIN
from tests.vllm_standin import use_vllm_standin

QUIET = dict(progress=False, log=lambda *a: None)


def _summary(path):
    return json.loads((path / "builtin" / "summary.json").read_text())


def test_periodic_evaluation_of_a_vllm_run_goes_through_its_own_engine(tiny_config, tmp_path, monkeypatch, trainers):
    engines = use_vllm_standin(monkeypatch)
    # eval at T 0.5, n 3: told apart from the rollouts (T 1, G 4) in what the engine was asked
    cfg = tiny_config(steps=2, rollout__engine="vllm", eval__every=2, eval__n=3, eval__limit=4, eval__temperature=0.5)
    assert cfg.eval.engine == "vllm"  # resolved from rollout.engine and written into the run's config
    seen = []

    def after_step(step, metrics):
        tr = trainers[-1]
        llm = tr.engine.llm
        evals = [i for i, sps in enumerate(llm.sampling_params) if sps[0].temperature == 0.5]
        if step == 2:  # step 2's evaluation sampled exactly the weights of step 2's optimizer step
            held = llm.loaded_at_generate[evals[-1]]
            for name, p in tr.model.named_parameters():
                torch.testing.assert_close(held[name], p.detach(), rtol=0, atol=0)
        seen.append((step, len(evals)))

    train(cfg, tmp_path / "run", on_step=after_step, **QUIET)
    assert len(engines) == 1  # never a second engine
    assert seen == [(1, 1), (2, 2)]  # step 0's evaluation (the warm start), then step 2's
    for step in (0, 2):
        proto = _summary(periodic_eval_dir(tmp_path / "run", step))["protocol"]
        assert (proto["engine"], proto["n"], proto["temperature"]) == ("vllm", 3, 0.5)
        assert proto["batch_size"] is None and proto["max_batch_tokens"] is None  # vLLM schedules its own


def test_periodic_evaluation_of_an_hf_run_uses_its_policy_under_the_hf_batch_rule(tiny_config, tmp_path):
    cfg = tiny_config(steps=2, eval__every=2, eval__n=2, eval__limit=4, eval__max_batch_tokens=4096, eval__batch_size=6)
    train(cfg, tmp_path / "run", **QUIET)
    proto = _summary(periodic_eval_dir(tmp_path / "run", 2))["protocol"]
    assert (proto["engine"], proto["batch_size"], proto["max_batch_tokens"]) == ("hf", 6, 4096)


def _run_sweep_run(tmp_path, base: dict, eval_section: dict):
    from rbctl.config.train import TrainConfig

    cfg = TrainConfig.model_validate(base)

    class Queue:
        def __init__(self):
            self.events = []

        def put(self, item):
            self.events.append(item)

    q = Queue()
    res = _run_one(str(tmp_path / "run"), cfg.model_dump(mode="json"), {"arm": "a", "seed": 0}, eval_section, 1, q)
    assert res["status"] == "done", res
    assert ("a/seed_0", "eval", cfg.steps, {}) in q.events
    return cfg, _summary(final_eval_dir(tmp_path / "run", cfg.steps))


@pytest.mark.parametrize("engine", ["hf", "vllm"])
@pytest.mark.slow
def test_a_sweep_runs_final_evaluation_goes_through_the_runs_engine(engine, tmp_path, monkeypatch, rbctl_cache):
    engines = use_vllm_standin(monkeypatch)
    base = {**TINY_TRAIN, "steps": 2, "rollout": {**TINY_TRAIN["rollout"], "engine": engine}}
    cfg, summary = _run_sweep_run(tmp_path, base, {"benchmarks": ["builtin"], "n": 2, "limit": 4})
    assert summary["protocol"]["engine"] == engine
    assert summary["model"] == str(checkpoint_dir(tmp_path / "run", 2) / "model")  # the final checkpoint's policy
    if engine == "vllm":
        assert len(engines) == 1  # the trainer's engine evaluated: no second one was built
        calls = engines[0].llm.sampling_params
        assert [sps[0].n for sps in calls][-1] == 2  # the last generate was the evaluation's (n = 2, not G = 4)


def test_the_final_evaluation_of_a_sweep_matches_a_fresh_evaluation_of_the_checkpoint(tmp_path, rbctl_cache):
    """The in-memory final evaluation is the checkpoint's: `rbctl eval`'s path (load, evaluate) gives
    the same samples."""
    from rbctl.eval.pipeline import evaluate_policy, load_problems
    from rbctl.rollout.models import load_policy
    from rbctl.train.training_data import task_spec

    section = {"benchmarks": ["builtin"], "n": 3, "limit": 6}
    cfg, summary = _run_sweep_run(tmp_path, {**TINY_TRAIN, "steps": 2}, section)
    ecfg = for_run(SweepEval.model_validate(section), cfg)
    policy = load_policy(str(tmp_path / "run"), device="cpu", step=2, log=lambda *a: None)
    fresh = evaluate_policy(policy, ecfg, tmp_path / "fresh", step=2, problems=load_problems(ecfg, task_spec(cfg)))
    assert fresh["builtin"]["per_problem"] == summary["per_problem"]
    a = (final_eval_dir(tmp_path / "run", 2) / "builtin" / "samples.jsonl").read_text()
    assert a == (tmp_path / "fresh" / "builtin" / "samples.jsonl").read_text()


def test_the_three_evaluation_sections_are_one_schema_and_keep_todays_keys(tiny_config):
    from rbctl.config.eval import EvalSection
    from rbctl.config.train import EvalDuringTrainingCfg

    for section in (EvalConfig, EvalDuringTrainingCfg, SweepEval):
        assert issubclass(section, EvalSection)
        assert {"engine", "batch_size", "max_batch_tokens"} <= set(section.model_fields)
    # the keys written before the sections shared a base
    assert {"every", "benchmarks", "n", "limit", "temperature", "top_p", "max_new_tokens"} <= set(EvalDuringTrainingCfg.model_fields)
    assert {"benchmarks", "n", "temperature", "top_p", "max_new_tokens", "limit", "data_dir"} <= set(SweepEval.model_fields)
    cfg = tiny_config(eval__n=5, eval__max_new_tokens=7, data__template="plain")
    full = for_run(cfg.eval, cfg)
    assert (full.n, full.temperature, full.top_p, full.limit, full.max_new_tokens) == (5, 1.0, 1.0, 64, 7)
    assert (full.engine, full.seed, full.template, full.device) == ("hf", 0, "plain", "cpu")
    assert for_run(SweepEval(), cfg).max_new_tokens == 10  # null = rollout.max_new_tokens


def test_a_vllm_evaluation_of_an_hf_run_is_refused():
    from rbctl.config.train import load_train_config

    with pytest.raises(UserError, match="eval.engine 'vllm'.*rollout.engine 'vllm'"):
        load_train_config(None, ["eval.engine=vllm"])


def test_a_sweep_whose_final_answers_do_not_fit_the_vllm_context_is_refused_at_load(tmp_path):
    base = {**TINY_TRAIN, "rollout": {**TINY_TRAIN["rollout"], "engine": "vllm", "vllm": {"max_model_len": 64}}}
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({"base": "base.yaml", "arms": {"a": {}},
                                                     "eval": {"max_new_tokens": 100}}))
    with pytest.raises(UserError, match=r"s.yaml: eval: arm 'a': eval.max_new_tokens 100 does not fit .*max_model_len 64"):
        load_sweep(tmp_path / "s.yaml")


def test_a_sweep_directory_made_before_the_eval_engine_keys_still_resumes(tmp_path):
    """sweep.yaml records each arm's resolved config and the evaluation section; a directory written
    before eval.engine / batch_size / max_batch_tokens / data_dir existed is the same sweep (keys
    at their defaults), a changed evaluation is not."""
    import copy

    from rbctl.store.rundir import final_eval_dir
    from rbctl.store.rundir import run_key
    from rbctl.store.write import write_sweep_state
    from rbctl.sweep.ablate import run_sweep

    (tmp_path / "base.yaml").write_text(yaml.safe_dump({**TINY_TRAIN, "steps": 2}))
    sweep_file = tmp_path / "s.yaml"
    sweep_file.write_text(yaml.safe_dump({"base": "base.yaml", "arms": {"a": {}}, "seeds": [0],
                                          "eval": {"benchmarks": ["builtin"], "n": 2}}))
    sweep, configs = load_sweep(sweep_file)
    new = ("engine", "batch_size", "max_batch_tokens", "data_dir")
    old = {"sweep": sweep.model_dump(mode="json"), "configs": {a: c.model_dump(mode="json") for a, c in configs.items()}}
    for section in [old["sweep"]["eval"]] + [c["eval"] for c in old["configs"].values()]:
        for k in new:
            section.pop(k, None)
    out = tmp_path / "out"
    out.mkdir()
    (out / "sweep.yaml").write_text(yaml.safe_dump(old, sort_keys=False))
    write_sweep_state(out, {"runs": {run_key("a", 0): {"status": "done", "error": None}}})
    summary = final_eval_dir(out / "runs" / "a" / "seed_0", 2) / "builtin" / "summary.json"
    summary.parent.mkdir(parents=True)
    summary.write_text("{}")  # the run and its evaluation are done: nothing is run again
    state = run_sweep(sweep_file, out, progress=False, log=lambda *a: None)
    assert state["runs"][run_key("a", 0)]["status"] == "done"

    changed = copy.deepcopy(old)
    changed["sweep"]["eval"]["n"] = 3
    (out / "sweep.yaml").write_text(yaml.safe_dump(changed, sort_keys=False))
    with pytest.raises(UserError, match="holds a different sweep"):
        run_sweep(sweep_file, out, progress=False, log=lambda *a: None)


def test_a_second_run_from_the_same_weights_copies_its_step_0_evaluation_and_no_other(tiny_config, tmp_path, monkeypatch):
    """A worker's `EvaluationCache`, given to each of its runs, copies an evaluation it made of the same
    weights with the same config; a run without one evaluates afresh, to the same bytes."""
    from rbctl.train import evaluation

    evaluated = []
    real = evaluation.evaluate_trainer
    monkeypatch.setattr(evaluation, "evaluate_trainer",
                        lambda tr, ecfg, out, step, *a: evaluated.append(step) or real(tr, ecfg, out, step, *a))
    base = dict(steps=2, eval__every=2, eval__n=2, eval__limit=4, eval__temperature=1.0)
    cache = evaluation.EvaluationCache()
    train(tiny_config(**base), tmp_path / "a", callbacks=[cache], **QUIET)
    train(tiny_config(algo__budget=1.0, **base), tmp_path / "b", callbacks=[cache], **QUIET)  # another arm, same start
    assert evaluated == [0, 2, 2]  # b's step 0 is a's (same weights, eval config and problems), its step 2 its own
    train(tiny_config(seed=1, **base), tmp_path / "s1", callbacks=[cache], **QUIET)  # another seed: other weights here
    assert evaluated == [0, 2, 2, 0, 2]
    assert len(cache.made) == 5  # the five made (the copy is not recorded again)
    a, b = (periodic_eval_dir(tmp_path / r, 0) / "builtin" for r in "ab")
    assert (a / "samples.jsonl").read_bytes() == (b / "samples.jsonl").read_bytes()
    assert _summary(b.parent)["model"] == _summary(a.parent)["model"]
    # computed afresh (no cache), step 0 gives b exactly the copy (the evaluation's own seed, not the run's)
    train(tiny_config(algo__budget=1.0, **base), tmp_path / "c", **QUIET)
    assert evaluated == [0, 2, 2, 0, 2, 0, 2]
    c, b = (periodic_eval_dir(tmp_path / r, 0) / "builtin" / "samples.jsonl" for r in "cb")
    assert c.read_bytes() == b.read_bytes()
