"""The GPU check of the paper-scale path: bf16-mixed training with the hf engine on CUDA, periodic
evaluation, a checkpoint and an exact resume, the `gpu`-marked tests, and what it all costs.

    python -m scripts.gpu_check                        # CUDA, Qwen3-0.6B sizes: under 8 minutes on one H200
    python -m scripts.gpu_check --device cpu --tiny    # the same path at toy sizes (tests/system/test_gpu_check.py)

Needs torch and transformers (rbctl's own dependencies) and downloads nothing:
1. The model is a randomly initialised Qwen3 built in code from transformers' `Qwen3Config` with
   Qwen3-0.6B's published sizes (28 layers, hidden 1024, 16 query / 8 KV heads of 128, vocabulary
   151,936, tied embeddings), saved as a model folder with a word-level tokenizer over all its ids.
   Each token decodes to `aI\\boxed{I mod 2}`, so a random sample ends in a boxed 0 or 1 and is right
   half the time (answers are 0 and 1): groups are mixed, advantages and gradients are real, and
   the rewards go through rbctl's own grader.
2. Run A trains `steps` steps (precision bf16-mixed, the hf engine, a periodic evaluation every 2
   steps on a held-out file, checkpoints every 2). Run B is the same run interrupted after step 2 and
   resumed: its metrics, evaluation lines and final weights must equal A's bit for bit. If they do
   not, run C (A again) tells a resume defect (A = C) from a device that is not deterministic
   (A ≠ C). Deterministic kernels are asked for (`torch.use_deterministic_algorithms`, warn only:
   the ops that have none are listed).
3. Where vLLM is importable (CUDA only; vLLM's CPU build is tested by tests/vllm/): run V, the same
   model and data with `rollout.engine: vllm` for 3 steps in its own process (vLLM's in-process world
   is one per process). The weights are synced into vLLM after every step; its line reports the
   sampler–trainer log-prob gap on the sampled tokens at each step (`rollout/logprob_diff`), which
   must stay below `VLLM_GAP` (bf16 sampler against a bf16-mixed trainer: kernel rounding only; a
   stale or missing weight gives 0.1–2 nats).
   `pytest -m gpu` (CUDA only; offline: the vLLM tests need vLLM and a cached model, else they skip
   or fail fast).
4. Printed: tokens/s of the rollouts (generated tokens) and of the update (prompt + response tokens
   through forward and backward), peak memory, and the model-FLOPs utilisation of each: 2·N·tokens
   (rollout) and 6·N·tokens (update) with N the parameter count (attention's own FLOPs are not
   counted: an underestimate), over the device's dense bf16 peak (`BF16_PEAK_TFLOPS` by device name,
   else a measured bf16 matmul). Steps after the first are averaged (the first warms up).
Also written to OUT/gpu_check.json. Exit code 0 when every check passed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path


REPO = Path(__file__).resolve().parents[2]

# Qwen3-0.6B's config.json (huggingface.co/Qwen/Qwen3-0.6B): the sizes that set FLOPs and memory.
QWEN3_0_6B = dict(vocab_size=151_936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                  num_attention_heads=16, num_key_value_heads=8, head_dim=128, max_position_embeddings=40_960,
                  rope_theta=1_000_000.0, rms_norm_eps=1e-6, tie_word_embeddings=True)
TINY = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=512, tie_word_embeddings=True)

# The run's sizes. GPU: 64 rollouts of 256 tokens per step after a 133-token prompt, 4 steps (a step
# is ~10 s of mostly `generate` on an H200 by estimate: 256 decoding steps of a 28-layer model).
SIZES = {
    "full": dict(steps=4, prompts=8, group=8, new_tokens=256, prompt_words=120, micro_batch=16, eval_n=4, eval_problems=16),
    "tiny": dict(steps=3, prompts=2, group=4, new_tokens=8, prompt_words=12, micro_batch=0, eval_n=2, eval_problems=4),
}

# Dense bf16 tensor-core peaks in TFLOP/s (NVIDIA datasheets), matched in order as substrings of
# torch.cuda.get_device_name(): "H100 PCIe" before "H100".
BF16_PEAK_TFLOPS = (("H200", 989.0), ("H100 PCIe", 756.0), ("H100", 989.0), ("A100", 312.0), ("L40S", 362.0),
                    ("L4", 121.0), ("B200", 2250.0))
EOS = "<|endoftext|>"
VLLM_GAP = 0.05  # largest mean |log π_vLLM − log π_trainer| per token accepted in bf16 (tests/integration/test_vllm_engine.py)


def build_model_dir(path: Path, sizes: dict, device: str) -> int:
    """A random Qwen3 of `sizes` in bf16 with its tokenizer, saved in `path`; returns its parameter count."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    vocab = {"<unk>": 0, EOS: 1}
    vocab.update({f"a{i}\\boxed{{{i % 2}}}": i for i in range(2, sizes["vocab_size"])})
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", eos_token=EOS, pad_token=EOS)
    cfg = Qwen3Config(**sizes, bos_token_id=1, eos_token_id=1, pad_token_id=1)
    torch.manual_seed(0)
    with torch.device(device):  # initialised where it will run: seconds, not minutes, for 0.6B on a GPU
        model = Qwen3ForCausalLM(cfg).to(torch.bfloat16)
    model.generation_config = GenerationConfig(bos_token_id=1, eos_token_id=1, pad_token_id=1)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return sum(p.numel() for p in model.parameters())  # tied embeddings counted once


