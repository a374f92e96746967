"""Checks that need vLLM on a GPU. vLLM's in-process engine is one per process, so each runs in a
process of its own: the engine check (`python -m scripts.gpu_checks.vllm ENGINE_OUT_DIR`), a LoRA
training run with the vLLM engine, and `rbctl eval` of that run with `--engine vllm`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from scripts.gpu_checks.models import TINY, lines, save_model, train_config, write_problems
from scripts.gpu_checks.single import Context, run, tail

ROUNDS = 3  # weight syncs checked, each with another planted readout


def plant(model, k1: int, k2: int) -> None:
    """Make greedy decoding emit only tokens k1 and k2: the final norm keeps one hidden dimension d,
    and the output layer reads +10 · h_d for k1, −10 · h_d for k2, 0 for every other token. An engine
    that samples other tokens does not run these weights."""
    import torch

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    with torch.no_grad():
        norm, head = base.model.norm.weight, base.lm_head.weight
        norm.zero_()
        norm[0] = 1.0
        head[:, 0] = 0.0
        head[k1, 0], head[k2, 0] = 10.0, -10.0


def sync_rounds(engine, model, prompts: list[list[int]]) -> tuple[bool, str, dict]:
    """ROUNDS times: plant another readout, `sync_weights`, decode greedily: every token must be one of
    the planted two (vLLM runs the pushed weights); then decode again without a sync: in sleep mode vLLM
    slept at level 2 after the first call (weights dropped), so the same tokens prove the re-push."""
    from rbctl.rollout.base import SamplingParams

    greedy = SamplingParams(n=1, temperature=0.0, max_new_tokens=8, seed=0)
    seen = []
    for i in range(ROUNDS):
        k1, k2 = 10 + 2 * i, 11 + 2 * i
        plant(model, k1, k2)
        engine.sync_weights(model)
        got = [s.token_ids for group in engine.generate(prompts, greedy) for s in group]
        stray = sorted({t for toks in got for t in toks} - {k1, k2})
        if stray:
            return False, f"sync {i + 1}: vLLM decoded {stray[:5]}, not the planted {k1}/{k2}", {"tokens": got}
        again = [s.token_ids for group in engine.generate(prompts, greedy) for s in group]
        if again != got:
            return False, f"sync {i + 1}: a second call without a sync decoded other tokens (sleep/wake re-push)", {}
        seen.append(got)
    return True, f"{ROUNDS} syncs, each decoded the planted tokens only, and again after sleeping", {"tokens": seen}


def engine_main(out: Path) -> int:
    """The engine check in this process: a tied tiny Qwen3 in bf16, vLLM with sleep mode on."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rbctl.rollout.vllm import VLLMEngine, has_inplace_reload

    folder = out / "policy"
    save_model(folder, "qwen3", {**TINY, "tie_word_embeddings": True}, "bfloat16")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).cuda()
    tok = AutoTokenizer.from_pretrained(folder)
    engine = VLLMEngine(model, tok, model_name_or_path=str(folder), gpu_memory_utilization=0.25, sleep_mode=True,
                        dtype="bfloat16", seed=0, max_model_len=512)
    ok, detail, figures = sync_rounds(engine, model, [[5, 6, 7], [8, 9]])
    path = "in-place reload (weights_iterator)" if has_inplace_reload(engine.llm) else "per-tensor load_weights"
    (out / "engine.json").write_text(json.dumps({"ok": ok, "detail": f"{detail}; weight sync by {path}", **figures}))
    return 0


def engine(ctx: Context):
    """vLLM's weight sync and sleep mode on a GPU (`sync_rounds`), in its own process."""
    proc = run([sys.executable, "-m", "scripts.gpu_checks.vllm", str(ctx.out)], ctx)
    if proc.returncode != 0 or not (ctx.out / "engine.json").exists():
        return False, tail(proc), {}
    got = json.loads((ctx.out / "engine.json").read_text())
    return got["ok"], got["detail"], {}


def lora_config(ctx: Context) -> dict:
    model_dir = ctx.out / "policy"
    save_model(model_dir, "llama", TINY, "bfloat16")
    train_file, eval_file = write_problems(ctx.out / "problems", 32, 4)
    return train_config(model_dir, train_file, eval_file, "cuda", steps=3,
                        model={"lora": {"r": 8, "alpha": 16, "target_modules": "all-linear"}, "gradient_checkpointing": True},
                        rollout={"engine": "vllm", "vllm": {"gpu_memory_utilization": 0.25, "sleep_mode": True,
                                                            "max_model_len": 1024}},
                        algo={"tis_cap": 2.0, "log_kl": True})


def train_lora(ctx: Context):
    """`rbctl train`: LoRA with gradient checkpointing, the vLLM engine in sleep mode, a periodic evaluation
    through the run's engine; the sampler–trainer log-prob gap stays at bf16 rounding."""
    import yaml

    (ctx.out / "run.yaml").write_text(yaml.safe_dump(lora_config(ctx)))
    proc = run([sys.executable, "-m", "rbctl", "train", str(ctx.out / "run.yaml"), "-o", str(ctx.out / "run"), "-q"], ctx)
    if proc.returncode != 0:
        return False, tail(proc), {}
    rows, evals = lines(ctx.out / "run" / "metrics.jsonl"), lines(ctx.out / "run" / "eval.jsonl")
    gaps = [r.get("rollout/logprob_diff") for r in rows]
    summary = next((ctx.out / "run" / "eval").rglob("summary.json"))
    engine_name = json.loads(summary.read_text())["protocol"]["engine"]
    steps = sorted({r["step"] for r in evals})
    ok = len(rows) == 3 and all(g is not None and g < 0.05 for g in gaps) and steps == [0, 2, 3] and engine_name == "vllm"
    return ok, (f"3 steps, log-prob gap per step {[f'{g:.2g}' for g in gaps if g is not None]} (< 0.05), "
                f"evaluations at steps {steps} on the {engine_name} engine"), {"logprob_gaps": gaps}


def eval_lora(ctx: Context, run_dir: Path):
    """`rbctl eval RUN --engine vllm` on the LoRA run's checkpoint (an adapter folder: vLLM gets its base)."""
    if not (run_dir / "checkpoints").exists():
        return False, "no LoRA run to evaluate (the training check failed)", {}
    proc = run([sys.executable, "-m", "rbctl", "eval", str(run_dir), "--engine", "vllm", "--force",
                "--out", str(ctx.out / "eval")], ctx)
    summaries = list((ctx.out / "eval").rglob("summary.json")) if proc.returncode == 0 else []
    if not summaries:
        return False, tail(proc), {}
    s = json.loads(summaries[0].read_text())
    return s["protocol"]["engine"] == "vllm", f"avg@{s['n']} {s['metrics']['avg@n']['value']:.3f} on the vllm engine", {}


if __name__ == "__main__":
    raise SystemExit(engine_main(Path(sys.argv[1])))
