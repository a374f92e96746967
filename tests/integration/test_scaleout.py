"""More than one device (torch.distributed, gloo on CPU) and LoRA adapters."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import socket

import pytest
import torch
from safetensors.torch import load_file

from rbctl.train.batch import RolloutBatch
from rbctl.train.trainer import Trainer
from rbctl.train.loop import train
from rbctl.train.step import rollout_batch
from rbctl.train.update import update


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _shard(batch: RolloutBatch, rank: int, world: int) -> RolloutBatch:
    """Rank `rank`'s share of a global batch: whole prompts (all G rollouts of each)."""
    p, g = batch.rewards.shape
    ps = slice(rank * p // world, (rank + 1) * p // world)
    rows = slice(ps.start * g, ps.stop * g)
    return dataclasses.replace(batch, input_ids=batch.input_ids[rows], attention_mask=batch.attention_mask[rows],
                               response_ids=batch.response_ids[rows], response_mask=batch.response_mask[rows],
                               rewards=batch.rewards[ps], correct=batch.correct[ps], advantages=batch.advantages[ps],
                               engine_logp=None if batch.engine_logp is None else batch.engine_logp[rows])


def single_process_update(cfg, tmp_path):
    """One process's rollout and update of step 1 (the reference a multi-process step must equal):
    (the trainer, its gradients, its parameters after the step); the batch is saved to
    tmp_path/batch.pt for the ranks."""
    single = Trainer(cfg, tmp_path / "single", log=lambda *a: None)
    batch = rollout_batch(single.state, single.sampler, 1)
    assert batch.correct.any() and not batch.correct.all()  # a batch that carries signal
    torch.save(batch, tmp_path / "batch.pt")
    grads = _record_grads(single)
    update(single.state, batch, single.alpha)
    return single, grads, {n: p.detach() for n, p in single.model.named_parameters()}


def _record_grads(tr: Trainer) -> dict:
    grads = {}
    step = tr.opt.step

    def recording_step(*a, **k):
        grads.update({n: p.grad.detach().clone() for n, p in tr.model.named_parameters() if p.grad is not None})
        return step(*a, **k)

    tr.opt.step = recording_step
    return grads


def _ddp_worker(rank: int, world: int, port: int, cfg_json: str, batch_path: str, out_dir: str) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    from rbctl.config.train import TrainConfig

    cfg = TrainConfig.model_validate(json.loads(cfg_json))
    tr = Trainer(cfg, os.path.join(out_dir, f"rank{rank}"), log=lambda *a: None)
    grads = _record_grads(tr)
    update(tr.state, _shard(torch.load(batch_path, weights_only=False), rank, world), tr.alpha)
    torch.save({"params": {n: p.detach().clone() for n, p in tr.model.named_parameters()}, "grads": grads},
               os.path.join(out_dir, f"rank{rank}.pt"))
    # both ranks are done with the group before either tears it down: one rank's gloo context aborted
    # ("terminate called without an active exception", SIGABRT) once in a full-suite run otherwise
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_two_gloo_ranks_update_like_one_process_on_the_global_batch(tiny_config, tmp_path, monkeypatch):
    import rbctl.train.batch as batch_mod

    # Same per-row forward in both (DDP turns the shared-prompt path off), so only summation order differs.
    monkeypatch.setattr(batch_mod, "_can_share_prompts", lambda *a, **k: False)
    cfg = tiny_config(optim__lr=1e-4, algo__log_kl="false")
    single, grads, ref = single_process_update(cfg, tmp_path)

    torch.multiprocessing.spawn(_ddp_worker, args=(2, _free_port(), cfg.model_dump_json(), str(tmp_path / "batch.pt"),
                                                   str(tmp_path)), nprocs=2, join=True)
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in (0, 1))
    for name, p in ref.items():
        assert torch.equal(r0["params"][name], r1["params"][name]), name  # identical on both ranks
        torch.testing.assert_close(r0["grads"][name], grads[name], rtol=1e-4, atol=1e-7)
        torch.testing.assert_close(r0["params"][name], p, rtol=0, atol=1e-6)


def test_lora_trains_adapters_only_with_the_base_as_reference(tiny_config, tmp_path):
    pytest.importorskip("peft")
    from rbctl.rollout.models import load_policy
    from rbctl.train.training_data import task_spec, warm_start_spec

    cfg = tiny_config(model__lora="{r: 4, alpha: 8, target_modules: all-linear}", steps=3, save_every=3)
    run = tmp_path / "lora"
    lines = train(cfg, run, progress=False, log=lambda *a: None)
    assert lines[0]["kl"] == pytest.approx(0.0, abs=1e-7)  # LoRA B starts at 0: policy = reference
    assert all(math.isfinite(r["kl"]) for r in lines) and lines[-1]["kl"] > 0
    ck = run / "checkpoints" / "step_000003" / "model"
    assert (ck / "adapter_config.json").exists() and not (ck / "model.safetensors").exists()
    adapter = load_file(str(ck / "adapter_model.safetensors"))
    assert adapter and all("lora_" in k for k in adapter)
    assert any(v.abs().sum() > 0 for k, v in adapter.items() if "lora_B" in k)  # the adapters learned
    # `rbctl eval RUN` loads base + adapter merged; it differs from the warm start
    merged = load_policy(str(run), device="cpu").model
    from rbctl.tasks.builtin import warm_start_path

    base = load_file(str(warm_start_path(task_spec(cfg), warm_start_spec(cfg)) / "model.safetensors"))
    sd = merged.state_dict()
    assert any(not torch.equal(sd[k], base[k]) for k in base if k in sd)


def test_a_run_stops_after_too_many_nonfinite_steps(tiny_config, tmp_path, monkeypatch):
    from rbctl.errors import UserError

    from rbctl.train.objective import Objective

    real = Objective.policy_loss  # the arm's policy loss, whichever it is

    def nan_loss(*a, **k):
        out = real(*a, **k)
        out.loss_mat = out.loss_mat * float("nan")
        return out

    monkeypatch.setattr(Objective, "policy_loss", nan_loss)
    run = tmp_path / "nan"
    cfg = tiny_config(steps=5, save_every=1, max_nonfinite_steps=2)
    with pytest.raises(UserError, match="non-finite for 2 steps in a row"):
        train(cfg, run, progress=False, log=lambda *a: None)
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["nonfinite/skipped"] for r in lines] == [1]  # step 1 logged, step 2 stopped the run
    ck = load_file(str(run / "checkpoints" / "step_000001" / "model" / "model.safetensors"))
    assert all(torch.isfinite(v).all() for v in ck.values())  # no checkpoint holds NaN