def write_data(path: Path, size: dict) -> tuple[Path, Path]:
    """Training and held-out problems: `prompt_words` unknown words each, answers 0 and 1 alternating."""
    path.mkdir(parents=True, exist_ok=True)
    words = " ".join(f"w{j}" for j in range(size["prompt_words"]))

    def write(name, count):
        rows = [{"id": f"{name}-{i}", "problem": f"{words} q{i}", "answer": str(i % 2)} for i in range(count)]
        (path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        return path / f"{name}.jsonl"

    return write("train", 8 * size["prompts"]), write("heldout", size["eval_problems"])


def train_config(model_dir: Path, train_file: Path, eval_file: Path, size: dict, device: str) -> dict:
    return {
        "seed": 0, "steps": size["steps"], "kappa_eff_every": 2, "save_every": 2, "keep_checkpoints": 2,
        "sample_every": 1, "samples_per_log": 2,
        "model": {"name": str(model_dir), "device": device, "dtype": "bfloat16", "precision": "bf16-mixed"},
        "data": {"source": str(train_file), "template": "plain"},
        "rollout": {"engine": "hf", "prompts_per_step": size["prompts"], "group_size": size["group"],
                    "max_new_tokens": size["new_tokens"], "max_batch": size["prompts"] * size["group"]},
        "algo": {"estimator": "grpo", "log_kl": False, "micro_batch_size": size["micro_batch"]},
        "optim": {"lr": 1e-5, "weight_decay": 0.01},
        "eval": {"every": 2, "benchmarks": [f"file:{eval_file}"], "n": size["eval_n"], "limit": None,
                 "max_new_tokens": size["new_tokens"]},
    }


def run_training(cfg_dict: dict, run_dir: Path, stop_after: int | None = None) -> None:
    """Train; with `stop_after`, interrupt after that step (its checkpoint written) and resume."""
    from rbctl.config.train import TrainConfig
    from rbctl.train.loop import train

    cfg = TrainConfig.model_validate(cfg_dict)
    if stop_after is not None:
        def stop(step, metrics):
            if step == stop_after:
                raise KeyboardInterrupt

        try:
            train(cfg, run_dir, progress=False, log=lambda *a: None, on_step=stop)
        except KeyboardInterrupt:
            pass
    train(cfg, run_dir, progress=False, log=lambda *a: None)


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def run_record(run_dir: Path, steps: int) -> dict:
    """What two equal runs must share: metrics (timings aside), evaluation lines, final weights."""
    from safetensors.torch import load_file

    from rbctl.store.rundir import EVAL_LINES, METRICS, MODEL, checkpoint_dir

    metrics = [{k: v for k, v in r.items() if not k.startswith(("time/", "throughput/"))}
               for r in _lines(run_dir / METRICS)]
    weights = load_file(str(checkpoint_dir(run_dir, steps) / MODEL / "model.safetensors"))
    return {"metrics": metrics, "eval": _lines(run_dir / EVAL_LINES), "weights": weights}


def differences(a: dict, b: dict) -> list[str]:
    """Where two run records differ (empty: bit for bit equal)."""
    import torch

    out = []
    for kind in ("metrics", "eval"):
        if len(a[kind]) != len(b[kind]):
            out.append(f"{kind}: {len(a[kind])} vs {len(b[kind])} lines")
            continue
        for ra, rb in zip(a[kind], b[kind]):
            for k in sorted(ra.keys() | rb.keys()):  # a key only one side logged differs too
                if ra.get(k) != rb.get(k):
                    out.append(f"{kind} step {ra.get('step')} {k}: {ra.get(k)} vs {rb.get(k)}")
    wa, wb = a["weights"], b["weights"]
    if wa.keys() != wb.keys():
        return out + ["weights: different tensors"]
    gaps = {k: (w.float() - wb[k].float()).abs().max().item() for k, w in wa.items() if not torch.equal(w, wb[k])}
    if gaps:
        k = max(gaps, key=gaps.get)
        out.append(f"weights: {len(gaps)} tensors differ, most {gaps[k]:.3g} in {k}")
    return out


def bf16_peak(device: str) -> tuple[float, str, float]:
    """(peak TFLOP/s used for MFU, where it came from, measured matmul TFLOP/s): bf16 on a GPU; on
    the CPU, where the check trains in float32 and a CPU without bf16 instructions emulates bf16
    matmuls far below its float32 rate, a float32 matmul (else the MFU could exceed 1)."""
    import torch

    n, iters = (8192, 20) if device == "cuda" else (512, 5)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    a @ b  # warm-up
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        a @ b
    if device == "cuda":
        torch.cuda.synchronize()
    measured = 2 * n ** 3 * iters / (time.perf_counter() - t0) / 1e12
    if device == "cuda":
        name = torch.cuda.get_device_name(0)
        for key, tflops in BF16_PEAK_TFLOPS:
            if key in name:
                return tflops, f"{name} (datasheet dense bf16 peak)", measured
        return measured, f"{name} (not in the table: the measured matmul)", measured
    return measured, "cpu (the measured float32 matmul)", measured


def throughput(run_dir: Path, size: dict, prompt_tokens: int, n_params: int, peak_tflops: float) -> dict:
    """Tokens/s and MFU of the rollout and the update, averaged over the steps after the first."""
    from rbctl.store.rundir import METRICS

    rows = _lines(run_dir / METRICS)
    rows = rows[1:] or rows
    rollouts = size["prompts"] * size["group"]
    rollout_s = statistics.mean(r["time/rollout_s"] for r in rows)
    update_s = statistics.mean(r["time/train_s"] for r in rows)
    generated = statistics.mean(r["response/len_mean"] for r in rows) * rollouts
    updated = rollouts * prompt_tokens + generated  # every row's prompt and response, forward and backward
    peak = peak_tflops * 1e12
    return {
        "rollout_tokens_per_s": generated / rollout_s, "rollout_mfu": 2 * n_params * generated / rollout_s / peak,
        "update_tokens_per_s": updated / update_s, "update_mfu": 6 * n_params * updated / update_s / peak,
        "rollout_s": rollout_s, "update_s": update_s, "generated_tokens": generated, "update_tokens": updated,
    }


def peak_memory(device: str) -> str:
    import torch

    if device == "cuda":
        return (f"{torch.cuda.max_memory_allocated() / 2**30:.1f} GiB allocated, "
                f"{torch.cuda.max_memory_reserved() / 2**30:.1f} GiB reserved")
    import resource

    return f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB resident (process peak)"


def vllm_run(cfg_dict: dict, out: Path, size: dict) -> tuple[bool, str]:
    """Run V: 3 steps with the vLLM engine in a child `rbctl train`; (passed, its report line)."""
    import yaml

    from rbctl.store.rundir import METRICS

    cfg = json.loads(json.dumps(cfg_dict))
    cfg.update(steps=3, save_every=3, kappa_eff_every=0)
    cfg["rollout"].update(engine="vllm", vllm={"gpu_memory_utilization": 0.3})
    cfg["eval"]["every"] = 0
    path = out / "run_v.yaml"
    path.write_text(yaml.safe_dump(cfg))
    proc = subprocess.run([sys.executable, "-m", "rbctl", "train", str(path), "-o", str(out / "run_v"), "-q"],
                          cwd=REPO, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        tail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        return False, f"FAILED (exit {proc.returncode}): {tail[-1] if tail else ''}"
    rows = _lines(out / "run_v" / METRICS)
    gaps = [r.get("rollout/logprob_diff") for r in rows]
    ok = len(rows) == 3 and all(g is not None and g < VLLM_GAP for g in gaps)
    rollout_s = statistics.mean(r["time/rollout_s"] for r in rows[1:] or rows)
    generated = statistics.mean(r["response/len_mean"] for r in rows) * size["prompts"] * size["group"]
    return ok, (f"{len(rows)} steps, sampler-trainer log-prob gap per step {[f'{g:.2g}' for g in gaps]} "
                f"(< {VLLM_GAP}), rollout {generated / rollout_s:,.0f} tokens/s")


def gpu_tests() -> tuple[bool, str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "tests"],
                          cwd=REPO, env=env, capture_output=True, text=True)
    tail = [line for line in proc.stdout.strip().splitlines() if line.strip()]
    return proc.returncode == 0, tail[-1] if tail else f"exit {proc.returncode}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--tiny", action="store_true", help="toy sizes (a 2-layer Qwen3, 3 steps of 8 rollouts)")
    ap.add_argument("--out", type=Path, default=None, help="working folder, kept (default: a temporary one)")
    args = ap.parse_args(argv)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS, before CUDA starts
    from rbctl.console import quiet_libraries

    quiet_libraries()
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: no CUDA device here; run with --device cpu --tiny for the CPU check", file=sys.stderr)
        return 2
    before = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        return _check(args)
    finally:  # as the caller had it (a test runs this in its own process)
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])


