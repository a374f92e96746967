"""torch's float32 matmul against oneDNN's (`model.cpu_linear`) on a model's Linear shapes, on this CPU.

    python -m scripts.bench_cpu_linear [--threads 1 2] [--rows 16 1024] [--hidden 576 --intermediate 1536
                                       --kv 192 --vocab 49152]

The default shapes are SmolLM2-135M's (q/o 576→576, k/v 576→192, gate/up 576→1536, down 1536→576, LM
head 576→49152); --rows are the rows of a call: 16 is a decode step of 16 sequences, 1024 a training
forward of 16 × 64 response tokens. Printed per thread count and shape: GFLOP/s of the forward (x Wᵀ)
and of the two backward products (g W, gᵀ x) under each kernel (median of 10 calls after 3 warm-up
calls), and the largest relative difference between the kernels' outputs.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from rbctl.rollout.cpu_linear import cpu_vendor, onednn_available, onednn_gemm


def rate(fn, flops: float, calls: int = 10) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return flops / statistics.median(times) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m scripts.bench_cpu_linear", description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rows", type=int, nargs="+", default=[16, 1024])
    ap.add_argument("--hidden", type=int, default=576)
    ap.add_argument("--intermediate", type=int, default=1536)
    ap.add_argument("--kv", type=int, default=192)
    ap.add_argument("--vocab", type=int, default=49152)
    args = ap.parse_args()
    if not onednn_available():
        raise SystemExit("this torch build has no oneDNN (torch.backends.mkldnn)")
    h, i = args.hidden, args.intermediate
    shapes = {"q/o": (h, h), "k/v": (h, args.kv), "gate/up": (h, i), "down": (i, h), "lm_head": (h, args.vocab)}
    print(f"CPU vendor {cpu_vendor() or 'unknown'}, torch {torch.__version__}, ISA {torch.backends.cpu.get_cpu_capability()}")
    print("| threads | rows | layer (in→out) | forward GFLOP/s torch / oneDNN | g·W torch / oneDNN | gᵀ·x torch / oneDNN | max rel. diff |")
    print("|---|---|---|---|---|---|---|")
    g = torch.Generator().manual_seed(0)
    for threads in args.threads:
        torch.set_num_threads(threads)
        for n in args.rows:
            for name, (fan_in, fan_out) in shapes.items():
                x, w = torch.randn(n, fan_in, generator=g), torch.randn(fan_out, fan_in, generator=g)
                up = torch.randn(n, fan_out, generator=g)
                flops = 2.0 * n * fan_in * fan_out
                pairs = [(lambda: x @ w.t(), lambda: onednn_gemm(x, w, None)),
                         (lambda: up @ w, lambda: onednn_gemm(up, w.t(), None)),
                         (lambda: up.t() @ x, lambda: onednn_gemm(up.t(), x.t(), None))]
                cells = [f"{rate(a, flops):.0f} / {rate(b, flops):.0f}" for a, b in pairs]
                ref = x @ w.t()
                diff = ((onednn_gemm(x, w, None) - ref).abs().max() / ref.abs().max()).item()
                print(f"| {threads} | {n} | {name} ({fan_in}→{fan_out}) | " + " | ".join(cells) + f" | {diff:.1e} |")


if __name__ == "__main__":
    raise SystemExit(main())
