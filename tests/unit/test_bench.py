"""The side-by-side benchmark's bookkeeping (no timing): medians and FLOP/s by hand, and the TRL config."""

from __future__ import annotations

import importlib.util

import pytest

from scripts import bench_trl as bench


def _step(step_s, rollout_s, train_tokens, run_tokens, reward=0.5):
    return {"step_s": step_s, "rollout_s": rollout_s, "rollout_tokens": 40, "train_tokens": train_tokens,
            "run_tokens": run_tokens, "reward": reward}


def test_summary_is_the_median_of_the_measured_steps():
    warm, last = _step(9.0, 9.0, 1, 1), _step(9.0, 0.1, 1, 1)  # left out: the warm-up and the last step
    run = {"steps": [warm, _step(1.0, 0.4, 120, 60), _step(2.0, 0.5, 120, 60), last],
           "params": 1000, "extra_forwards": 1.0, "peak_rss_mib": 100.0}
    s = bench.summarise([run, {**run, "peak_rss_mib": 150.0}], warmup=1, matmul_flops=1e7)
    assert s["n_steps"] == 4
    assert s["step_s"] == pytest.approx(1.5)  # median of 1, 1, 2, 2
    assert s["train_s"] == pytest.approx(1.05)  # training phase = step − rollout: 0.6, 0.6, 1.5, 1.5
    assert s["train_tok_s"] == pytest.approx(140.0)  # 120/0.6 = 200 and 120/1.5 = 80
    # (6 + 2·1)·1000·120 / 0.6 = 1.6e6 and / 1.5 = 0.64e6: median 1.12e6, a fraction 0.112 of 1e7.
    assert s["train_flops"] == pytest.approx(1.12e6)
    assert s["flops_frac"] == pytest.approx(0.112)
    assert s["run_flops"] == pytest.approx(0.56e6)  # half the tokens run through the model
    assert s["peak_rss_mib"] == 150.0


def test_extra_forward_passes_count_the_reference_and_kappa_eff():
    cfg = bench.workload_config(steps=4, threads=1, log_kl=True)
    assert bench.extra_forward_passes(cfg, "rbctl") == 2.0
    cfg = bench.workload_config(steps=4, threads=1, log_kl=False)
    assert bench.extra_forward_passes(cfg, "rbctl") == 1.0
    assert bench.extra_forward_passes(cfg, "trl") == 0.0


def _rbctl_adamw_is_fused(cfg) -> bool:
    """rbctl's optimizer for CPU float32 weights is the one TRL is given (`optim=adamw_torch_fused`)."""
    import torch

    from rbctl.train.optim import make_optimizer
    from scripts.bench_trl_smollm2 import optimizer_name  # what the SmolLM2 bench prints for each framework

    opt, _ = make_optimizer([torch.zeros(3, requires_grad=True)], cfg.optim, cfg.steps)
    return optimizer_name(opt) == "AdamW (fused)" and opt.defaults["fused"] is True


@pytest.mark.skipif(importlib.util.find_spec("trl") is None, reason="TRL is an optional extra")
def test_trl_config_mirrors_the_quickstart(tmp_path):
    cfg = bench.workload_config(steps=5, threads=1, log_kl=False)
    t = bench.trl_config(cfg, str(tmp_path), seed=0)
    r, a = cfg.rollout, cfg.algo
    assert t.per_device_train_batch_size == r.prompts_per_step * r.group_size == 128
    assert (t.num_generations, t.max_completion_length, t.temperature, t.top_p) == (8, 20, 1.0, 1.0)
    assert (t.learning_rate, t.max_grad_norm, t.max_steps) == (cfg.optim.lr, cfg.optim.max_grad_norm, 5)
    assert (t.beta, t.num_iterations, t.epsilon, t.epsilon_high) == (0.0, 1, a.clip_low, a.clip_high)
    assert t.loss_type == "grpo" and t.scale_rewards == "group" and not t.use_vllm
    assert t.save_strategy == "no" and t.report_to == [] and t.use_cpu
    # the options that change the work match rbctl's: float32, no checkpointing, torch's fused AdamW
    assert (t.bf16, t.fp16, t.gradient_checkpointing) == (False, False, False)
    assert getattr(t.optim, "value", t.optim) == "adamw_torch_fused" and _rbctl_adamw_is_fused(cfg)
    assert cfg.model.gradient_checkpointing is False and cfg.model.dtype in ("auto", "float32")