def _check(args) -> int:
    import torch

    size = SIZES["tiny" if args.tiny else "full"]
    arch = TINY if args.tiny else QWEN3_0_6B
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        n_params = build_model_dir(out / "policy", arch, args.device)
        train_file, eval_file = write_data(out / "problems", size)
        cfg = train_config(out / "policy", train_file, eval_file, size, args.device)
        from transformers import AutoTokenizer

        from rbctl.tasks.prompting import MATH_INSTRUCTION, encode_prompts

        tok = AutoTokenizer.from_pretrained(out / "policy")
        prompt_tokens = len(encode_prompts(tok, [json.loads(train_file.read_text().splitlines()[0])["problem"]],
                                           "plain", MATH_INSTRUCTION)[0])
        peak_tflops, peak_from, matmul = bf16_peak(args.device)
        if args.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            t0 = time.perf_counter()
            run_training(cfg, out / "run_a")
            a_s = time.perf_counter() - t0
            memory = peak_memory(args.device)
            run_training(cfg, out / "run_b", stop_after=2)
        nondeterministic = sorted({str(w.message).split("\n")[0][:160] for w in caught
                                   if "deterministic" in str(w.message)})
        rec_a, rec_b = run_record(out / "run_a", size["steps"]), run_record(out / "run_b", size["steps"])
        diff_ab = differences(rec_a, rec_b)
        diff_ac = None
        if diff_ab:  # a resume defect, or a device that does not repeat itself? Run A again.
            run_training(cfg, out / "run_c")
            diff_ac = differences(rec_a, run_record(out / "run_c", size["steps"]))
        perf = throughput(out / "run_a", size, prompt_tokens, n_params, peak_tflops)
        from rbctl.store.rundir import EVAL_DIR, EVAL_LINES, METRICS, PERIODIC_DIR, SUMMARY

        evals = _lines(out / "run_a" / EVAL_LINES)
        summary = json.loads(next((out / "run_a" / EVAL_DIR / PERIODIC_DIR).rglob(SUMMARY)).read_text())
        finite = all(r["nonfinite/skipped"] == 0 for r in _lines(out / "run_a" / METRICS))
        eval_steps = sorted({r["step"] for r in evals})
        want_steps = sorted({0, *range(2, size["steps"] + 1, 2), size["steps"]})
        import importlib.util

        vllm_here = args.device == "cuda" and importlib.util.find_spec("vllm") is not None
        vllm_ok, vllm_line = vllm_run(cfg, out, size) if vllm_here else (True, "skipped (needs CUDA and vLLM)")
        tests_ok, tests_line = gpu_tests() if args.device == "cuda" else (True, "skipped (no CUDA)")

    resume = "exact (metrics, evaluation lines and weights bit for bit)" if not diff_ab else (
        f"DEFECT: the resumed run differs ({diff_ab[0]}) while two uninterrupted runs agree" if not diff_ac else
        f"not bit-exact, but neither are two uninterrupted runs (device nondeterminism: {diff_ac[0]})")
    resume_ok = not diff_ab or bool(diff_ac)
    checks = {"training finite": finite, "periodic evaluation at steps " + str(want_steps): eval_steps == want_steps,
              "checkpoint and resume": resume_ok, "vLLM engine (run V)": vllm_ok, "pytest -m gpu": tests_ok}
    name = "Qwen3 (toy sizes)" if args.tiny else "Qwen3 (Qwen3-0.6B sizes)"
    lines = [
        f"device: {peak_from}, {peak_tflops:.3g} TFLOP/s for MFU (a matmul here: {matmul:.3g} TFLOP/s)",
        f"model: {name}, {n_params / 1e6:.1f}M parameters, random weights, precision bf16-mixed, engine hf",
        f"rollout: {perf['generated_tokens']:.0f} tokens in {perf['rollout_s']:.2f} s/step = "
        f"{perf['rollout_tokens_per_s']:,.0f} tokens/s, MFU {perf['rollout_mfu']:.2%}",
        f"update: {perf['update_tokens']:.0f} tokens in {perf['update_s']:.2f} s/step = "
        f"{perf['update_tokens_per_s']:,.0f} tokens/s, MFU {perf['update_mfu']:.2%}",
        f"peak memory (run A): {memory}",
        f"periodic evaluation: steps {eval_steps}; engine {summary['protocol']['engine']}, "
        f"max_batch_tokens {summary['protocol']['max_batch_tokens']}",
        f"resume: {resume}",
        f"vLLM engine (run V): {vllm_line}",
        f"pytest -m gpu: {tests_line}",
        f"ops without a deterministic kernel: {'; '.join(nondeterministic) or 'none reported'}",
        f"run A took {a_s:.0f} s; all: {time.perf_counter() - t_start:.0f} s",
    ]
    lines += [f"{'ok  ' if ok else 'FAIL'} {check}" for check, ok in checks.items()]
    print("\n".join(lines))
    result = {"lines": lines, "checks": checks, "throughput": perf, "n_params": n_params, "peak_tflops": peak_tflops,
              "resume_differences": diff_ab, "rerun_differences": diff_ac}
    if args.out is not None:
        (args.out / "gpu_check.json").write_text(json.dumps(result, indent=2))
    return 0 if all(checks.values()) else 1
