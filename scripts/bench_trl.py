"""rbctl against TRL's `GRPOTrainer`, side by side on the embedded default's GRPO workload.

    python -m scripts.bench_trl [--steps 12] [--rounds 3] [--threads 1] [--log-kl]

TRL is an optional extra (`pip install -e ".[trl]"`), not a dependency of rbctl.

How the two runs are matched (the workload is read from configs/quickstart.yaml, the one source of
truth, and mapped onto `GRPOConfig`):
1. Same policy and tokenizer: the cached warm-started built-in model (`rbctl.tasks.builtin.warm_started`),
   loaded from disk by each framework; same prompts (the built-in task's train split, prompt text
   `rbctl.tasks.links.format_problem`), same reward (`rbctl.tasks.links.check`, 1 if exact else 0).
2. Same step: P prompts × G rollouts, max new tokens, temperature, top_p, one optimizer step per
   batch (`num_iterations=1`), AdamW at the same lr, betas, weight decay and gradient clipping,
   constant schedule; the PPO clip ε_low/ε_high; GRPO advantages and per-sequence loss averaging
   (rbctl `seq-mean-token-mean` = TRL `loss_type="grpo"`, `scale_rewards="group"`).
3. No KL in either: TRL `beta=0` (no reference model) and rbctl `algo.log_kl=false`, unless
   `--log-kl` keeps rbctl's reference forward (then rbctl does one more pass than TRL).
   rbctl still measures κ_eff every step (`kappa_eff_every: 1`): one extra forward pass TRL lacks.
4. TRL: no vLLM, no gradient checkpointing, no eval, no saving, `report_to=[]`, `use_cpu=True`,
   logging once at the end. rbctl: no periodic eval; one checkpoint at the last step (excluded).
5. Each framework runs in its own subprocess (so peak RSS is its own), the two alternating for
   `--rounds` rounds, with the same torch threads (and OMP/MKL threads). The first `--warmup`
   steps and the last step of every subprocess are excluded; figures are medians over the rest.
Left different: the order in which prompts are drawn (each framework's own sampler), the random
draws, and TRL's std guard (std + 1e-4 against rbctl's + 1e-6); the mean reward and the tokens per
step are printed to show that the two workloads match.

What is measured, per step: wall time between the ends of consecutive optimizer steps; the
rollout phase (prompts → samples → rewards → advantages: rbctl's `time/rollout_s`, TRL's
`_generate_and_score_completions`); the training phase = step − rollout; rollout tokens =
generated tokens up to and including EOS; training tokens = prompt + response tokens (no padding).
Training FLOP/s = (6·N·T + 2·N·T·k) / training-phase seconds, N the parameter count, k the extra
no-grad forward passes over the batch (rbctl: κ_eff, + the reference with --log-kl; TRL: 0), and T
either the training tokens ("model" FLOP/s: the work the batch asks for) or the tokens actually run
through the model ("executed": rbctl runs each prompt once per group); each is given as a fraction
of a 2048×2048 @ 2048×2048 float32 `torch.mm` (2·2048³ FLOP) timed in the same run, same threads.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "configs" / "quickstart.yaml"
FRAMEWORKS = ("rbctl", "trl")
MATMUL_N = 2048  # large enough that torch.mm runs near the machine's peak float32 FLOP/s


# --- the workload --------------------------------------------------------------------------------


def workload_config(steps: int, threads: int, log_kl: bool):
    """The quickstart config as benchmarked: no periodic eval, one checkpoint (at the last step)."""
    from rbctl.config.train import load_train_config

    overrides = ["eval.every=0", f"steps={steps}", f"save_every={steps}", f"threads={threads}",
                 f"algo.log_kl={str(log_kl).lower()}"]
    return load_train_config(QUICKSTART, overrides)


def extra_forward_passes(cfg, framework: str) -> float:
    """No-grad forward passes over the whole batch per step, besides the training forward/backward."""
    if framework == "trl":
        return 0.0  # beta=0 (no reference), num_iterations=1 (no separate old log-prob pass)
    ref = float(cfg.algo.kl_coef > 0 or cfg.algo.log_kl)
    return ref + (1.0 / cfg.kappa_eff_every if cfg.kappa_eff_every else 0.0)


def _set_threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def _param_count(model) -> int:
    return sum(p.numel() for p in model.parameters())  # tied embeddings are counted once


# --- workers: one framework in one process -------------------------------------------------------


def run_rbctl(steps: int, threads: int, log_kl: bool) -> dict:
    from rbctl.tasks.builtin import warm_started
    from rbctl.tasks.prompting import encode_prompts
    from rbctl.rollout.kvcache import prefix_cache_supported
    from rbctl.train.training_data import load_training_problems, task_spec, warm_start_spec
    from rbctl.train.sampling import prompt_order
    from rbctl.train.loop import train

    _set_threads(threads)
    cfg = workload_config(steps, threads, log_kl)
    path = warm_started(task_spec(cfg), warm_start_spec(cfg))
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation=ATTN_IMPLEMENTATION)
    n_params, shared = _param_count(model), prefix_cache_supported(model)
    del model
    problems = load_training_problems(cfg)
    r = cfg.rollout
    ends, rows = [], []

    def on_step(step, m):
        ends.append(time.perf_counter())
        idx = prompt_order(cfg.seed, step, r.prompts_per_step, len(problems))
        prompt_tokens = sum(map(len, encode_prompts(tok, [problems[i].problem for i in idx], "builtin")))
        gen = round(m["response/len_mean"] * r.prompts_per_step * r.group_size)
        rows.append({"rollout_s": m["time/rollout_s"], "rollout_tokens": gen, "reward": m["reward/mean"],
                     "train_tokens": r.group_size * prompt_tokens + gen,
                     "run_tokens": (1 if shared else r.group_size) * prompt_tokens + gen})

    with tempfile.TemporaryDirectory() as d:
        start = time.perf_counter()
        train(cfg, Path(d) / "run", progress=False, log=lambda *a: None, on_step=on_step)
    for row, t0, t1 in zip(rows, [start] + ends, ends):
        row["step_s"] = t1 - t0
    return {"steps": rows, "peak_rss_mib": _peak_rss_mib(), "params": n_params,
            "extra_forwards": extra_forward_passes(cfg, "rbctl")}


# Every TRL option that changes the work, set to what rbctl does (TRL 1.16's GRPOConfig defaults are
# bf16=True and gradient_checkpointing=True, which would make TRL run another computation).
MATCHED_WORK = {
    "bf16": False,  # rbctl trains float32 weights in float32 on CPU
    "fp16": False,
    "gradient_checkpointing": False,  # rbctl: model.gradient_checkpointing false in the quickstart
    "optim": "adamw_torch_fused",  # rbctl: torch.optim.AdamW(fused=True) on CPU tensors (rbctl.train.optim)
}
ATTN_IMPLEMENTATION = "sdpa"  # both load the model with transformers' default attention; stated explicitly


def trl_config(cfg, out_dir: str, seed: int):
    """GRPOConfig mirroring the rbctl config `cfg` (see the module docstring)."""
    from trl import GRPOConfig

    r, a, o = cfg.rollout, cfg.algo, cfg.optim
    assert a.loss_agg == "seq-mean-token-mean" and a.estimator == "grpo" and a.budget is None, "TRL mirrors plain GRPO"
    return GRPOConfig(
        output_dir=out_dir,
        per_device_train_batch_size=r.prompts_per_step * r.group_size,  # TRL counts completions
        gradient_accumulation_steps=1,
        num_generations=r.group_size,
        max_completion_length=r.max_new_tokens,
        temperature=r.temperature,
        top_p=r.top_p,
        top_k=0,
        learning_rate=o.lr,
        lr_scheduler_type="constant",
        warmup_steps=o.warmup_steps,
        weight_decay=o.weight_decay,
        adam_beta1=o.beta1,
        adam_beta2=o.beta2,
        max_grad_norm=o.max_grad_norm,
        beta=a.kl_coef,  # 0: no reference model is loaded
        num_iterations=a.ppo_epochs,
        epsilon=a.clip_low,
        epsilon_high=a.clip_high,
        loss_type="grpo",
        scale_rewards="group",
        max_steps=cfg.steps,
        use_vllm=False,
        logging_steps=cfg.steps,
        log_completions=False,
        save_strategy="no",
        eval_strategy="no",
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=seed,
        **MATCHED_WORK,
    )


def run_trl(steps: int, threads: int) -> dict:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOTrainer

    from rbctl.tasks.builtin import warm_started
    from rbctl.tasks.links import check, format_problem
    from rbctl.train.training_data import load_training_problems, task_spec, warm_start_spec

    _set_threads(threads)
    cfg = workload_config(steps, threads, log_kl=False)
    path = warm_started(task_spec(cfg), warm_start_spec(cfg))
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation=ATTN_IMPLEMENTATION)
    tok = AutoTokenizer.from_pretrained(path)
    n_params = _param_count(model)
    data = Dataset.from_list([{"prompt": format_problem(p.problem), "answer": p.answer}
                              for p in load_training_problems(cfg)])
    rows: list[dict] = []
    ends: list[float] = []

    def exact(completions, answer, **_):
        rewards = [float(check(c, a)) for c, a in zip(completions, answer)]
        rows[-1]["reward"] = sum(rewards) / len(rewards)
        return rewards

    class Timed(GRPOTrainer):
        def _generate_and_score_completions(self, inputs):
            rows.append({})
            t = time.perf_counter()
            out = super()._generate_and_score_completions(inputs)
            gen = int(out["completion_mask"].sum())
            train = int(out["prompt_mask"].sum()) + gen
            rows[-1].update(rollout_s=time.perf_counter() - t, rollout_tokens=gen, train_tokens=train, run_tokens=train)
            return out

    class StepEnds(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            ends.append(time.perf_counter())

    with tempfile.TemporaryDirectory() as d:
        trainer = Timed(model=model, reward_funcs=exact, args=trl_config(cfg, d, cfg.seed), train_dataset=data,
                        processing_class=tok, callbacks=[StepEnds()])
        start = time.perf_counter()
        trainer.train()
    for row, t0, t1 in zip(rows, [start] + ends, ends):
        row["step_s"] = t1 - t0
    return {"steps": rows, "peak_rss_mib": _peak_rss_mib(), "params": n_params,
            "extra_forwards": extra_forward_passes(cfg, "trl")}


def run_matmul(threads: int, reps: int = 5, dtype: str = "float32", kernel: str = "torch") -> dict:
    """FLOP/s of a MATMUL_N³ product in `dtype`, median of `reps`: torch.mm, or (`kernel` "onednn",
    float32) oneDNN's gemm, the one `model.cpu_linear: onednn` runs."""
    import torch

    from rbctl.rollout.cpu_linear import onednn_gemm

    _set_threads(threads)
    a, b = (torch.randn(MATMUL_N, MATMUL_N, dtype=getattr(torch, dtype)) for _ in range(2))
    mm = torch.mm if kernel == "torch" else (lambda x, y: onednn_gemm(x, y, None))
    mm(a, b)
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        mm(a, b)
        times.append(time.perf_counter() - t)
    return {"flops": 2 * MATMUL_N**3 / statistics.median(times)}