@pytest.mark.skipif(importlib.util.find_spec("trl") is None, reason="TRL is an optional extra")
def test_real_model_bench_gives_trl_the_work_rbctl_does(tmp_path):
    import argparse

    from scripts import bench_trl_smollm2 as real

    args = argparse.Namespace(data=tmp_path / "gsm8k_train.jsonl", steps=4, threads=1, rbctl_set=None)
    cfg = real.rbctl_config(args, tmp_path / "model")
    bf16 = real.rbctl_config(args, tmp_path / "model", bf16_sampling=True)
    t = real.trl_config(cfg, str(tmp_path / "trl"))
    assert (t.bf16, t.fp16, t.gradient_checkpointing, getattr(t.optim, "value", t.optim)) == (False, False, False, "adamw_torch_fused")
    assert _rbctl_adamw_is_fused(cfg)
    assert cfg.model.precision in ("auto", "fp32") and cfg.model.lora is None and not cfg.model.gradient_checkpointing
    assert (cfg.rollout.dtype, bf16.rollout.dtype) == ("auto", "bfloat16")
    assert t.per_device_train_batch_size == cfg.rollout.prompts_per_step * cfg.rollout.group_size == 16
    assert t.num_generations == cfg.rollout.group_size and t.max_completion_length == cfg.rollout.max_new_tokens == 64
    assert t.generation_kwargs == {"min_new_tokens": 64} and t.shuffle_dataset is False
    assert (t.temperature, t.top_p, t.learning_rate, t.weight_decay) == \
           (cfg.rollout.temperature, cfg.rollout.top_p, cfg.optim.lr, cfg.optim.weight_decay) == (1.0, 1.0, 1e-6, 0.0)
    assert (t.adam_beta1, t.adam_beta2, t.max_grad_norm) == (cfg.optim.beta1, cfg.optim.beta2, cfg.optim.max_grad_norm)
    assert (t.beta, t.num_iterations, t.loss_type) == (0.0, cfg.algo.ppo_epochs, "grpo")
    assert cfg.algo.kl_coef == 0 and not cfg.algo.log_kl and cfg.algo.estimator == "grpo" and cfg.algo.budget is None
    assert cfg.algo.loss_agg == "seq-mean-token-mean" and cfg.kappa_eff_every == 1
    # rbctl's shipped micro-batching (the whole batch), not the config file's 8, and TRL's layout the same
    assert cfg.algo.micro_batch_size == 0 and (t.per_device_train_batch_size, t.gradient_accumulation_steps) == (16, 1)
    assert real.layout(cfg)["sequences per forward/backward"] == 16 and real.layout(cfg)["sequences sampled at once"] == 16
    # --micro-batch 8: forwards of 8 in both, TRL accumulating two of them per optimizer step, generating 16 at once
    args.micro_batch = 8
    cfg8 = real.rbctl_config(args, tmp_path / "model")
    t8 = real.trl_config(cfg8, str(tmp_path / "trl8"))
    assert cfg8.algo.micro_batch_size == 8 and (t8.per_device_train_batch_size, t8.gradient_accumulation_steps) == (8, 2)
    assert t8.generation_batch_size == 16 and real.layout(cfg8)["forwards/backwards per optimizer step"] == 2


def test_the_decode_compute_limit_counts_every_weight_a_token_passes_through(tmp_path):
    import json

    from scripts.bench_trl_smollm2_report import decode_flops_per_token

    smollm2 = {"hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30, "vocab_size": 49152,
               "num_attention_heads": 9, "num_key_value_heads": 3}
    (tmp_path / "config.json").write_text(json.dumps(smollm2))
    # per layer q, o 576² + k, v 576·192 + gate, up, down 576·1536; the tied LM head 576·49152
    assert decode_flops_per_token(tmp_path) == 2 * (30 * (2 * 576**2 + 2 * 576 * 192 + 3 * 576 * 1536) + 576 * 49152)
    assert round(decode_flops_per_token(tmp_path) / 1e9, 3) == 0.269


def test_the_decode_memory_limit_reads_every_float32_weight_once_a_step(tmp_path):
    import json

    from scripts.bench_trl_smollm2_report import decode_memory_limit

    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 4, "intermediate_size": 8, "num_hidden_layers": 1,
                                                      "vocab_size": 10, "num_attention_heads": 2}))
    weights = 2 * 16 + 2 * 16 + 3 * 32 + 40  # q, o; k, v (no GQA); gate, up, down; the LM head
    # 16 rows a step at 1 GB/s: 16 tokens per (weights × 4 bytes) / 1e9 seconds
    assert decode_memory_limit(tmp_path, 16, 1.0) == 16 * 1e9 / (weights * 4)


