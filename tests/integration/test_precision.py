"""Training precision (`model.precision`): fp32 master weights with bf16 autocast actually move the
weights at a paper learning rate; pure bf16 is warned about; sampling and training share a precision."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from rbctl.train.loop import train
from rbctl.train.precision import PURE_BF16_WARNING, prepare_trainable, resolve_precision

QUIET = dict(progress=False, log=lambda *a: None)
RECIPE_PRECISION = ["model.dtype=bfloat16", "optim.lr=1e-6", "optim.weight_decay=0.01", "optim.warmup_steps=0"]


def _changed_fraction(start: dict, end: dict) -> float:
    changed = total = 0
    for k, v in end.items():
        s = start[k].to(torch.bfloat16).float()  # what the trainer started from: loaded in bf16
        changed += (v.float() != s).sum().item()
        total += v.numel()
    return changed / total


@pytest.mark.parametrize("mode,at_least,at_most", [("bf16-mixed", 0.99, 1.0), ("bf16-pure", 0.0, 0.5)])
@pytest.mark.slow
def test_ten_steps_at_lr_1e6_move_the_weights_only_with_fp32_master_weights(tiny_config, tmp_path, mode, at_least, at_most):
    """The paper recipes' settings (weights loaded in bf16, AdamW at lr 1e-6, decay 0.01) on CPU, with
    bf16 autocast on CPU standing in for CUDA's."""
    from rbctl.train.training_data import task_spec, warm_start_spec

    cfg = tiny_config(steps=10, save_every=10, kappa_eff_every=0, model__precision=mode,
                      **{k.split("=")[0].replace(".", "__"): k.split("=")[1] for k in RECIPE_PRECISION})
    logs = []
    train(cfg, tmp_path / "run", progress=False, log=logs.append)
    from rbctl.tasks.builtin import warm_start_path

    start = load_file(str(warm_start_path(task_spec(cfg), warm_start_spec(cfg)) / "model.safetensors"))
    end = load_file(str(tmp_path / "run" / "checkpoints" / "step_000010" / "model" / "model.safetensors"))
    frac = _changed_fraction(start, end)
    assert at_least <= frac <= at_most, frac
    assert (PURE_BF16_WARNING in logs) == (mode == "bf16-pure")
    if mode == "bf16-mixed":
        assert all(v.dtype == torch.float32 for v in end.values())  # the checkpoint holds the master weights


def test_precision_resolution_and_casts():
    assert resolve_precision("auto", torch.device("cpu")).mode == "fp32"
    assert resolve_precision("auto", torch.device("cuda")).mode == "bf16-mixed"
    mixed = resolve_precision("bf16-mixed", torch.device("cpu"))
    assert mixed.autocast and mixed.master_fp32
    lin = torch.nn.Linear(4, 4).to(torch.bfloat16)
    frozen = torch.nn.Linear(4, 4).to(torch.bfloat16).requires_grad_(False)
    net = torch.nn.Sequential(lin, frozen)
    prepare_trainable(net, mixed, lora=False)
    assert lin.weight.dtype == torch.float32 and frozen.weight.dtype == torch.bfloat16  # frozen weights keep their dtype
    with mixed.context():
        assert net(torch.randn(2, 4)).dtype == torch.bfloat16  # forwards in bf16
    logs = []
    prepare_trainable(torch.nn.Linear(2, 2).to(torch.bfloat16), resolve_precision("bf16-pure", torch.device("cpu")),
                      lora=False, log=logs.append)
    assert logs == [PURE_BF16_WARNING]
    logs.clear()
    prepare_trainable(torch.nn.Linear(2, 2).to(torch.bfloat16), resolve_precision("bf16-pure", torch.device("cpu")),
                      lora=True, log=logs.append)
    assert logs == []  # LoRA: only the adapters train


# --- the sampling path vs the training path -------------------------------------------------------


@pytest.mark.parametrize("mode", ["fp32", "bf16-mixed"])
def test_hf_engine_logs_its_logprob_mismatch_with_the_trainer(tiny_config, tmp_path, mode):
    """hf samples under the training autocast; its own log-probs against the trainer's are logged."""
    cfg = tiny_config(steps=2, model__precision=mode)
    done = train(cfg, tmp_path / "run", **QUIET)
    for r in done:
        d = r["rollout/logprob_diff"]
        # same weights and precision; only KV-cached vs full-forward rounding remains
        assert d is not None and 0.0 <= d < (1e-4 if mode == "fp32" else 0.05), d


