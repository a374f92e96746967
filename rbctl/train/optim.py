"""The optimizer and learning-rate schedule of a run (`optim.*`).

AdamW runs torch's fused kernel where every parameter is a floating tensor on the CPU or a CUDA
device (else its multi-tensor "foreach" implementation). On SmolLM2-135M the fused step took
0.06–0.09 s against 0.50–0.68 s for foreach and 0.74–1.3 s for torch's default on CPU (a loop over
tensors), at 1 and 2 threads. It computes the same update in a different order: its weights differ
from the loop's by float rounding from the first step (tests/unit/test_optim.py bounds the difference),
so results measured before 2026-12-01 (foreach, bit-identical to the loop) are not reproduced bit
for bit by later commits.
"""

from __future__ import annotations

import math

import torch

from rbctl.config.train import OptimCfg


def fused_ok(params: list[torch.Tensor]) -> bool:
    """torch's fused AdamW takes these: floating tensors, all on one CPU or CUDA device."""
    devices = {p.device for p in params}
    return (len(devices) == 1 and next(iter(devices)).type in ("cpu", "cuda")
            and all(p.is_floating_point() for p in params))


def make_optimizer(params: list[torch.Tensor], o: OptimCfg, steps: int) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW (fused where `fused_ok`, else foreach) with the `optim` section's settings and its
    LambdaLR schedule (`lr_factor`) over a run of `steps` steps."""
    impl = {"fused": True} if fused_ok(params) else {"foreach": True}
    opt = torch.optim.AdamW(params, lr=o.lr, betas=(o.beta1, o.beta2), weight_decay=o.weight_decay, **impl)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(o, steps, s))


def schedule_steps(o: OptimCfg, steps: int) -> int:
    """The steps the cosine schedule spans: `optim.schedule_steps`, pinned by `rbctl train --extend`
    to the horizon a run started with, else `steps`."""
    return o.schedule_steps or steps


def schedule_record(o: OptimCfg, steps: int) -> dict:
    """Everything the learning rate of step s depends on (the checkpoint keeps it; a resume checks it)."""
    return {"lr": o.lr, "schedule": o.schedule, "warmup_steps": o.warmup_steps,
            "steps": schedule_steps(o, steps) if o.schedule == "cosine" else None}  # a constant schedule ignores steps


def lr_factor(o: OptimCfg, steps: int, s: int) -> float:
    """The lr multiplier of the optimizer step s (0-based) of a run of `steps` steps: linear warm-up
    over `optim.warmup_steps`, then constant, or cosine from 1 towards 0 at the horizon H =
    `schedule_steps`. Steps past the horizon (a run extended with --extend) keep the factor of its
    last step, s = H − 1: the schedule continues from where it was instead of stretching the steps
    already run."""
    horizon = schedule_steps(o, steps)
    if o.schedule == "cosine":
        s = min(s, horizon - 1)
    if o.warmup_steps and s < o.warmup_steps:
        return (s + 1) / o.warmup_steps
    if o.schedule == "cosine":
        span = max(1, horizon - o.warmup_steps)
        return 0.5 * (1 + math.cos(math.pi * min(1.0, (s - o.warmup_steps) / span)))
    return 1.0
