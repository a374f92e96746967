"""The GPU check: what a first paper-scale run on GPUs needs to work, each on a tiny random model built
in code (Qwen3- and Llama-shaped: nothing downloaded), meant to take under 11 minutes on one GPU (not yet
measured: no GPU was lent where it was written).

    python -m scripts.gpu_check --dry-run          # every check, what it needs and what it covers
    python -m scripts.gpu_check --out runs/gpu_check  # run them; the report: runs/gpu_check/gpu_check.json

Each check prints one line, `pass`, `FAIL` or `skipped: <why>` (a check that needs CUDA, vLLM or two
GPUs is skipped where they are missing, never passed), and the report holds every line with its
figures, the card, driver and versions. docs/scaling.md says what each line means and which of the
known first-run failures it covers. Checks run in the order below; once `--budget-min` is spent the
rest are skipped (out of time), so the report is written within a lent machine's time. Exit code 0
when no check failed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from scripts.gpu_checks import multi, single, vllm


@dataclass(frozen=True)
class Check:
    name: str
    needs: str  # "nothing", "CUDA", "vLLM" (and CUDA), "two GPUs"
    covers: str  # what it would have caught (docs/scaling.md numbers them)
    run: object  # (Context) -> (passed, detail, figures)


CHECKS = [
    Check("versions", "nothing", "torch, transformers, vLLM at or above pyproject.toml's floors (FSDP2 needs torch 2.8)",
          single.versions),
    Check("maze_17 dtype", "CUDA", "maze_17 loads its float32 warm start as float32 on a bf16 GPU", single.maze_dtype),
    Check("LoRA + gradient checkpointing", "CUDA",
          "adapter gradients under reentrant and non-reentrant checkpointing, Qwen3 and Llama", single.lora_checkpointing),
    Check("kill and resume", "CUDA",
          "a run SIGKILLed and resumed equals an uninterrupted one; fails if two uninterrupted runs differ",
          single.kill_and_resume),
    Check("memory estimate", "CUDA", "the dry run's memory estimate against the measured peak (Qwen3-0.6B sizes)",
          single.memory_estimate),
    Check("vLLM weight sync and sleep", "vLLM", "weight sync (either reload path) checked by greedy tokens after "
          "each sync; level-2 sleep and re-push", vllm.engine),
    Check("vLLM LoRA run", "vLLM", "LoRA + checkpointing with the vLLM engine in sleep mode, evaluation through "
          "the run's engine, log-prob gap", vllm.train_lora),
    Check("rbctl eval --engine vllm on a LoRA run", "vLLM", "vLLM built on the adapter's base, merged weights pushed",
          None),
    Check("NCCL wait for rank 0", "two GPUs", "ranks wait past the collective timeout for rank 0's evaluation",
          multi.nccl_wait),
    Check("DDP resume", "two GPUs", "each rank's optimizer state restored onto its own GPU", multi.ddp_resume),
    Check("FSDP2", "two GPUs", "resharding after gathered sampling; rbctl train --nproc 2 with model.fsdp",
          multi.fsdp),
    Check("local sweep GPUs", "two GPUs", "a local sweep's --jobs 2 GPU runs each on a GPU of its own",
          multi.sweep_gpus),
    Check("pytest -m gpu", "CUDA", "the gpu-marked tests, on models built in code", single.gpu_tests),
]


def skip_reason(check: Check, cuda: bool, gpus: int, has_vllm: bool) -> str | None:
    if check.needs == "nothing":
        return None
    if not cuda:
        return "no CUDA"
    if check.needs == "vLLM" and not has_vllm:
        return "vLLM not installed"
    if check.needs == "two GPUs" and gpus < 2:
        return "one GPU"
    return None


def dry_run() -> str:
    lines = ["python -m scripts.gpu_check runs these checks, in this order (nothing is run now):"]
    for i, c in enumerate(CHECKS, 1):
        lines.append(f"{i:2d}. {c.name} [needs {c.needs}]: {c.covers}")
    return "\n".join(lines)


def _run_one(check: Check, ctx: single.Context, done: dict) -> tuple[str, str, dict]:
    if check.run is None:  # the evaluation of the vLLM LoRA run's checkpoint
        return _status(vllm.eval_lora(ctx, done["vLLM LoRA run"] / "run"))
    try:
        return _status(check.run(ctx))
    except Exception as e:  # a check that crashes is a failure with its reason, and the others go on
        (ctx.out / "traceback.txt").write_text(traceback.format_exc())
        return "FAIL", f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}", {}


def _status(result) -> tuple[str, str, dict]:
    ok, detail, figures = result
    return ("pass" if ok else "FAIL"), detail, figures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="list every check and what it needs; run nothing")
    ap.add_argument("--out", type=Path, default=None, help="working folder, kept, with gpu_check.json (default: a temporary one)")
    ap.add_argument("--budget-min", type=float, default=11.0, help="skip the remaining checks once this much time is spent")
    args = ap.parse_args(argv)
    if args.dry_run:
        print(dry_run())
        return 0
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS in every child process
    from rbctl.console import quiet_libraries

    quiet_libraries()
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        report = run_checks(out, torch.cuda.is_available(), torch.cuda.device_count(), args.budget_min * 60)
    failed = [c for c in report["checks"] if c["status"] == "FAIL"]
    counts = {s: sum(c["status"].startswith(s) for c in report["checks"]) for s in ("pass", "FAIL", "skipped")}
    print(f"{counts['pass']} passed, {counts['FAIL']} failed, {counts['skipped']} skipped "
          f"in {report['time_s']:.0f} s" + (f"; report: {args.out / 'gpu_check.json'}" if args.out else ""))
    return 1 if failed else 0


def run_checks(out: Path, cuda: bool, gpus: int, budget_s: float) -> dict:
    """Every check in order; the report (also written to OUT/gpu_check.json after each check)."""
    has_vllm = importlib.util.find_spec("vllm") is not None
    device = "cuda" if cuda else "cpu"
    report = {"device": device, "gpus": gpus, "checks": [], "time_s": 0.0}
    t0, done = time.perf_counter(), {}
    for i, check in enumerate(CHECKS, 1):
        folder = done[check.name] = out / f"{i:02d}_{check.name.split()[0].lower()}"
        why = skip_reason(check, cuda, gpus, has_vllm)
        spent = time.perf_counter() - t0
        if why is None and spent > budget_s:
            why = f"out of time ({spent / 60:.1f} of {budget_s / 60:.0f} min spent)"
        t = time.perf_counter()
        if why is None:
            folder.mkdir(parents=True, exist_ok=True)
        status, detail, figures = (f"skipped: {why}", "", {}) if why else _run_one(
            check, single.Context(device, folder, gpus), done)
        if check.name == "versions":
            report.update(figures)
        line = {"check": check.name, "status": status, "detail": detail, "covers": check.covers,
                "seconds": round(time.perf_counter() - t, 1), "figures": figures}
        report["checks"].append(line)
        print(f"{check.name + ' ':.<44} {status}" + (f"  {detail}" if detail else ""), flush=True)
        report["time_s"] = time.perf_counter() - t0
        (out / "gpu_check.json").write_text(json.dumps(report, indent=1, default=str))
    return report


if __name__ == "__main__":
    sys.exit(main())