def test_the_sampling_clock_splits_the_loop_into_its_prefill_and_decoding(monkeypatch):
    import rbctl.rollout.hf as hf
    import scripts.bench_trl_smollm2 as real
    from rbctl.rollout.base import SamplingParams
    from tests.conftest import tiny_llama

    monkeypatch.setattr(hf.HFEngine, "_sample", hf.HFEngine._sample)  # restored after the test
    monkeypatch.setattr(hf, "forward_with_cache", hf.forward_with_cache)
    widths = []
    forward = hf.forward_with_cache
    monkeypatch.setattr(hf, "forward_with_cache", lambda m, ids, *a, **kw: widths.append(ids.shape[1]) or forward(m, ids, *a, **kw))

    class Tok:
        pad_token_id, eos_token_id = 0, 2

        def decode(self, ids, skip_special_tokens=True):
            return " ".join(map(str, ids))

    clock = real.sampling_clock()
    engine = hf.HFEngine(tiny_llama(12, pad_token_id=0, bos_token_id=1, eos_token_id=2).eval(), Tok())
    engine.eos_ids = []  # full length, as the bench samples
    assert engine.fast
    engine.generate([[1, 5, 6], [1, 3, 4]], SamplingParams(n=2, max_new_tokens=6, temperature=1.0, seed=0))
    assert widths == [3] + [1] * 5  # one prefill of the two prompts, then 5 one-token decoding forwards
    assert 0 < clock["prefill_s"] < clock["sample_s"]


def test_the_decoding_rate_leaves_out_each_sequences_first_token_and_the_unmeasured_steps():
    import scripts.bench_trl_smollm2_report as real

    def step(decode_s):
        return {"rollout_tokens": 1024, "decode_s": decode_s}

    # warm-up and checkpoint steps are left out; 1008 tokens after the 16 first ones
    runs = [{"steps": [step(100.0), step(8.0), step(6.0), step(7.0), step(100.0)]}]
    assert real.decode_rate(runs) == pytest.approx(1008 / 7.0)
    assert real.decode_rate([{"steps": [step(None)] * 4}]) is None


def test_the_report_prints_the_decoding_rate_as_a_share_of_each_limit(tmp_path, capsys):
    import argparse
    import json

    import scripts.bench_trl_smollm2_report as real

    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 4, "intermediate_size": 8, "num_hidden_layers": 1,
                                                      "vocab_size": 10, "num_attention_heads": 2}))
    per_token = real.decode_flops_per_token(tmp_path)  # 2 × 200 weights: 400 FLOP a token
    lay = {"sequences per forward/backward": 16, "sequences sampled at once": 16}

    def run(step_s, decode_s=None):
        steps = [{"step_s": step_s, "rollout_s": 1.0, "kappa_eff_s": 0.0, "rollout_tokens": 1024, "reward": 0.0,
                  "logprob_diff": 1e-5, "decode_s": decode_s, "prompt_tokens": 410, "same_prompts": True}] * 3
        return {"steps": steps, "peak_rss_mib": 1024, "layout": lay, "settings": {}}

    res = {"rbctl": [run(10.0, decode_s=8.0)], "trl": [run(30.0)]}
    mm = [{"float32": 252 * per_token / 1e9, "bfloat16": 1.0, "onednn_float32": 504 * per_token / 1e9}]
    args = argparse.Namespace(steps=3, rounds=1, rbctl_set=None)
    real.report(args, tmp_path, [(1, res, mm)])
    out = capsys.readouterr().out
    # 1008 tokens after the first 16 in 8 s: 126 tok/s, half of 252 and a quarter of 504
    assert "compute limit of decoding 252 / 504 tok/s" in out
    assert "decoding alone, rbctl: 126 tok/s = 50% / 25% of that limit" in out


