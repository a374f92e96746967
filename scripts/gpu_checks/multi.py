"""Checks that need two GPUs: NCCL's waits, a DDP resume, FSDP2, a local sweep's GPU workers. Each runs
on the CPU with gloo when called with device "cpu" (the tests do)."""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

from scripts.gpu_checks.models import TINY, build_model, save_model, train_config, write_problems
from scripts.gpu_checks.single import Context, run, tail

BUSY_S = 12.0  # rank 0's stand-in evaluation: twice the 0.1-minute collective timeout below


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _join(rank: int, world: int, port: int, device: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(world))
    if device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # gloo, as a CPU machine would


def _spawn(fn, ctx: Context, *args) -> list[dict]:
    """`fn(rank, 2, port, device, out, *args)` on two processes; each rank's JSON result."""
    import torch

    torch.multiprocessing.spawn(fn, args=(2, _free_port(), ctx.device, str(ctx.out), *args), nprocs=2, join=True)
    return [json.loads((ctx.out / f"rank{r}.json").read_text()) for r in (0, 1)]


def _wait_rank(rank: int, world: int, port: int, device: str, out: str) -> None:
    _join(rank, world, port, device)
    from rbctl.train.distributed import init_from_env

    ctx = init_from_env(0.1)
    if rank == 0:
        time.sleep(BUSY_S)
    t = time.monotonic()
    ctx.barrier()
    total = ctx.sum(1.0)[0]
    Path(out, f"rank{rank}.json").write_text(json.dumps({"sum": total, "waited_s": time.monotonic() - t,
                                                         "backend": __import__("torch").distributed.get_backend()}))
    ctx.barrier()


def nccl_wait(ctx: Context):
    """Two ranks with collectives timing out after 6 s: rank 1 waits 12 s for rank 0's stand-in evaluation at
    `DistContext.barrier` and both go on (NCCL's own 10-minute default killed ranks waiting for evaluation)."""
    r0, r1 = _spawn(_wait_rank, ctx)
    ok = r0["sum"] == r1["sum"] == 2.0 and r1["waited_s"] >= BUSY_S - 1
    return ok, f"{r0['backend']}: rank 1 waited {r1['waited_s']:.0f} s past a 6 s timeout, then both all-reduced", {}


def _ddp_rank(rank: int, world: int, port: int, device: str, out: str, cfg_json: str) -> None:
    _join(rank, world, port, device)
    import torch

    from rbctl.config.train import TrainConfig
    from rbctl.train.loop import train
    from rbctl.train.trainer import Trainer

    cfg = TrainConfig.model_validate(json.loads(cfg_json))
    run_dir = Path(out) / "run"
    train(cfg, run_dir, progress=False, log=lambda *a: None)
    tr = Trainer(cfg, run_dir, log=lambda *a: None)  # resumes from the last checkpoint
    own = next(tr.model.parameters()).device
    places = sorted({str(t.device) for s in tr.opt.state.values() for t in s.values() if torch.is_tensor(t) and t.dim()})
    other = torch.cuda.memory_allocated(1 - rank) if device == "cuda" else 0
    Path(out, f"rank{rank}.json").write_text(json.dumps({"resume_step": tr.resume_step, "own": str(own),
                                                         "optimizer_on": places, "bytes_on_the_other_gpu": other}))
    tr.dist.barrier()


def ddp_resume(ctx: Context):
    """A two-rank DDP run resumed: every rank's optimizer state on its own device, none on the other GPU
    (without map_location each rank restored rank 0's CUDA tensors onto cuda:0)."""
    model_dir = ctx.out / "policy"
    save_model(model_dir, "llama", TINY, "float32")
    train_file, eval_file = write_problems(ctx.out / "problems", 32, 4)
    cfg = train_config(model_dir, train_file, eval_file, ctx.device, steps=2, eval={"every": 0})
    ranks = _spawn(_ddp_rank, ctx, json.dumps(cfg))
    ok = all(r["resume_step"] == 2 and r["optimizer_on"] == [r["own"]] and r["bytes_on_the_other_gpu"] == 0 for r in ranks)
    return ok, "; ".join(f"rank {i}: resumed at {r['resume_step']}, optimizer state on {r['optimizer_on']}, "
                         f"{r['bytes_on_the_other_gpu']} bytes on the other GPU" for i, r in enumerate(ranks)), {}


