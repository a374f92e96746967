"""Which kernel runs a float32 model's Linear layers on the CPU (`model.cpu_linear`, `rbctl eval --cpu-linear`).

torch's float32 matmul on x86 is MKL's sgemm. On AMD CPUs MKL takes its generic code path: on a
2-core AMD EPYC (AVX-512), one thread, SmolLM2-135M's training shapes (1024 rows) ran at 77–96 GFLOP/s
under MKL and 134–218 under oneDNN's float32 gemm (also in every torch CPU build), its decode shapes
(16 rows) at 15–83 and 17–174 (`python -m scripts.bench_cpu_linear`; the reward-budgeting study's
performance journal, studies/reward_budgeting/docs/performance.md, "How each framework runs the
matched work", has the date and machine). The
work and the precision are the same: float32 inputs, weights, accumulation and outputs; results
differ from MKL's by summation-order rounding (≤ 1.1e-6 of the largest output there).

- `torch`: every Linear calls `torch.nn.functional.linear`.
- `onednn`: a model's Linear layers call oneDNN (`torch.ops.mkldnn._linear_pointwise`) for float32 CPU
  inputs outside autocast, the input's gradient by oneDNN too and the weight's by torch.mm
  (`_OneDNNLinear`); anything else (bf16, CUDA, autocast) falls back to `torch.nn.functional.linear`
  at the call.
- `auto`: `onednn` for a pretrained model on an AMD CPU, else `torch`. The built-in policies stay on
  `torch`: their layers are 64–1024 wide, where oneDNN's ~20 µs call overhead costs more than it saves
  at decode time, and their documented results stay reproducible as they were measured.
"""

from __future__ import annotations

import contextlib
import functools

import torch
import torch.nn.functional as F

from rbctl.config.eval import CPU_LINEAR_KERNELS
from rbctl.errors import UserError


@functools.cache
def cpu_vendor() -> str:
    """The CPU's vendor id (/proc/cpuinfo), e.g. "AuthenticAMD"; "" where it cannot be read."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def onednn_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def resolve_cpu_linear(kernel: str, device: torch.device, builtin: bool) -> str:
    """`auto` → "onednn" for a pretrained model (not `builtin`) on an AMD CPU with oneDNN, else "torch"."""
    if kernel not in CPU_LINEAR_KERNELS:
        raise UserError(f"model.cpu_linear: {kernel!r} is not one of {', '.join(CPU_LINEAR_KERNELS)}")
    if kernel == "onednn" and not onednn_available():
        raise UserError("model.cpu_linear onednn: this torch build has no oneDNN (torch.backends.mkldnn); use torch")
    if kernel != "auto":
        return kernel
    amd = cpu_vendor() == "AuthenticAMD"
    return "onednn" if device.type == "cpu" and not builtin and amd and onednn_available() else "torch"


def onednn_gemm(x, w, b):
    """x Wᵀ + b by oneDNN's float32 gemm (no autograd; strided x and W are read as they are)."""
    return torch.ops.mkldnn._linear_pointwise(x, w, b, "none", [], "")


class _OneDNNLinear(torch.autograd.Function):
    """y = x Wᵀ + b, forward and backward by oneDNN's float32 gemm."""

    @staticmethod
    def forward(ctx, x, w, b):
        ctx.save_for_backward(x, w)
        ctx.has_bias = b is not None
        return onednn_gemm(x, w, b)

    @staticmethod
    def backward(ctx, grad):
        """gx = g W by oneDNN; gW = gᵀ x by torch.mm, whose gemm reads a transposed operand in place.
        oneDNN wants its input contiguous: given gᵀ it first copies it transposed (for the LM head's
        [1008, 49,152] gradient of a SmolLM2 step, ~2.5 s on one thread, then a ~7 s gemm), and given
        the strided view of a last-position slice (`logits_to_keep`) it fell back to a reference
        kernel (~4 s for 4 rows). Both operands are made contiguous rows first (a copy only where
        they are not). The same products; the rounding is torch.mm's for gW."""
        x, w = ctx.saved_tensors
        g = grad.reshape(-1, grad.shape[-1]).contiguous()
        gx = gw = gb = None
        if ctx.needs_input_grad[0]:
            gx = onednn_gemm(g, w.t(), None).reshape(x.shape)  # g W
        if ctx.needs_input_grad[1]:
            gw = torch.mm(g.t(), x.reshape(-1, x.shape[-1]).contiguous())  # gᵀ x
        if ctx.has_bias and ctx.needs_input_grad[2]:
            gb = g.sum(0)
        return gx, gw, gb


def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, packed: torch.Tensor | None = None) -> torch.Tensor:
    """`F.linear(x, w, b)`, by oneDNN where x and w are float32 CPU tensors outside autocast; without
    autograd, from `packed` (w in oneDNN's blocked layout, `packed_weights`) where given."""
    if (x.dtype != torch.float32 or w.dtype != torch.float32 or not x.is_cpu or not w.is_cpu or x.numel() == 0
            or (b is not None and b.dtype != torch.float32) or torch.is_autocast_enabled("cpu")):
        return F.linear(x, w, b)
    if torch.is_grad_enabled() and (x.requires_grad or w.requires_grad or (b is not None and b.requires_grad)):
        return _OneDNNLinear.apply(x, w, b)
    return onednn_gemm(x, w if packed is None else packed, b)


class OneDNNLinear(torch.nn.Linear):
    """An `nn.Linear` whose forward is `linear` above (what `use_cpu_linear` swaps a layer's class to);
    inside `packed_weights`, calls without autograd read oneDNN's blocked copy of the weight."""

    _packed = None  # oneDNN's blocked layout of the weight while `packed_weights` holds

    def forward(self, x):
        return linear(x, self.weight, self.bias, self._packed)


@contextlib.contextmanager
def packed_weights(model: torch.nn.Module, rows: int):
    """Inside, the no-grad forwards of `model`'s oneDNN layers read each weight in oneDNN's blocked
    layout, reordered once on entry (`torch.ops.mkldnn._reorder_linear_weight`, for `rows` input
    rows) instead of at every call: a decoding loop of SmolLM2 calls each layer once per token on
    16 rows, where that per-call reorder cost ~25% of the gemm (`python -m scripts.bench_cpu_linear`).
    The same gemm reads the same values: outputs are bit-identical for 4 rows or more (1–3 rows
    take another kernel: rounding apart). The weights must not change inside (the sampler's do
    not); the blocked copies (the float32 weights' size again) are dropped on exit."""
    layers = [m for m in model.modules()
              if type(m) is OneDNNLinear and m.weight.dtype == torch.float32 and m.weight.is_cpu]
    try:
        with torch.no_grad():
            for m in layers:
                m._packed = torch.ops.mkldnn._reorder_linear_weight(m.weight.detach(), max(1, rows))
        yield len(layers)
    finally:
        for m in layers:
            m._packed = None


def use_cpu_linear(model: torch.nn.Module, kernel: str) -> int:
    """Route the plain `nn.Linear` layers of `model` through `kernel` ("torch" or "onednn"; resolved);
    returns how many layers run on oneDNN. The swap keeps the layers' parameters and state dict."""
    n = 0
    for module in model.modules():
        if kernel == "onednn" and type(module) is torch.nn.Linear:
            module.__class__ = OneDNNLinear
        elif kernel == "torch" and type(module) is OneDNNLinear:
            module.__class__ = torch.nn.Linear
        n += type(module) is OneDNNLinear
    return n
