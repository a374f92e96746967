"""Checks that need one GPU (each also runs on the CPU when called with device "cpu": the tests do).

A check takes a `Context` and returns (passed, one-line detail, figures for the report)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from scripts.gpu_checks.models import QWEN3_0_6B, TINY, build_model, lines, save_model, train_config, write_problems

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Context:
    device: str  # "cuda" or "cpu"
    out: Path  # a working folder of its own per check
    gpus: int = 0
    env: dict = field(default_factory=lambda: dict(os.environ))


def run(cmd: list[str], ctx: Context, timeout: float = 600) -> subprocess.CompletedProcess:
    """`cmd` from the repository root; the output kept in ctx.out/<n>.log."""
    proc = subprocess.run(cmd, cwd=REPO, env=ctx.env, capture_output=True, text=True, timeout=timeout)
    logs = sorted(ctx.out.glob("*.log"))
    (ctx.out / f"{len(logs)}.log").write_text(f"$ {' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}")
    return proc


def tail(proc: subprocess.CompletedProcess) -> str:
    text = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
    return f"exit {proc.returncode}: {text[-1][:200] if text else ''}"


# --- versions ------------------------------------------------------------------------------------


def floors() -> dict[str, str]:
    """{package: the `>=` floor} of pyproject.toml's dependencies and extras."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"]) + [r for extra in project["optional-dependencies"].values() for r in extra]
    out = {}
    for r in reqs:
        m = re.match(r"^([A-Za-z0-9_.-]+)\s*(?:\[[^]]*\])?\s*>=\s*([0-9][^,;\s]*)", r)
        if m:
            out.setdefault(m.group(1).lower(), m.group(2))
    return out