def worker(kind: str, args) -> dict:
    from rbctl.console import quiet_libraries

    quiet_libraries()
    if kind == "rbctl":
        return run_rbctl(args.steps, args.threads, args.log_kl)
    if kind == "trl":
        return run_trl(args.steps, args.threads)
    return run_matmul(args.threads)


# --- the driver ----------------------------------------------------------------------------------


def spawn(kind: str, args) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads),
               TOKENIZERS_PARALLELISM="false")
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        cmd = [sys.executable, "-m", "scripts.bench_trl", "--worker", kind, "--out", f.name, "--steps", str(args.steps),
               "--threads", str(args.threads)] + (["--log-kl"] if args.log_kl else [])
        proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"the {kind} worker failed:\n{proc.stderr[-3000:]}")
        return json.loads(Path(f.name).read_text())


def measured(run: dict, warmup: int) -> list[dict]:
    """Steps of one run without the warm-up steps and the last (rbctl checkpoints there)."""
    return run["steps"][warmup:-1]


def summarise(runs: list[dict], warmup: int, matmul_flops: float) -> dict:
    """Medians over the measured steps of all runs of one framework (peak RSS: the largest)."""
    steps = [s for r in runs for s in measured(r, warmup)]
    med = statistics.median
    train_s = [s["step_s"] - s["rollout_s"] for s in steps]
    n, k = runs[0]["params"], runs[0]["extra_forwards"]
    flops = [(6 + 2 * k) * n * s["train_tokens"] / t for s, t in zip(steps, train_s)]
    run_flops = [(6 + 2 * k) * n * s["run_tokens"] / t for s, t in zip(steps, train_s)]
    return {
        "step_s": med([s["step_s"] for s in steps]),
        "rollout_s": med([s["rollout_s"] for s in steps]),
        "train_s": med(train_s),
        "rollout_tok_s": med([s["rollout_tokens"] / s["rollout_s"] for s in steps]),
        "train_tok_s": med([s["train_tokens"] / t for s, t in zip(steps, train_s)]),
        "train_flops": med(flops),
        "flops_frac": med(flops) / matmul_flops,
        "run_flops": med(run_flops),
        "run_flops_frac": med(run_flops) / matmul_flops,
        "peak_rss_mib": max(r["peak_rss_mib"] for r in runs),
        "reward": statistics.mean(s["reward"] for s in steps),
        "rollout_tokens": statistics.mean(s["rollout_tokens"] for s in steps),
        "train_tokens": statistics.mean(s["train_tokens"] for s in steps),
        "run_tokens": statistics.mean(s["run_tokens"] for s in steps),
        "params": n,
        "extra_forwards": k,
        "n_steps": len(steps),
    }


