"""The torch.distributed world the in-process vLLM engine joins (`rbctl.rollout.vllm.engine_world`), as
vLLM's external_launcher executor reads it from the environment when it is built: in one process a
world of its own whatever an enclosing launcher left there; in each rank of `rbctl train --nproc N`
that rank of the training world, on that rank's device. The environment is the process's own again
after construction. vLLM is not installed here: a stand-in `vllm` module records what it saw; each
case runs in processes of its own (gloo on the CPU), so that no process group of another test is in
the way."""

from __future__ import annotations

import importlib.machinery
import json
import os
import socket
import sys
import types

import torch

WORLD = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _build_and_record(out: str, name: str) -> None:
    """Build the engine's LLM over a stand-in `vllm` module; write what the stand-in saw of the
    environment and of torch.distributed at construction, and the environment after it."""
    import torch.distributed as dist

    from rbctl.rollout.vllm import VLLMEngine

    seen: dict = {}

    class LLM:
        def __init__(self, **kwargs):
            seen["env"] = {k: os.environ.get(k) for k in WORLD}
            seen["backend"] = kwargs["distributed_executor_backend"]
            seen["initialized"] = dist.is_initialized()

    vllm = types.ModuleType("vllm")
    vllm.__spec__ = importlib.machinery.ModuleSpec("vllm", None)
    vllm.LLM = LLM
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = types.SimpleNamespace(is_cpu=lambda: False, is_sleep_mode_available=lambda: True,
                                                       device_type="cuda")
    sys.modules.update({"vllm": vllm, "vllm.platforms": platforms})
    before = {k: os.environ.get(k) for k in WORLD}
    VLLMEngine._build_llm("model", 0.5, False, "float32", 0, None)
    seen["before"], seen["after"] = before, {k: os.environ.get(k) for k in WORLD}
    with open(os.path.join(out, f"{name}.json"), "w") as f:
        json.dump(seen, f)


def _one_process(index: int, out: str) -> None:
    # what a Slurm step or an enclosing torchrun leaves to a single process that is no rank of a world
    os.environ.update(RANK="3", LOCAL_RANK="1", WORLD_SIZE="4", MASTER_ADDR="10.0.0.9", MASTER_PORT="29500")
    _build_and_record(out, "single")


def _rank(rank: int, world: int, port: int, out: str) -> None:
    from rbctl.train.distributed import init_from_env

    # what torchrun gives each rank of `rbctl train --nproc 2`; the trainer joins the world first
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(world))
    os.environ.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
    ctx = init_from_env(1.0)
    assert ctx.world == world
    _build_and_record(out, f"rank{rank}")
    ctx.barrier()
    torch.distributed.destroy_process_group()


def test_one_process_builds_vllm_in_a_world_of_its_own_and_keeps_its_environment(tmp_path):
    torch.multiprocessing.spawn(_one_process, args=(str(tmp_path),), nprocs=1, join=True)
    seen = json.loads((tmp_path / "single.json").read_text())
    assert seen["backend"] == "external_launcher" and not seen["initialized"]
    env = seen["env"]
    # rank 0 of 1 on this host, on a port of its own: not rank 3 of the world of one it would start
    assert {k: env[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR")} == {
        "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}
    assert env["MASTER_PORT"] != "29500" and 0 < int(env["MASTER_PORT"]) < 65536
    assert seen["after"] == seen["before"] == {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4",
                                               "MASTER_ADDR": "10.0.0.9", "MASTER_PORT": "29500"}


def test_each_training_rank_builds_vllm_as_that_rank_on_its_own_device(tmp_path):
    """Two ranks of a torchrun world: vLLM builds its groups on the trainer's process group (it starts
    none once one exists), so each engine is told its own rank and device, never rank 0 of 1 (which
    would put every rank's engine on GPU 0); torchrun's rendezvous variables are left as they are."""
    port = _free_port()
    torch.multiprocessing.spawn(_rank, args=(2, port, str(tmp_path)), nprocs=2, join=True)
    for rank in (0, 1):
        seen = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert seen["backend"] == "external_launcher" and seen["initialized"]
        torchrun = {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": str(port)}
        assert seen["env"] == torchrun
        assert seen["after"] == seen["before"] == torchrun
