"""`rbctl eval`: sample n completions per problem, grade them, and write metrics with 95% intervals.

For each benchmark, ``OUT/<benchmark>/`` receives (each file written atomically):
- ``summary.json``: ``benchmark, model, step, n, num_problems``; ``metrics`` = ``avg@n`` (the key is
  literally ``avg@n``; ``n`` is stored beside it), ``pass@K`` and ``maj@K`` for K = 1, 2, 4, … ≤ n,
  each ``{value, ci_low, ci_high}`` (docs/method.md, "Evaluation metrics"; rbctl.grading.metrics);
  ``per_problem`` (correct samples per problem, for intervals across seeds); ``grader`` status
  counts; ``protocol`` (everything that decides the figures: engine, sampling, template and an
  example prompt, versions, device, dtype); ``time_s``, ``tokens_per_s``.
- ``samples.jsonl``: one line per sample (problem id, sample index, completion, extracted answer,
  gold, correct, grade status, finished).

Grading: the ``builtin`` benchmark is checked exactly by ``rbctl.tasks.links.check`` and votes by string
equality; every other benchmark goes through ``rbctl.grading.verify`` (math-verify) and votes with
``answers_equivalent``.

Engines: anything with ``generate(prompt_ids, SamplingParams) -> list[list[Sample]]`` (`Engine`),
built by `build_engine`: ``hf`` is ``rbctl.rollout.hf.HFEngine``, ``vllm`` is
``rbctl.rollout.vllm.VLLMEngine`` (it loads ``policy.source`` and syncs the in-memory weights).
A trainer may pass its own engine instance to `evaluate_policy` instead.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rbctl.errors import UserError
from rbctl.store.atomic import write_atomic
from rbctl.tasks.prompting import MATH_INSTRUCTION

if TYPE_CHECKING:
    from rich.progress import Progress

    from rbctl.tasks.registry import Problem
    from rbctl.grading.verify import GradeResult
    from rbctl.rollout.models import LoadedPolicy
    from rbctl.rollout.hf import Sample, SamplingParams

DEFAULT_BENCHMARKS = ("amc23", "aime24", "aime25")
BUILTIN_BENCHMARK = "builtin"
# The built-in task's longest answer is 16 tokens (start letter, 2 per hop × 6 hops, '#', letter,
# EOS); 32 leaves room without letting a policy that never stops run for 1024 tokens.
BUILTIN_MAX_NEW_TOKENS = 32
GRADE_CHUNK = 64  # samples graded between progress updates


class EvalConfig(BaseModel):
    """Options of `rbctl eval` and of periodic evaluation during training."""

    model_config = ConfigDict(extra="forbid")

    benchmarks: list[str] = Field(
        default_factory=lambda: list(DEFAULT_BENCHMARKS), min_length=1,
        description="Registered benchmark names (amc23, aime24, aime25, gsm8k, builtin) or custom specs "
        "(file:PATH.jsonl[@problem,answer], hf:ID[:config]:split[@problem,answer]).",
    )
    n: int = Field(1, ge=1, description="Samples per problem.")
    temperature: float | None = Field(
        None, ge=0.0,
        description="Sampling temperature, 0 = greedy. Default: 0 when n=1 (Qwen2.5-Math, Dr. GRPO, LIMO "
        "protocols), 0.6 when n>1 (DeepSeek-R1, open-r1, QwQ).",
    )
    top_p: float | None = Field(
        None, gt=0.0, le=1.0, description="Nucleus sampling mass. Default: 1.0 when greedy, else 0.95 (DeepSeek-R1).",
    )
    max_new_tokens: int | None = Field(
        None, ge=1,
        description=f"Most generated tokens per sample. Default: 1024 (real models), "
        f"{BUILTIN_MAX_NEW_TOKENS} for the built-in policy.",
    )
    seed: int = Field(0, description="Sampling seed.")
    template: Literal["auto", "chat", "plain", "builtin"] = Field(
        "auto", description="Prompt template; auto = built-in format for the built-in policy, else chat if the "
        "tokenizer has a chat template, else plain.",
    )
    instruction: str = Field(MATH_INSTRUCTION, description="Sentence appended to each problem (chat/plain templates).")
    engine: Literal["hf", "vllm"] = Field("hf", description="Generation engine.")
    limit: int | None = Field(None, ge=1, description="Evaluate only the first LIMIT problems of each benchmark.")
    data_dir: str | None = Field(
        None, description="Folder with <benchmark>.jsonl files (default: $RBCTL_DATA_DIR, then the Hugging Face Hub).",
    )
    batch_size: int | None = Field(
        None, ge=1, description="Most sequences per generate call. Default: 256 on GPU, 64 on CPU.",
    )
    grader_timeout_s: float = Field(5.0, gt=0.0, description="Hard time limit of one math-verify comparison.")
    device: str = Field("auto", description="auto, cpu, cuda or cuda:N (used when the model is loaded here).")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="Weights dtype when loading; auto = bfloat16 on GPUs that support it, else float32.",
    )

    @model_validator(mode="after")
    def _sampling_defaults(self) -> EvalConfig:
        if self.temperature is None:
            self.temperature = 0.0 if self.n == 1 else 0.6
        if self.top_p is None:
            self.top_p = 1.0 if self.temperature == 0 else 0.95
        return self


def build_config(**values) -> EvalConfig:
    """`EvalConfig` from options; a validation error becomes a one-line `UserError`."""
    try:
        return EvalConfig(**values)
    except ValidationError as e:
        err = e.errors()[0]
        where = "--" + str(err["loc"][0]).replace("_", "-") if err["loc"] else "config"
        raise UserError(f"invalid eval option {where}: {err['msg']}") from None


class Engine(Protocol):
    name: str

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[Sample]]: ...


def engine_class(name: str) -> type:
    """The engine class for ``name`` (checked before a model is loaded, so a bad choice fails fast)."""
    if name == "hf":
        from rbctl.rollout.hf import HFEngine

        return HFEngine
    if name == "vllm":
        import importlib.util

        try:
            from rbctl.rollout.vllm import VLLMEngine
        except ModuleNotFoundError as e:
            if e.name != "rbctl.rollout.vllm":
                raise
            raise UserError("the vllm engine is built by the scale-out work; use --engine hf") from None
        if importlib.util.find_spec("vllm") is None:
            raise UserError("the vllm engine needs vLLM and a GPU: pip install 'rbctl[vllm]' (or use --engine hf)")
        return VLLMEngine
    raise UserError(f"unknown engine {name!r}; valid: hf, vllm")


def build_engine(name: str, policy: LoadedPolicy, batch_size: int, seed: int = 0) -> Engine:
    """An engine over ``policy``. ``hf`` generates ``batch_size`` sequences per call; vLLM schedules
    its own batches, loads ``policy.source`` and then pushes the in-memory weights."""
    cls = engine_class(name)
    if name == "hf":
        return cls(policy.model, policy.tokenizer, max_batch=batch_size)
    dtype = str(next(policy.model.parameters()).dtype).removeprefix("torch.")
    return cls(policy.model, policy.tokenizer, model_name_or_path=policy.source, dtype=dtype, seed=seed)


def load_problems(cfg: EvalConfig, task_spec=None) -> dict[str, list[Problem]]:
    """Problems of every benchmark in ``cfg``, in order; unknown names and missing data fail here.

    ``task_spec``: the built-in task's settings of the policy under evaluation (default settings
    when None), so that ``builtin`` is the test split of the task the policy was trained on."""
    from rbctl.tasks import links as builtin
    from rbctl.tasks.registry import get_benchmark, load_benchmark

    builtin.register_benchmark(task_spec)  # so that `builtin` is also listed among the valid names
    for name in cfg.benchmarks:  # every name is checked before any data is read
        if not _is_custom_spec(name):
            get_benchmark(name)
    return {name: load_benchmark(name, data_dir=cfg.data_dir, limit=cfg.limit) for name in cfg.benchmarks}


# ---------------------------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------------------------


def default_batch_size(device_type: str) -> int:
    """Sequences per generate call when not given: 256 on a GPU; 64 on CPU, where SmolLM2-135M
    ran 5x slower at 256 than at 64 (python -m scripts.bench_eval --batch-sizes 16,64,256)."""
    return 256 if device_type == "cuda" else 64


def evaluate_policy(
    policy: LoadedPolicy,
    cfg: EvalConfig,
    out_dir: Path,
    progress: Progress | None = None,
    step: int | None = None,
    engine: Engine | None = None,
    problems: dict[str, list[Problem]] | None = None,
) -> dict[str, dict]:
    """Evaluate an in-memory policy on ``cfg.benchmarks``; returns ``{benchmark: summary}``.

    Writes ``out_dir/<benchmark>/summary.json`` and ``samples.jsonl``. ``progress``: a running
    rich Progress to add tasks to (None: silent). ``engine``: reuse an engine (e.g. the trainer's);
    by default one of ``cfg.engine`` is built. ``problems``: already loaded by `load_problems`.
    """
    from rbctl.tasks.prompting import encode_prompts, render_prompt, resolve_template
    from rbctl.rollout.hf import SamplingParams

    problems = problems if problems is not None else load_problems(cfg)
    device = next(policy.model.parameters()).device
    batch_size = cfg.batch_size or default_batch_size(device.type)
    if engine is None:
        engine = build_engine(cfg.engine, policy, batch_size, cfg.seed)
    template = resolve_template(policy.tokenizer, cfg.template, policy.builtin)
    instruction = None if template == "builtin" else cfg.instruction
    params = SamplingParams(
        n=cfg.n, temperature=cfg.temperature, top_p=cfg.top_p, seed=cfg.seed,
        max_new_tokens=cfg.max_new_tokens or (BUILTIN_MAX_NEW_TOKENS if policy.builtin else 1024),
    )
    param = next(policy.model.parameters())
    protocol = {
        "engine": getattr(engine, "name", type(engine).__name__),
        "n": params.n, "temperature": params.temperature, "top_p": params.top_p,
        "max_new_tokens": params.max_new_tokens, "seed": params.seed, "batch_size": batch_size,
        "template": template, "instruction": instruction, "grader_timeout_s": cfg.grader_timeout_s,
        "versions": _versions(), "device": str(device), "dtype": str(param.dtype).removeprefix("torch."),
    }
    results = {}
    for name, probs in problems.items():
        t0 = time.perf_counter()
        prompts = encode_prompts(policy.tokenizer, [p.problem for p in probs], template, instruction or "")
        samples = _generate(engine, prompts, params, batch_size, progress, name)
        gen_s = time.perf_counter() - t0
        grades = _grade(name, probs, samples, cfg.grader_timeout_s, progress)
        protocol = {
            **protocol,
            "example_prompt": render_prompt(policy.tokenizer, probs[0].problem, template, instruction or ""),
            "grader": "rbctl.tasks.links.check" if name == BUILTIN_BENCHMARK else "rbctl.grading.verify (math-verify)",
        }
        summary = _summarize(name, probs, samples, grades, policy.source, step, protocol)
        summary["time_s"] = round(time.perf_counter() - t0, 3)
        new_tokens = sum(len(s.token_ids) for per in samples for s in per)
        summary["tokens_per_s"] = round(new_tokens / gen_s, 2) if gen_s > 0 else None
        _write_outputs(Path(out_dir) / bench_dir_name(name), summary, probs, samples, grades)
        results[name] = summary
    return results


def _generate(engine: Engine, prompts, params, batch_size, progress, name) -> list[list[Sample]]:
    """n samples per prompt, a chunk of prompts per call (for progress); chunk c is seeded seed + c."""
    from dataclasses import replace

    per_call = max(1, batch_size // params.n)
    task = progress.add_task(f"{name}: generating", total=len(prompts)) if progress else None
    samples: list[list[Sample]] = []
    for c, start in enumerate(range(0, len(prompts), per_call)):
        chunk = prompts[start:start + per_call]
        out = engine.generate(chunk, replace(params, seed=None if params.seed is None else params.seed + c))
        if len(out) != len(chunk) or any(len(per) != params.n for per in out):
            counts = [len(per) for per in out]
            raise RuntimeError(f"engine returned {counts} samples for {len(chunk)} prompts, n={params.n} each")
        samples.extend(out)
        if progress:
            progress.advance(task, len(chunk))
    return samples


def _grade(name: str, probs, samples, timeout_s: float, progress) -> list[list[GradeResult]]:
    """Grades ``[P][n]`` in the order of ``samples``."""
    from rbctl.tasks import links as builtin
    from rbctl.grading.verify import GradeResult, grade_many

    texts = [s.text for per in samples for s in per]
    golds = [p.answer for p, per in zip(probs, samples) for _ in per]
    task = progress.add_task(f"{name}: grading", total=len(texts)) if progress else None
    flat: list[GradeResult] = []
    for start in range(0, len(texts), GRADE_CHUNK):
        t, g = texts[start:start + GRADE_CHUNK], golds[start:start + GRADE_CHUNK]
        if name == BUILTIN_BENCHMARK:
            for text, gold in zip(t, g):
                extracted = builtin.extract_answer(text)
                status = "ok" if extracted is not None else "no_answer"
                flat.append(GradeResult(builtin.check(text, gold), extracted, status))
        else:
            flat += grade_many(t, g, timeout_s=timeout_s)
        if progress:
            progress.advance(task, len(t))
    n = len(samples[0])
    return [flat[i * n:(i + 1) * n] for i in range(len(samples))]


def _summarize(name, probs, samples, grades, source, step, protocol) -> dict:
    import numpy as np

    from rbctl.grading.metrics import summarize
    from rbctl.grading.verify import STATUSES, answers_equivalent

    n = len(samples[0])
    correct = np.array([[g.correct for g in per] for per in grades], dtype=bool)  # [P, n]
    answers = [[g.extracted for g in per] for per in grades]
    if name == BUILTIN_BENCHMARK:
        equivalent = str.__eq__
    else:
        timeout = protocol["grader_timeout_s"]
        equivalent = lambda a, b: answers_equivalent(a, b, timeout_s=timeout)  # noqa: E731
    metrics = summarize(correct, answers, equivalent=equivalent)
    metrics = {("avg@n" if k.startswith("avg@") else k): v for k, v in metrics.items()}
    counts = Counter(g.status for per in grades for g in per)
    return {
        "benchmark": name,
        "model": source,
        "step": step,
        "n": n,
        "num_problems": len(probs),
        "metrics": metrics,
        "per_problem": [{"id": p.id, "n": n, "correct": int(c)} for p, c in zip(probs, correct.sum(axis=1))],
        "grader": {s: counts.get(s, 0) for s in STATUSES},
        "truncated": float(np.mean([not s.finished for per in samples for s in per])),
        "mean_new_tokens": float(np.mean([len(s.token_ids) for per in samples for s in per])),
        "protocol": protocol,
    }


def _write_outputs(bench_dir: Path, summary, probs, samples, grades) -> None:
    bench_dir.mkdir(parents=True, exist_ok=True)
    lines = []
    for p, per_s, per_g in zip(probs, samples, grades):
        for j, (s, g) in enumerate(zip(per_s, per_g)):
            lines.append(json.dumps({
                "id": p.id, "sample": j, "completion": s.text, "extracted": g.extracted, "gold": p.answer,
                "correct": bool(g.correct), "status": g.status, "finished": bool(s.finished),
                "num_tokens": len(s.token_ids),
            }, ensure_ascii=False))
    write_atomic(bench_dir / "samples.jsonl", "".join(line + "\n" for line in lines))
    write_atomic(bench_dir / "summary.json", json.dumps(summary, indent=2, ensure_ascii=False) + "\n")


def _is_custom_spec(name: str) -> bool:
    """``file:…``, ``hf:…`` or a path to a .jsonl/.parquet file (rbctl.tasks.registry' custom specs)."""
    return name.startswith(("file:", "hf:")) or name.split("@")[0].endswith((".jsonl", ".parquet"))


def bench_dir_name(benchmark: str) -> str:
    """A folder name for a benchmark or custom spec (``file:data/x.jsonl@q,a`` -> ``x``,
    ``hf:openai/gsm8k:main:test`` -> ``gsm8k_main_test``)."""
    if _is_custom_spec(benchmark):
        body = benchmark.removeprefix("file:").removeprefix("hf:").split("@")[0]
        benchmark = re.sub(r"\.(jsonl|parquet)$", "", body.rstrip("/").split("/")[-1]).replace(":", "_")
    return sanitize(benchmark)


def sanitize(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "model"


def _versions() -> dict[str, str | None]:
    out = {}
    for dist in ("rbctl", "torch", "transformers", "math-verify"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


# ---------------------------------------------------------------------------------------------
# Periodic evaluation lines (RUN_DIR/eval.jsonl) and the command
# ---------------------------------------------------------------------------------------------


def periodic_eval_line(summary: dict, step: int) -> dict:
    """One flat line of ``RUN_DIR/eval.jsonl`` from one benchmark's summary:
    ``{"step", "benchmark", "avg@n", "pass@1", …, "maj@K", "n"}`` (values only, no intervals)."""
    line = {"step": step, "benchmark": summary["benchmark"]}
    line.update({k: v["value"] for k, v in summary["metrics"].items()})
    line["n"] = summary["n"]
    return line


def periodic_eval_lines(results: dict[str, dict], step: int) -> list[dict]:
    """`periodic_eval_line` for every benchmark of an `evaluate_policy` result."""
    return [periodic_eval_line(s, step) for s in results.values()]


def is_run_dir(path: Path) -> bool:
    """An rbctl run directory (the same test as rbctl.rollout.models.resolve_source)."""
    return path.is_dir() and ((path / "metrics.jsonl").exists() or (path / "checkpoints").is_dir())


def checkpoint_step(source: str) -> int | None:
    """The step of a run-directory checkpoint path ``…/checkpoints/step_000120/model`` (else None)."""
    m = re.search(r"checkpoints/step_(\d+)/model/?$", source)
    return int(m.group(1)) if m else None


def default_out_dir(model: str, step: int | None) -> Path:
    """``RUN_DIR/eval/step_XXXXXX`` for a run directory (where `rbctl report` looks), else
    ``runs/eval/<model name>``."""
    path = Path(model).expanduser()
    if is_run_dir(path):
        if step is None:
            raise UserError(f"cannot tell the checkpoint step of {model}; pass --out")
        return path / "eval" / f"step_{step:06d}"
    name = path.name.removesuffix(".gguf") if path.exists() else model
    return Path("runs") / "eval" / sanitize(name.replace("/", "_"))


def results_table(results: dict[str, dict]):
    """A rich Table, one column per benchmark and one row per metric (percent, 95% interval)."""
    from rich.table import Table

    table = Table(title="rbctl eval: % correct [95% bootstrap CI over problems]")
    table.add_column("metric")
    for name in results:
        table.add_column(name, justify="right")
    table.add_row("problems × n", *(f"{s['num_problems']} × {s['n']}" for s in results.values()))
    metric_names = dict.fromkeys(m for s in results.values() for m in s["metrics"])
    for m in metric_names:
        cells = []
        for s in results.values():
            v = s["metrics"].get(m)
            cells.append(f"{100 * v['value']:.1f} [{100 * v['ci_low']:.1f}, {100 * v['ci_high']:.1f}]" if v else "-")
        table.add_row(m, *cells)
    return table


def _builtin_task_of(model: str, step: int | None):
    """The built-in task settings recorded with a built-in policy (a run dir or its checkpoint), else None."""
    from rbctl.tasks.links import task_spec_of
    from rbctl.rollout.models import resolve_source

    if model == "builtin":
        return None
    try:
        return task_spec_of(Path(resolve_source(model, step)[0]))
    except UserError:
        return None


def run_eval(
    model: str, cfg: EvalConfig, out_dir: Path | None = None, step: int | None = None, console=None
) -> dict[str, dict]:
    """Load ``model`` (hub id, dir, GGUF file, run directory, or ``builtin``) and evaluate it.

    For a run directory, ``step`` picks the checkpoint (default: the latest) and the default
    ``out_dir`` is ``RUN_DIR/eval/step_XXXXXX``.
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from rbctl.rollout.models import load_policy, resolve_source

    console = console or Console()
    engine_class(cfg.engine)
    problems = load_problems(cfg, _builtin_task_of(model, step))  # bad names/data fail before the model loads
    ckpt_step = step
    if model != "builtin" and is_run_dir(Path(model).expanduser()):
        ckpt_step = checkpoint_step(resolve_source(model, step)[0])
    out_dir = Path(out_dir) if out_dir is not None else default_out_dir(model, ckpt_step)
    policy = load_policy(model, device=cfg.device, dtype=cfg.dtype, step=step, log=console.print)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        results = evaluate_policy(policy, cfg, out_dir, progress=progress, step=ckpt_step, problems=problems)
    console.print(results_table(results))
    console.print(f"results in {out_dir}")
    return results