def machine() -> str:
    """The CPU (rbctl.report.provenance.cpu_description: model, CPUs, vector ISA flags), the vector ISA
    torch's kernels use, and the software versions."""
    import torch
    import transformers
    import trl

    from rbctl.report.provenance import cpu_description

    return (f"{cpu_description()}; torch kernels {torch.backends.cpu.get_cpu_capability()}; {platform.system()} "
            f"{platform.machine()}, Python "
            f"{platform.python_version()}, torch {torch.__version__}, transformers {transformers.__version__}, "
            f"trl {trl.__version__}")


def report(args, results: dict[str, list[dict]], matmul: list[float]) -> None:
    cfg = workload_config(args.steps, args.threads, args.log_kl)
    r, a = cfg.rollout, cfg.algo
    mm = statistics.median(matmul)
    s = {fw: summarise(results[fw], args.warmup, mm) for fw in FRAMEWORKS}
    per_round = [statistics.median(x["step_s"] for x in measured(t, args.warmup))
                 / statistics.median(x["step_s"] for x in measured(b, args.warmup))
                 for b, t in zip(results["rbctl"], results["trl"])]
    kl = ("rbctl algo.log_kl=true (reference forward, KL logged, not penalised); TRL beta=0 (no reference)"
          if args.log_kl else "rbctl algo.log_kl=false, TRL beta=0: no reference model in either")
    print(f"machine: {machine()}; {args.threads} torch thread(s) per framework")
    print(f"workload: {QUICKSTART.relative_to(REPO)}: P={r.prompts_per_step} x G={r.group_size}, "
          f"max_new_tokens={r.max_new_tokens}, temperature={r.temperature}, top_p={r.top_p}, lr={cfg.optim.lr}, "
          f"clip {a.clip_low}/{a.clip_high}, loss {a.loss_agg} (TRL loss_type=grpo), 1 optimizer step per batch, "
          f"policy of {s['rbctl']['params']:,} parameters")
    print("matched settings: precision float32 (TRL bf16=False, fp16=False), no gradient checkpointing, "
          f"optimizer torch AdamW, fused in both (TRL optim={MATCHED_WORK['optim']}), attention {ATTN_IMPLEMENTATION} in both")
    print(f"KL: {kl}; rbctl also measures kappa_eff every {cfg.kappa_eff_every} step(s) (one more forward pass)")
    print(f"runs: {args.rounds} rounds x {args.steps} steps per framework, alternating, each in its own process; "
          f"medians over {s['rbctl']['n_steps']} steps each (first {args.warmup} and last step of each run excluded)")
    print()
    rows = [
        ("seconds per step", "step_s", "{:.3f}", True),
        ("  rollout phase (s)", "rollout_s", "{:.3f}", True),
        ("  training phase (s)", "train_s", "{:.3f}", True),
        ("rollout tokens/s", "rollout_tok_s", "{:,.0f}", False),
        ("training tokens/s", "train_tok_s", "{:,.0f}", False),
        ("peak RSS (MiB)", "peak_rss_mib", "{:,.0f}", True),
        ("training GFLOP/s, model", "train_flops", None, False),
        ("  fraction of matmul FLOP/s", "flops_frac", "{:.1%}", False),
        ("training GFLOP/s, executed", "run_flops", None, False),
        ("  fraction of matmul FLOP/s", "run_flops_frac", "{:.1%}", False),
        ("mean reward (sanity)", "reward", "{:.3f}", None),
        ("rollout tokens per step", "rollout_tokens", "{:,.0f}", None),
        ("training tokens per step", "train_tokens", "{:,.0f}", None),
        ("  of which run through the model", "run_tokens", "{:,.0f}", None),
    ]
    print(f"{'':30}{'rbctl':>12}{'TRL':>12}{'TRL/rbctl':>12}")
    for label, key, fmt, _ in rows:
        b, t = s["rbctl"][key], s["trl"][key]
        cell = (lambda v: f"{v / 1e9:.3f}") if fmt is None else fmt.format
        print(f"{label:30}{cell(b):>12}{cell(t):>12}{t / b:>11.2f}x")
    print()
    print("TRL/rbctl seconds per step, per round: " + ", ".join(f"{x:.2f}x" for x in per_round))
    print(f"matmul reference: {MATMUL_N}x{MATMUL_N} @ {MATMUL_N}x{MATMUL_N} float32 torch.mm, "
          f"{mm / 1e9:.1f} GFLOP/s (median of {len(matmul)} runs, one per round)")
    k_b, k_t = s["rbctl"]["extra_forwards"], s["trl"]["extra_forwards"]
    print(f"training FLOP/s = (6 + 2k)·N·T / training-phase s, N = {s['rbctl']['params']:,} parameters, "
          f"k = extra no-grad forward passes (rbctl {k_b:g}, TRL {k_t:g}); "
          "model: T = prompt + response tokens of the batch; executed: T = the tokens run through the model "
          "(rbctl runs each prompt once per group of G)")
    print("rollouts: rbctl's CPU sampling loop (each prompt prefilled once, finished sequences leave the batch); "
          "TRL: model.generate")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=12, help="rollout steps per run (one rollout batch and one optimizer step each, in both)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of (rbctl, TRL) runs, alternating")
    ap.add_argument("--warmup", type=int, default=2, help="first steps of each run left out of the medians")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: the quickstart's `threads`)")
    ap.add_argument("--log-kl", action="store_true", help="keep rbctl's KL logging (a reference forward TRL lacks)")
    ap.add_argument("--worker", choices=FRAMEWORKS + ("matmul",), help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.threads is None:
        from rbctl.config.train import load_train_config

        args.threads = load_train_config(QUICKSTART).threads or os.cpu_count()
    if args.worker:
        Path(args.out).write_text(json.dumps(worker(args.worker, args)))
        return
    if args.steps < args.warmup + 2:
        sys.exit(f"--steps must be at least --warmup + 2 = {args.warmup + 2}")
    try:
        import trl  # noqa: F401
    except ImportError:
        sys.exit('TRL is not installed; it is an optional extra: pip install -e ".[trl]"')
    from rbctl.tasks.builtin import warm_started
    from rbctl.train.training_data import task_spec, warm_start_spec

    cfg = workload_config(args.steps, args.threads, args.log_kl)
    warm_started(task_spec(cfg), warm_start_spec(cfg))  # built once and cached, outside the timings
    results: dict[str, list[dict]] = {fw: [] for fw in FRAMEWORKS}
    matmul = []
    for rnd in range(args.rounds):
        order = FRAMEWORKS if rnd % 2 == 0 else FRAMEWORKS[::-1]  # neither framework always goes first
        for fw in order:
            results[fw].append(spawn(fw, args))
            step_s = statistics.median(x["step_s"] for x in measured(results[fw][-1], args.warmup))
            print(f"round {rnd + 1}/{args.rounds}: {fw} {step_s:.3f} s/step", file=sys.stderr)
        matmul.append(spawn("matmul", args)["flops"])
    report(args, results, matmul)


if __name__ == "__main__":
    raise SystemExit(main())
