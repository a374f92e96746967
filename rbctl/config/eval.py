"""The one evaluation schema: `rbctl eval`'s options. Evaluation during training (`eval:` of a
training config) and a sweep's final evaluation (`eval:` of a sweep file) set a subset of these
keys; `for_run` fills in the rest from the run's training config."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rbctl.errors import UserError
from rbctl.tasks.prompting import MATH_INSTRUCTION

DEFAULT_BENCHMARKS = ("amc23", "aime24", "aime25")
# The links and fixpoint tasks' longest answers are well under 32 tokens; 32 leaves room without
# letting a policy that never stops run for 1024 tokens. A run of a task with longer answers (the
# maze) is evaluated with room for its longest answer (rbctl.eval.run).
BUILTIN_MAX_NEW_TOKENS = 32


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
        f"{BUILTIN_MAX_NEW_TOKENS} for a built-in policy, or its task's longest answer where longer (the maze).",
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
