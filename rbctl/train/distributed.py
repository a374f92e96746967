"""Data-parallel training with torch.distributed: one process per device, prompts split across ranks.

Launch with `torchrun --nproc-per-node N -m rbctl train CONFIG -o RUN_DIR` (or `rbctl train
--nproc N`, which runs that command). Each rank samples the rollouts of its share of the step's
P prompts — a prompt's G rollouts never split across ranks — then rewards are gathered so that
advantages (batch whitening included) and metrics are computed on the global batch, and DDP (or
FSDP2 with `model.fsdp`: `rbctl.train.parallel`) averages gradients. Loss normalisers (token and
sequence counts) are global, and each rank's loss is scaled by the world size, so the update
equals a single-process step on the same global batch.
Only rank 0 writes the run directory.

Waiting: every collective on the training process group (NCCL on GPUs, gloo on CPU) times out after
`dist_timeout_min` (NCCL's own default, 10 minutes, is shorter than a checkpoint write or a rank's
longer rollouts at paper scale). Rank 0 alone evaluates (step 0, periodic, final) and writes the
run directory; the other ranks wait for it at `DistContext.barrier`, which runs on a second, gloo
group with a timeout of `WAIT_TIMEOUT`: an evaluation of any length leaves no NCCL collective
pending, so it never runs into NCCL's watchdog. If rank 0 dies, torchrun ends the other ranks.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from rbctl.errors import UserError


# How long a rank waits at `DistContext.barrier` for rank 0's evaluation or checkpoint write: an
# evaluation of Qwen3-8B on 100 problems × 16 samples of 16k tokens is hours on one GPU.
WAIT_TIMEOUT = timedelta(hours=24)


@dataclass(frozen=True)
class DistContext:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    wait_group: object = None  # the gloo group `barrier` waits on (None: the default group)

    @property
    def enabled(self) -> bool:
        return self.world > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def shard(self, n: int) -> slice:
        """This rank's contiguous share of n items (n must divide evenly)."""
        if n % self.world:
            raise UserError(f"rollout.prompts_per_step={n} must be divisible by the number of processes ({self.world})")
        k = n // self.world
        return slice(self.rank * k, (self.rank + 1) * k)

    def sum(self, *values: float) -> list[float]:
        """Sum scalars over ranks (identity on one process)."""
        if not self.enabled:
            return list(values)
        t = torch.tensor(values, dtype=torch.float64, device=self.comm_device)
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return t.tolist()

    def gather_rows(self, x: torch.Tensor) -> torch.Tensor:
        """Concatenate equal-shaped tensors from every rank along dim 0, in rank order."""
        if not self.enabled:
            return x
        xs = [torch.empty_like(x, device=self.comm_device) for _ in range(self.world)]
        dist.all_gather(xs, x.to(self.comm_device))
        return torch.cat(xs).to(x.device)

    def broadcast(self, obj):
        """Rank 0's `obj` on every rank (pickled; for small objects)."""
        if not self.enabled:
            return obj
        out = [obj]
        dist.broadcast_object_list(out, src=0, device=self.comm_device)
        return out[0]

    @property
    def comm_device(self) -> torch.device:
        return torch.device("cuda", self.local_rank) if dist.get_backend() == "nccl" else torch.device("cpu")

    def barrier(self) -> None:
        """Wait until every rank is here: for rank 0's evaluation or checkpoint write, on the gloo
        wait group (module docstring), so that no training collective is pending meanwhile."""
        if self.enabled:
            dist.barrier(group=self.wait_group)


def init_from_env(timeout_min: float) -> DistContext:
    """Join the process group torchrun describes in the environment (a single process otherwise);
    its collectives time out after `timeout_min` minutes (`dist_timeout_min`)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistContext()
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(local)
        dist.init_process_group(backend=backend, timeout=timedelta(minutes=timeout_min))
    wait_group = dist.new_group(backend="gloo", timeout=max(WAIT_TIMEOUT, timedelta(minutes=timeout_min)))
    return DistContext(rank=rank, world=world, local_rank=local, wait_group=wait_group)


def torchrun_command(nproc: int, argv: list[str]) -> list[str]:
    """The torchrun command that runs `rbctl <argv>` on `nproc` local processes."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", "-m", "rbctl", *argv]


def launch(nproc: int, argv: list[str]) -> int:
    return subprocess.call(torchrun_command(nproc, argv))
