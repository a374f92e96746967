"""Grouped-query attention on the CPU with each KV head held once (`kv_heads_once`).

transformers' sdpa attention repeats a grouped-query model's key and value heads up to its query
heads (`repeat_kv`) whenever it is given a mask, as every padded batch is, unless the environment
sets TRANSFORMERS_SDPA_FORCE_GQA=1: then it hands them over as they are, with `enable_gqa=True`,
and torch's CPU attention kernel reads KV head h // g for query head h in place. The outputs are the
same bit for bit; the keys' and values' gradients are summed over their g query heads in another
order (float rounding, ~1e-7 relative); autograd keeps the keys and values for backward once instead
of g times (tests/unit/test_gqa.py). For SmolLM2-135M (9 query heads, 3 KV heads) in the TRL bench's
training forward (16 rows of 64 response tokens after 4 shared prompts), that is the largest saving in
what a step holds for backward: 3,638 to 3,201 MiB (the reward-budgeting study's performance journal,
studies/reward_budgeting/docs/performance.md, "Against TRL on a real model").

Only on the CPU: on GPUs the fastest kernels take a mask or grouped heads, not always both.
"""

from __future__ import annotations

import contextlib
import os

import torch

VAR = "TRANSFORMERS_SDPA_FORCE_GQA"  # read by transformers.integrations.sdpa_attention at every call


def _torch_has_enable_gqa() -> bool:
    return torch.__version__ >= (2, 5)  # sdpa's enable_gqa came in torch 2.5; a TorchVersion compares to a tuple


@contextlib.contextmanager
def kv_heads_once(device: torch.device | str):
    """Inside, transformers' sdpa attention passes grouped KV heads unrepeated (module docstring), for a
    forward on the CPU; elsewhere, or where the variable is already set by the user, nothing changes."""
    if torch.device(device).type != "cpu" or VAR in os.environ or not _torch_has_enable_gqa():
        yield
        return
    os.environ[VAR] = "1"
    try:
        yield
    finally:
        os.environ.pop(VAR, None)
