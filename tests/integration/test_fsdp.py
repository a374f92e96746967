"""FSDP2 (`model.fsdp: true`, rbctl.train.parallel) on two gloo ranks on CPU: an update equals one
process's on the same global batch, a checkpoint holds full weights (loadable as a model folder) and
the full optimizer state, and a resumed run equals an uninterrupted one."""

from __future__ import annotations

import json
import os

import pytest
import torch
from safetensors.torch import load_file

from rbctl.train.trainer import Trainer
from rbctl.train.update import update
from tests.conftest import REPO
from tests.integration.test_scaleout import _free_port, _record_grads, _shard, single_process_update


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def _join(rank: int, world: int, port: int) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(1)


def _leave() -> None:
    torch.distributed.barrier()  # both ranks are done before either tears the group down
    torch.distributed.destroy_process_group()


def _update_worker(rank: int, world: int, port: int, cfg_json: str, batch_path: str, out_dir: str) -> None:
    _join(rank, world, port)
    from rbctl.config.train import TrainConfig
    from rbctl.store.checkpoint import save_checkpoint

    cfg = TrainConfig.model_validate(json.loads(cfg_json))
    run = os.path.join(out_dir, "run")
    tr = Trainer(cfg, run, log=lambda *a: None)
    p = next(tr.model.parameters())
    sharded = (type(p).__name__, tuple(p.to_local().shape), tuple(p.shape))
    grads = _record_grads(tr)
    update(tr.state, _shard(torch.load(batch_path, weights_only=False), rank, world), tr.alpha)
    params = {n: _full(q.detach()).clone() for n, q in tr.model.named_parameters()}
    weights, state = tr.checkpoint(1)  # collective: the full weights and optimizer state reach rank 0
    if rank == 0:
        save_checkpoint(run, 1, tr.model, tr.tokenizer, state, 2, None, weights=weights)
    torch.distributed.barrier()
    again = Trainer(cfg, run, log=lambda *a: None)  # resumes from step 1: rank 0 reads, both get their shards
    restored = {n: _full(q.detach()) for n, q in again.model.named_parameters()}
    moments = [(_full(a["exp_avg_sq"]), _full(b["exp_avg_sq"]))
               for a, b in zip(tr.opt.state.values(), again.opt.state.values())]
    torch.save({"params": params, "grads": {n: _full(g) for n, g in grads.items()}, "sharded": sharded,
                "restored": restored, "resume_step": again.resume_step,
                "moments_equal": all(torch.equal(a, b) for a, b in moments) and len(moments) > 0},
               os.path.join(out_dir, f"rank{rank}.pt"))
    _leave()


@pytest.mark.slow
def test_fsdp_update_equals_one_process_and_a_checkpoint_restores_the_shards(tiny_config, tmp_path, monkeypatch):
    import rbctl.train.batch as batch_mod

    monkeypatch.setattr(batch_mod, "_can_share_prompts", lambda *a, **k: False)  # the per-row forward, as under FSDP
    cfg = tiny_config(optim__lr=1e-4, algo__log_kl="false", model__fsdp="true")
    single, grads, ref = single_process_update(cfg, tmp_path)
    assert not single.parallel.sharded  # one process: FSDP has nothing to shard

    torch.multiprocessing.spawn(_update_worker, args=(2, _free_port(), cfg.model_dump_json(), str(tmp_path / "batch.pt"),
                                                      str(tmp_path)), nprocs=2, join=True)
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in (0, 1))
    kind, local, full = r0["sharded"]
    assert kind == "DTensor" and local[0] * 2 == full[0]  # each rank holds half of the first dimension
    for name, p in ref.items():
        assert torch.equal(r0["params"][name], r1["params"][name]), name
        torch.testing.assert_close(r0["grads"][name], grads[name], rtol=1e-4, atol=1e-7)
        torch.testing.assert_close(r0["params"][name], p, rtol=0, atol=1e-6)
    # the step-1 checkpoint: full weights in the model folder, restored exactly into both ranks' shards
    saved = load_file(str(tmp_path / "run" / "checkpoints" / "step_000001" / "model" / "model.safetensors"))
    for r in (r0, r1):
        assert r["resume_step"] == 1 and r["moments_equal"]
        assert all(torch.equal(r["restored"][n], r0["params"][n]) for n in ref)
    assert all(torch.equal(saved[n], r0["params"][n]) for n in saved) and "lm_head.weight" not in saved  # tied: once
    state = torch.load(tmp_path / "run" / "checkpoints" / "step_000001" / "trainer_state.pt", weights_only=True)
    assert state["fsdp"] is True and state["world_size"] == 2
    assert set(state["optimizer"]["state"]) == {n for n, p in single.model.named_parameters()}  # by name, full


def _train_worker(rank: int, world: int, port: int, cfg_json: str, out_dir: str) -> None:
    _join(rank, world, port)
    from rbctl.config.train import TrainConfig
    from rbctl.train.loop import train

    cfg = TrainConfig.model_validate(json.loads(cfg_json))
    quiet = dict(progress=False, log=lambda *a: None)
    train(cfg, os.path.join(out_dir, "straight"), **quiet)

    def stop(step, metrics):
        if step == 2:
            raise KeyboardInterrupt  # both ranks, after the step-2 checkpoint

    try:
        train(cfg, os.path.join(out_dir, "resumed"), on_step=stop, **quiet)
    except KeyboardInterrupt:
        pass
    train(cfg, os.path.join(out_dir, "resumed"), **quiet)
    _leave()


@pytest.mark.slow
def test_an_fsdp_run_resumed_equals_an_uninterrupted_one_and_rbctl_eval_loads_it(tiny_config, tmp_path):
    from rbctl.rollout.models import load_policy

    cfg = tiny_config(steps=4, save_every=2, model__fsdp="true")
    torch.multiprocessing.spawn(_train_worker, args=(2, _free_port(), cfg.model_dump_json(), str(tmp_path)),
                                nprocs=2, join=True)
    lines = {name: [json.loads(x) for x in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
             for name in ("straight", "resumed")}
    assert [r["step"] for r in lines["resumed"]] == [1, 2, 3, 4]
    for a, b in zip(lines["straight"], lines["resumed"]):
        assert a["reward/mean"] == b["reward/mean"] and a["loss/total"] == b["loss/total"], a["step"]
    wa, wb = (load_file(str(tmp_path / name / "checkpoints" / "step_000004" / "model" / "model.safetensors"))
              for name in ("straight", "resumed"))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    model = load_policy(str(tmp_path / "resumed"), device="cpu").model  # what `rbctl eval RUN` loads
    sd = model.state_dict()
    assert all(torch.equal(sd[k], wb[k]) for k in wb)


@pytest.mark.parametrize("setting, named", [("model.lora={r: 4}", "model.lora"), ("rollout.engine=vllm", "rollout.engine vllm"),
                                            ("rollout.dtype=bfloat16", "rollout.dtype bfloat16")])
def test_fsdp_refuses_what_it_does_not_combine_with_yet_in_one_line(setting, named, tmp_path, capsys):
    from rbctl.cli import run

    argv = ["train", str(REPO / "configs" / "quickstart.yaml"), "-o", str(tmp_path / "r"), "--set", "model.fsdp=true", "--set", setting]
    assert run(argv + ["--dry-run"]) == 2
    err = [x for x in capsys.readouterr().err.splitlines() if x.startswith("error:")]
    assert len(err) == 1 and f"model.fsdp does not combine with {named} yet" in err[0], err