def versions(ctx: Context):
    """torch, transformers and (where installed) vLLM at or above pyproject.toml's floors; the card and driver."""
    from importlib import metadata

    from packaging.version import Version

    import torch

    got, bad = {}, []
    for name, floor in floors().items():
        if name not in ("torch", "transformers", "vllm"):
            continue
        try:
            got[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
        if Version(got[name]).release < Version(floor).release:
            bad.append(f"{name} {got[name]} < {floor}")
    figures = {"versions": got, "cuda": torch.version.cuda}
    if ctx.device == "cuda":
        figures["card"] = torch.cuda.get_device_name(0)
        figures["driver"] = _driver()
    text = ", ".join(f"{k} {v}" for k, v in got.items())
    return not bad, (f"below the floor: {'; '.join(bad)}" if bad else f"{text} (floors met)"), figures


def _driver() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.strip()
        return out.splitlines()[0] if out else "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


# --- LoRA with gradient checkpointing -------------------------------------------------------------


def _adapter_grads(kind: str, device: str, checkpointing, seed: int = 0) -> dict:
    """LoRA gradients of one loss on a tiny `kind` model (bf16 base on a GPU, float32 adapters,
    bf16 autocast), with checkpointing None, True (reentrant) or False (non-reentrant)."""
    import torch
    from peft import LoraConfig, get_peft_model

    from rbctl.train.trainer import enable_gradient_checkpointing

    base = build_model(kind, TINY, seed, device)
    if device == "cuda":
        base = base.to(torch.bfloat16)
    if checkpointing is not None:
        enable_gradient_checkpointing(base, lora=True, use_reentrant=checkpointing)
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear")).train()
    torch.manual_seed(1)
    for name, p in model.named_parameters():
        if "lora_" in name:
            p.data = p.data.float()  # rbctl's master copy of the trainable weights
            if "lora_B" in name:
                torch.nn.init.normal_(p, std=0.1)
    ids = torch.randint(2, TINY["vocab_size"], (2, 32), generator=torch.Generator().manual_seed(2)).to(device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        logits = model(input_ids=ids).logits
    torch.log_softmax(logits.float(), -1)[:, :-1].gather(-1, ids[:, 1:, None]).mean().backward()
    return {n: (p.grad.float().cpu() if p.grad is not None else None) for n, p in model.named_parameters() if "lora_" in n}


def lora_checkpointing(ctx: Context):
    """Adapter gradients under reentrant and non-reentrant checkpointing equal those without, on Qwen3- and
    Llama-shaped models (a gradient of None or 0 is what transformers 4.x's reentrant default gave)."""
    worst = 0.0
    for kind in ("qwen3", "llama"):
        want = _adapter_grads(kind, ctx.device, None)
        for reentrant in (True, False):
            got = _adapter_grads(kind, ctx.device, reentrant)
            for name, g in got.items():
                if g is None or not g.abs().sum() > 0:
                    return False, f"{kind}, use_reentrant={reentrant}: no gradient for {name}", {}
                worst = max(worst, float((g - want[name]).norm() / want[name].norm()))
    ok = worst < 1e-2  # recomputation in bf16 autocast repeats the same kernels: rounding only
    return ok, f"qwen3 and llama, use_reentrant True and False: largest relative gradient difference {worst:.1e}", \
        {"largest_relative_difference": worst}


# --- maze_17's dtype -------------------------------------------------------------------------------


def maze_dtype(ctx: Context):
    """configs/maze_17.yaml loads its float32 warm start as float32 here, where `auto` would load it in bf16."""
    import torch

    from rbctl.config.train import load_train_config
    from rbctl.rollout.models import resolve_dtype

    cfg = load_train_config(REPO / "configs" / "maze_17.yaml")
    got, auto = resolve_dtype(cfg.model.dtype, torch.device(ctx.device)), resolve_dtype("auto", torch.device(ctx.device))
    return got == torch.float32, f"model.dtype {cfg.model.dtype} → {got} (auto would be {auto})", {}


# --- training, killed and resumed -----------------------------------------------------------------


def _train(ctx: Context, cfg: dict, run_dir: Path, kill_after: int | None = None) -> str | None:
    """`rbctl train` on deterministic settings in a process of its own (scripts.gpu_checks.train_run);
    with `kill_after`, SIGKILLed once step `kill_after`'s checkpoint is sealed. None, or what failed."""
    cfg_path = run_dir.with_suffix(".json")
    cfg_path.write_text(json.dumps(cfg))
    cmd = [sys.executable, "-m", "scripts.gpu_checks.train_run", str(cfg_path), str(run_dir)]
    if kill_after is None:
        proc = run(cmd, ctx)
        return None if proc.returncode == 0 else tail(proc)
    marker = run_dir / "checkpoints" / f"step_{kill_after:06d}" / "COMPLETE"
    p = subprocess.Popen(cmd, cwd=REPO, env=ctx.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while p.poll() is None and not marker.exists():
        time.sleep(0.02)
    if p.poll() is not None:
        return f"the run ended (exit {p.returncode}) before it could be killed after step {kill_after}"
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    return None


def record(run_dir: Path, steps: int) -> dict:
    """What two equal runs share: metrics (timings aside), evaluation lines, the final weights."""
    from safetensors.torch import load_file

    metrics = [{k: v for k, v in r.items() if not k.startswith(("time/", "throughput/"))}
               for r in lines(run_dir / "metrics.jsonl")]
    weights = load_file(str(run_dir / "checkpoints" / f"step_{steps:06d}" / "model" / "model.safetensors"))
    return {"metrics": metrics, "eval": lines(run_dir / "eval.jsonl"), "weights": weights}


def differences(a: dict, b: dict) -> list[str]:
    """Where two run records differ (empty: bit for bit equal)."""
    import torch

    out = []
    for kind in ("metrics", "eval"):
        if len(a[kind]) != len(b[kind]):
            out.append(f"{kind}: {len(a[kind])} vs {len(b[kind])} lines")
            continue
        for ra, rb in zip(a[kind], b[kind]):
            out += [f"{kind} step {ra.get('step')} {k}: {ra.get(k)} vs {rb.get(k)}"
                    for k in sorted(ra.keys() | rb.keys()) if ra.get(k) != rb.get(k)]
    wa, wb = a["weights"], b["weights"]
    if wa.keys() != wb.keys():
        return out + ["weights: different tensors"]
    differ = [k for k, w in wa.items() if not torch.equal(w, wb[k])]
    return out + ([f"weights: {len(differ)} tensors differ ({differ[0]}, ...)"] if differ else [])


def kill_and_resume(ctx: Context):
    """Runs A and A' uninterrupted, B SIGKILLed after step 2's checkpoint and resumed: A' must equal A (else
    the device does not repeat itself and a resume cannot be judged: this check fails), and B must equal A."""
    steps = 5
    model_dir = ctx.out / "policy"
    save_model(model_dir, "llama", TINY, "float32")
    train_file, eval_file = write_problems(ctx.out / "problems", 32, 4)
    cfg = train_config(model_dir, train_file, eval_file, ctx.device, steps=steps)
    for name, kill in (("a", None), ("a2", None), ("b", 2), ("b", None)):
        failed = _train(ctx, cfg, ctx.out / name, kill)
        if failed:
            return False, f"run {name}: {failed}", {}
    a, a2, b = (record(ctx.out / n, steps) for n in ("a", "a2", "b"))
    rerun, resumed = differences(a, a2), differences(a, b)
    figures = {"rerun_differences": rerun[:5], "resume_differences": resumed[:5]}
    if rerun:
        return False, f"two uninterrupted runs differ ({rerun[0]}): the resume cannot be judged here", figures
    if resumed:
        return False, f"the resumed run differs from the uninterrupted one ({resumed[0]})", figures
    return True, f"{steps} steps: killed after step 2 and resumed = uninterrupted, bit for bit (and A = A')", figures


# --- the dry run's memory estimate against the measured peak -------------------------------------------


def memory_estimate(ctx: Context):
    """A step of a Qwen3-0.6B-sized run (hf engine, bf16-mixed, gradient checkpointing) measured by
    torch.cuda.max_memory_allocated against `rbctl.train.footprint`'s estimate of its peak."""
    from transformers import AutoConfig

    from rbctl.config.train import TrainConfig
    from rbctl.train.footprint import Architecture, memory_budget

    sizes = QWEN3_0_6B if ctx.device == "cuda" else {**TINY, "num_hidden_layers": 4}
    model_dir = ctx.out / "policy"
    n = save_model(model_dir, "qwen3", sizes, "bfloat16" if ctx.device == "cuda" else "float32", device=ctx.device)
    train_file, eval_file = write_problems(ctx.out / "problems", 8, 2, words=60)
    cfg = train_config(model_dir, train_file, eval_file, ctx.device, steps=1, kappa_eff_every=0,
                       model={"gradient_checkpointing": True}, eval={"every": 0},
                       rollout={"max_new_tokens": 128, "max_batch": 16}, algo={"micro_batch_size": 4, "log_kl": False})
    failed = _train(ctx, {**cfg, "peak_file": str(ctx.out / "peak.json")}, ctx.out / "run")
    if failed:
        return False, failed, {}
    measured = json.loads((ctx.out / "peak.json").read_text())["max_memory_allocated"]
    prompt = json.loads((ctx.out / "peak.json").read_text())["prompt_tokens"]
    valid = TrainConfig.model_validate(cfg)
    estimate = memory_budget(valid, n, Architecture.of(AutoConfig.from_pretrained(model_dir)), prompt).peak
    ratio = measured / estimate if estimate else float("inf")
    figures = {"measured_bytes": measured, "estimated_bytes": estimate, "ratio": ratio}
    if ctx.device != "cuda":
        return True, f"CPU: nothing measured (estimate {estimate / 2**30:.2f} GiB)", figures
    # the estimate guards against running out of memory: it may err high, not more than 25% low
    return ratio <= 1.25, (f"{n / 1e6:.0f}M parameters: measured {measured / 2**30:.2f} GiB, estimated "
                           f"{estimate / 2**30:.2f} GiB (measured/estimated {ratio:.2f}; ≤ 1.25 passes)"), figures


# --- the gpu-marked tests --------------------------------------------------------------------------


def gpu_tests(ctx: Context):
    """`pytest -m gpu`, offline: their models are built in code."""
    proc = run([sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "tests"],
               Context(ctx.device, ctx.out, env={**ctx.env, "HF_HUB_OFFLINE": "1"}), timeout=900)
    summary = next((x for x in reversed(proc.stdout.splitlines()) if " in " in x and ("passed" in x or "failed" in x)),
                   tail(proc))
    return proc.returncode == 0 and "passed" in summary and "failed" not in summary, summary.strip("= "), {}