def _fsdp_rank(rank: int, world: int, port: int, device: str, out: str) -> None:
    _join(rank, world, port, device)
    import torch
    from torch.distributed.tensor import DTensor

    from rbctl.train.distributed import init_from_env
    from rbctl.train.parallel import Sharded

    dist = init_from_env(10.0)
    dev = torch.device(device, rank) if device == "cuda" else torch.device("cpu")
    parallel = Sharded(dist, dev)
    model = build_model("llama", TINY, 0, str(dev))
    train_model = parallel.wrap(model)
    ids = torch.randint(2, TINY["vocab_size"], (2, 16), generator=torch.Generator().manual_seed(rank)).to(dev)
    with parallel.gathered(model), torch.no_grad():
        train_model(input_ids=ids)  # as the hf engine samples
    logits = train_model(input_ids=ids).logits
    state = {"root_unsharded": not isinstance(model.model.embed_tokens.weight, DTensor),
             "layer_sharded": isinstance(model.model.layers[0].mlp.up_proj.weight, DTensor)}
    logits.float().sum().backward()
    Path(out, f"rank{rank}.json").write_text(json.dumps(state))
    dist.barrier()


def fsdp(ctx: Context):
    """FSDP2 on two ranks: after a gathered generation the root keeps its parameters through backward and the
    layers reshard; then `rbctl train --nproc 2` with model.fsdp trains and checkpoints."""
    ranks = _spawn(_fsdp_rank, ctx)
    if not all(r["root_unsharded"] and r["layer_sharded"] for r in ranks):
        return False, f"resharding after gathered sampling: {ranks}", {}
    import yaml

    model_dir = ctx.out / "policy"
    save_model(model_dir, "llama", TINY, "float32")
    train_file, eval_file = write_problems(ctx.out / "problems", 32, 4)
    cfg = train_config(model_dir, train_file, eval_file, ctx.device, steps=2, model={"fsdp": True},
                       algo={"log_kl": False})
    (ctx.out / "fsdp.yaml").write_text(yaml.safe_dump(cfg))
    proc = run([sys.executable, "-m", "rbctl", "train", str(ctx.out / "fsdp.yaml"), "-o", str(ctx.out / "run"),
                "--nproc", "2", "-q"], ctx)
    done = (ctx.out / "run" / "checkpoints" / "step_000002" / "COMPLETE").exists()
    return proc.returncode == 0 and done, ("root unsharded through backward, layers resharded; rbctl train --nproc 2 "
                                           "with model.fsdp: 2 steps, checkpoint written" if done else tail(proc)), {}


def _gpu_of(key: str, queue) -> dict:
    """A local sweep run that reports the GPU it sees (its UUID) and its environment."""
    import torch

    uuid = str(torch.cuda.get_device_properties(0).uuid) if torch.cuda.is_available() else None
    time.sleep(1.0)  # both runs at once
    return {"key": key, "status": "done", "error": None, "uuid": uuid,
            "visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "local_rank": os.environ.get("LOCAL_RANK")}


def _call(fn, key, queue):
    return fn(key, queue)


class _Quiet:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def __getattr__(self, name):
        return lambda *a, **k: None


def sweep_gpus(ctx: Context):
    """`rbctl ablate --jobs 2`'s local launcher: two GPU runs at once, each on a GPU of its own."""
    from rbctl.sweep.local import execute

    seen = {}
    keys = ["g/seed_0", "g/seed_1"]
    execute(_call, [(k, 1, (_gpu_of, k)) for k in keys], 2, lambda k, r: seen.__setitem__(k, r), _Quiet(),
            alone=set(keys))
    got = [seen[k] for k in keys]
    distinct = len({(r["uuid"], r["visible"]) for r in got}) == 2
    ok = all(r["status"] == "done" and r["local_rank"] == "0" for r in got) and distinct
    return ok, "; ".join(f"{r['key']}: CUDA_VISIBLE_DEVICES {r['visible']}, GPU {r['uuid']}" for r in got), {}
