"""Training precision (`model.precision`): which dtype the trainable parameters live in and whether
forward passes run under bf16 autocast.

- `bf16-mixed` (the default on CUDA): trainable parameters in float32 (fp32 master weights, AdamW
  state in float32), forward passes under `torch.autocast(device, bfloat16)`. Frozen weights (a LoRA
  base, the KL reference) stay in `model.dtype`.
- `fp32` (the default on CPU): float32 parameters, no autocast.
- `bf16-pure`: parameters as loaded (`model.dtype`), no autocast. AdamW on bf16 weights loses every
  update smaller than half a bf16 ulp (|Δw| < 2⁻⁹·|w|): at lr 1e-6 on weights of magnitude ~0.02, ~2%
  of the weights change at all in 10 steps (fp32 master weights: 99.99%). Full-parameter training in
  this mode is warned about (`PURE_BF16_WARNING`).

Sampling runs in the training precision: the `hf` engine generates under the same autocast as the
training forward, so the behaviour policy and the "old" log-probs are one distribution computed one
way (up to kernel rounding between a KV-cached and a full forward). vLLM samples in its own dtype,
and the hf engine with `rollout.dtype: bfloat16` from a bf16 replica; their mismatch with the
trainer is measured (`rollout/logprob_diff`) and corrected by `algo.tis_cap`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

PURE_BF16_WARNING = ("warning: model.precision bf16-pure with full-parameter AdamW: updates under half a bf16 ulp "
                     "(|Δw| < 2^-9·|w|, e.g. lr 1e-6) round away and most weights never change; "
                     "use bf16-mixed (fp32 master weights)")


@dataclass(frozen=True)
class Precision:
    mode: str  # resolved: "bf16-mixed", "fp32" or "bf16-pure"
    device_type: str

    @property
    def autocast(self) -> bool:
        return self.mode == "bf16-mixed"

    @property
    def master_fp32(self) -> bool:
        """Trainable parameters are kept in float32."""
        return self.mode != "bf16-pure"

    def context(self):
        """The autocast context of every forward pass (training, reference, κ_eff, hf sampling)."""
        if not self.autocast:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=torch.bfloat16)


def resolve_precision(precision: str, device: torch.device) -> Precision:
    """`auto` = bf16-mixed on CUDA, fp32 elsewhere."""
    mode = precision if precision != "auto" else ("bf16-mixed" if device.type == "cuda" else "fp32")
    return Precision(mode, device.type)


def prepare_trainable(model, prec: Precision, lora: bool, log=print) -> None:
    """Cast the trainable parameters to float32 (master weights) unless pure bf16; warn about pure
    low-precision full-parameter training."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    if prec.master_fp32:
        for p in trainable:
            if p.dtype != torch.float32:
                p.data = p.data.float()
    elif not lora and any(p.dtype in (torch.bfloat16, torch.float16) for p in trainable):
        log(PURE_BF16_WARNING)
