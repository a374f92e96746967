"""The one evaluation schema. `EvalSection` holds what every evaluation sets: the benchmarks, the
sampling protocol, the engine and its batch limits. `EvalConfig` (`rbctl eval`'s options) adds the
prompt, seed, grader and loading settings; evaluation during training (`eval:` of a training
config, `EvalDuringTrainingCfg`) and a sweep's final evaluation (`eval:` of a sweep file,
`SweepEval`) are `EvalSection`s with their own defaults, and `for_run` makes an `EvalConfig` of
them, filling in the rest from the run's training config.

Engines and batches (docs/scaling.md, "Evaluation engine and batches"): the hf engine generates at
most `batch_size` sequences per call and at most `max_batch_tokens` sequence-tokens (sequences ×
(longest prompt + max_new_tokens)), by default half the memory free on the device over the KV-cache
bytes of one token (`rbctl.rollout.factory.default_max_batch_tokens`); vLLM schedules its own
batches. A run's evaluations use the run's engine: with vLLM the run's own engine instance.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, ValidationError

from rbctl.config.base import Section
from rbctl.errors import UserError
from rbctl.grading.extract import EXTRACTION_MODES
from rbctl.tasks.prompting import MATH_INSTRUCTION

CPU_LINEAR_KERNELS = ("auto", "torch", "onednn")  # model.cpu_linear / eval cpu_linear (rbctl.rollout.cpu_linear)


DEFAULT_BENCHMARKS = ("amc23", "aime24", "aime25")
# The links and fixpoint tasks' longest answers are well under 32 tokens; 32 leaves room without
# letting a policy that never stops run for 1024 tokens. A run of a task with longer answers (the
# maze) is evaluated with room for its longest answer (rbctl.eval.run).
BUILTIN_MAX_NEW_TOKENS = 32
# A real model's default answer budget for `rbctl eval` of a bare model.
DEFAULT_MAX_NEW_TOKENS = 1024


def _greedy_if_one(data: dict) -> float:
    # n = 1: greedy (Qwen2.5-Math, Dr. GRPO, LIMO protocols); n > 1: 0.6 (DeepSeek-R1, open-r1, QwQ)
    return 0.0 if data.get("n", 1) == 1 else 0.6


def _nucleus_unless_greedy(data: dict) -> float:
    return 1.0 if data.get("temperature", 0.0) == 0 else 0.95  # DeepSeek-R1's 0.95


class EvalSection(Section):
    """What every evaluation sets: benchmarks, sampling, engine and batch limits."""

    benchmarks: list[str] = Field(
        default_factory=lambda: list(DEFAULT_BENCHMARKS), min_length=1,
        description="Registered benchmark names (amc23, aime24, aime25, gsm8k, builtin) or custom specs "
        "(file:PATH.jsonl[@problem,answer], hf:ID[:config]:split[@problem,answer]).",
    )
    n: int = Field(1, ge=1, description="Samples per problem.")
    temperature: float = Field(
        default_factory=_greedy_if_one, ge=0.0,
        description="Sampling temperature, 0 = greedy. Default: 0 when n=1 (Qwen2.5-Math, Dr. GRPO, LIMO "
        "protocols), 0.6 when n>1 (DeepSeek-R1, open-r1, QwQ).",
    )
    top_p: float = Field(
        default_factory=_nucleus_unless_greedy, gt=0.0, le=1.0,
        description="Nucleus sampling mass. Default: 1.0 when greedy, else 0.95 (DeepSeek-R1).",
    )
    max_new_tokens: Optional[int] = Field(
        None, ge=1,
        description=f"Most generated tokens per sample. Default: {DEFAULT_MAX_NEW_TOKENS} (real models), "
        f"{BUILTIN_MAX_NEW_TOKENS} for a built-in policy, or its task's longest answer where longer (the maze).",
    )
    limit: Optional[int] = Field(None, ge=1, description="Evaluate only the first LIMIT problems of each benchmark (null = all).")
    data_dir: Optional[str] = Field(
        None, description="Folder with <benchmark>.jsonl files (default: $RBCTL_DATA_DIR, then the Hugging Face Hub).",
    )
    engine: Optional[Literal["hf", "vllm"]] = Field(
        None, description="Generation engine; null = the run's rollout engine (vLLM: the run's own engine instance).",
    )
    batch_size: Optional[int] = Field(
        None, ge=1, description="hf: most sequences per generate call; null = 256 on GPU, 64 on CPU.",
    )
    max_batch_tokens: Optional[int] = Field(
        None, ge=1,
        description="hf: most sequence-tokens per generate call, sequences × (longest prompt + max_new_tokens), "
        "the KV cache's size in tokens; null = half the device's free memory over the KV-cache bytes of one token.",
    )


class EvalConfig(EvalSection):
    """Options of `rbctl eval`, and the full config of every evaluation (`for_run`)."""

    engine: Literal["hf", "vllm"] = Field("hf", description="Generation engine.")
    seed: int = Field(0, description="Sampling seed.")
    template: Literal["auto", "chat", "plain", "builtin"] = Field(
        "auto", description="Prompt template; auto = built-in format for the built-in policy, else chat if the "
        "tokenizer has a chat template, else plain.",
    )
    instruction: str = Field(MATH_INSTRUCTION, description="Sentence appended to each problem (chat/plain templates).")
    extraction: Literal[EXTRACTION_MODES] = Field(
        "final", description="How the math grader finds an answer: final = the last \\boxed{}, else a final-answer "
        "phrase (docs/method.md, \"Answer extraction\"); last_number = then, without either, the completion's last "
        "number (lm-evaluation-harness's GSM8K flexible-extract). Not used by benchmarks with their own extractor.",
    )
    grader_timeout_s: float = Field(5.0, gt=0.0, description="Hard time limit of one math-verify comparison.")
    device: str = Field("auto", description="auto, cpu, cuda or cuda:N (used when the model is loaded here).")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="Weights dtype when loading; auto = bfloat16 on GPUs that support it, else float32.",
    )
    cpu_linear: Literal[CPU_LINEAR_KERNELS] = Field(
        "auto", description="Kernel of float32 Linear layers on the CPU (as model.cpu_linear in training): auto = "
        "oneDNN for a pretrained model on an AMD CPU, else torch's matmul.",
    )
    threads: int = Field(0, ge=0, description="torch CPU threads; 0 = torch's default.")
    precision: Optional[Literal["auto", "bf16-mixed", "fp32", "bf16-pure"]] = Field(
        None, description="The training precision of the run evaluated (its model.precision, rbctl.train.precision): "
        "generation runs under that precision's autocast (resolved by `rbctl eval`), as the run's own evaluations did; "
        "null = none (weights in `dtype`).",
    )


def build_config(**values) -> EvalConfig:
    """`EvalConfig` from options; a validation error becomes a one-line `UserError`."""
    try:
        return EvalConfig(**values)
    except ValidationError as e:
        err = e.errors()[0]
        where = "--" + str(err["loc"][0]).replace("_", "-") if err["loc"] else "config"
        raise UserError(f"invalid eval option {where}: {err['msg']}") from None