def test_the_report_prints_the_gguf_run_against_the_folder_and_each_phase(tmp_path, capsys):
    import argparse
    import json

    import scripts.bench_trl_smollm2_report as real

    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 4, "intermediate_size": 8, "num_hidden_layers": 1,
                                                      "vocab_size": 10, "num_attention_heads": 2}))
    lay = {"sequences per forward/backward": 16, "sequences sampled at once": 16}

    def run(step_s, kappa_s, backward_s, optimizer_s, rss_mib):
        steps = [{"step_s": step_s, "rollout_s": 4.0, "kappa_eff_s": kappa_s, "backward_s": backward_s,
                  "optimizer_s": optimizer_s, "rollout_tokens": 1024, "reward": 0.0, "logprob_diff": 1e-5,
                  "decode_s": None, "prompt_tokens": 410, "same_prompts": True}] * 3
        return {"steps": steps, "peak_rss_mib": rss_mib, "layout": lay, "settings": {}}

    res = {"rbctl": [run(10.0, 1.0, 3.0, 0.5, 512)], "rbctl_gguf": [run(10.5, 1.0, 3.2, 0.5, 640)],
           "trl": [run(30.0, 0.0, 12.0, 1.0, 1024)]}
    res["trl"][0]["steps"] = [{k: v for k, v in s.items() if k != "kappa_eff_s"} for s in res["trl"][0]["steps"]]
    mm = [{"float32": 100.0, "bfloat16": 50.0, "onednn_float32": 200.0}]
    real.report(argparse.Namespace(steps=3, rounds=1, rbctl_set=None), tmp_path, [(1, res, mm)])
    out = capsys.readouterr().out
    assert "| 1 | 10.0 | 10.5 (+5.0%) | – | 30.0 | 3.00x (3.00) | 2.86x (2.86) | – |" in out  # 30 / 10.5 = 2.857
    assert "(of TRL's: rbctl 0.500, rbctl, model from the GGUF file 0.625)" in out
    # forward + loss = step − sampling − κ_eff − backward − optimizer: 10 − 4 − 1 − 3 − 0.5 = 1.5
    assert "| 1 | rbctl | 10.0 | 4.0 | 1.5 | 3.0 | 0.5 | 1.0 |" in out
    assert "| 1 | rbctl, model from the GGUF file | 10.5 | 4.0 | 1.8 | 3.2 | 0.5 | 1.0 |" in out  # 10.5 − 8.7
    assert "| 1 | TRL | 30.0 | 4.0 | 13.0 | 12.0 | 1.0 | – |" in out  # no κ_eff pass: 30 − 4 − 12 − 1


def test_the_phase_clock_times_backward_and_optimizer_steps(monkeypatch):
    import torch

    import scripts.bench_trl_smollm2 as real
    from torch.optim import optimizer as optim_module

    monkeypatch.setattr(torch.autograd, "backward", torch.autograd.backward)  # restored after the test
    monkeypatch.setattr(optim_module, "_global_optimizer_pre_hooks", optim_module._global_optimizer_pre_hooks.copy())
    monkeypatch.setattr(optim_module, "_global_optimizer_post_hooks", optim_module._global_optimizer_post_hooks.copy())
    clock = real.phase_clock()
    w = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.SGD([w], lr=0.5)
    assert clock == {"backward_s": 0.0, "optimizer_s": 0.0}
    (w * w).sum().backward()
    assert clock["backward_s"] > 0 and clock["optimizer_s"] == 0.0
    opt.step()
    assert clock["optimizer_s"] > 0
    assert torch.equal(w.detach(), torch.zeros(3))  # 1 − 0.5 · 2: the step itself ran


def test_main_job_split_takes_medians_and_the_rest_of_each_run():
    from scripts.bench_main_job import split_lines

    def rec(pid, wall, steps, trainer, age):
        return {"key": "k", "pid": pid, "process_age_s": age, "modules_imported": 0, "wall_s": wall, "cpu_s": wall - 1,
                "phases": {"steps": {"wall_s": steps, "cpu_s": steps, "calls": 100},
                           "trainer": {"wall_s": trainer, "cpu_s": trainer, "calls": 1}}}

    # three runs in two workers: walls 20, 24, 30; the rest = wall − steps − trainer = 6, 4, 8 -> median 6
    records = [rec(1, 20.0, 12.0, 2.0, 0.1), rec(2, 24.0, 18.0, 2.0, 0.1), rec(1, 30.0, 22.0, 0.0, 25.0)]
    lines = split_lines(records, logged_steps=[11.0, 17.0, 21.0], sweep_wall=40.0, jobs=2)
    text = "\n".join(lines)
    assert lines[0] == "3 runs; per run, median (wall s / CPU s):"
    assert "in all                 24.00 /  23.00" in lines[1]
    assert "training steps" in text and " 18.00 /  18.00  (100 calls)" in text
    assert "logged as time/step_s              17.00" in text
    assert "build the trainer" in text and "   2.00 /   2.00  (1 calls)" in text
    assert "the rest of the run (set-up, locks, provenance, imports)  6.00" in text
    assert "age at the run's start: median 0.10 s" in text and "2 worker processes for 3 runs" in text
    # 40 s × 2 workers = 80 s of worker time against 74 s of runs: 2.00 s per run beyond them
    assert lines[-1] == ("sweep: 40.0 s wall with 2 jobs; the workers' runs 74.0 s in all; the launcher adds 2.00 s per "
                         "run per worker (26.67 s wall per run per worker)")