def test_bfloat16_sampling_replica_is_measured_against_the_float32_trainer(tiny_config, tmp_path):
    """rollout.dtype bfloat16: float32 training, bf16 sampling; the mismatch is logged, and bounded."""
    fp32 = train(tiny_config(steps=2), tmp_path / "fp32", **QUIET)
    bf16 = train(tiny_config(steps=2, rollout__dtype="bfloat16"), tmp_path / "bf16", **QUIET)
    for a, b in zip(fp32, bf16):
        # bf16 weights (8-bit mantissa) move the sampler's log-probs well above the fp32 rounding floor
        assert a["rollout/logprob_diff"] < 1e-4 < b["rollout/logprob_diff"] < 0.05, (a, b)


def test_bfloat16_sampling_is_refused_for_vllm():
    from rbctl.errors import UserError
    from rbctl.rollout.factory import build_engine

    with pytest.raises(UserError, match="rollout.dtype"):
        build_engine("vllm", None, None, source="m", batch_size=1, sample_dtype="bfloat16")


@pytest.mark.parametrize("fast", [True, False])
def test_hf_sampled_logprobs_are_the_trainers(fast):
    """Both sampling paths (the CPU loop and `model.generate` with the recording processor) report
    log softmax(logits / T) of the tokens they drew."""
    from rbctl.rollout.base import SamplingParams
    from rbctl.rollout.hf import HFEngine
    from tests.conftest import tiny_llama

    model = tiny_llama(40, eos_token_id=2, bos_token_id=1, pad_token_id=0).eval()

    class Tok:
        pad_token_id, eos_token_id = 0, 2

        def decode(self, ids, skip_special_tokens=True):
            return " ".join(map(str, ids))

    assert HFEngine(model, Tok()).generate([[1, 5]], SamplingParams(n=1, max_new_tokens=2))[0][0].logprobs is None
    eng = HFEngine(model, Tok(), max_batch=8, logprobs=True)
    eng.fast = fast
    prompts = [[1, 5, 6, 7], [1, 9]]
    t = 0.7
    out = eng.generate(prompts, SamplingParams(n=3, temperature=t, max_new_tokens=6, seed=0))
    for p, group in enumerate(out):
        for s in group:
            assert s.logprobs is not None and len(s.logprobs) == len(s.token_ids)
            ids = torch.tensor([prompts[p] + s.token_ids])
            with torch.no_grad():
                logits = model(input_ids=ids).logits[0, len(prompts[p]) - 1:-1] / t
            want = torch.log_softmax(logits, -1).gather(-1, torch.tensor(s.token_ids)[:, None]).squeeze(1)
            torch.testing.assert_close(torch.tensor(s.logprobs), want, rtol=0, atol=1e-4)
    greedy = eng.generate(prompts, SamplingParams(n=1, temperature=0.0, max_new_tokens=3))
    assert greedy[0][0].logprobs is None


def test_resume_keeps_the_fp32_master_weights(tiny_config, tmp_path):
    """A bf16-mixed run resumed from a checkpoint continues from its float32 weights, not from a
    bf16-rounded copy (the checkpoint is read in float32 whatever model.dtype says)."""
    from rbctl.train.trainer import Trainer

    cfg = tiny_config(steps=2, save_every=2, model__precision="bf16-mixed", model__dtype="bfloat16")
    run = tmp_path / "run"
    train(cfg, run, **QUIET)
    saved = load_file(str(run / "checkpoints" / "step_000002" / "model" / "model.safetensors"))
    assert any((v != v.to(torch.bfloat16).float()).any() for v in saved.values())  # not representable in bf16
    tr = Trainer(tiny_config(steps=3, save_every=2, model__precision="bf16-mixed", model__dtype="bfloat16"), run,
                 log=lambda *a: None)
    assert tr.resume_step == 2
    params = dict(tr.model.named_parameters())
    for k, v in saved.items():
        if k in params:
            assert params[k].dtype == torch.float32 and torch.equal(params[k].detach(), v), k
