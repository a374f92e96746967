"""The built-in tasks by kind: `links` (follow k hops, the embedded quick default), `fixpoint`
(follow the links to a fixed point: the plateau testbed, docs/plateau_task.md) and `maze` (MaxRL's
maze navigation, a published testbed: docs/maze_task.md).

Every built-in task module has the same entry points: `TaskSpec` and `WarmStartSpec` (frozen
dataclasses; `TaskSpec.kind` names the task), `problems(spec, split)`, `format_problem` (the prompt
text: the policy's `builtin` template), `max_answer_tokens(spec)`, `benchmark(spec)` (its test split
as the benchmark `builtin`, with the task's grader: `extract_answer`, and `check` where many answers
are right; the training reward reuses it), and for its policy `alphabet(spec)` (a string: one token
per character; a tuple: one per word), `model_config(spec, ws, vocab_size)` and
`sft_warm_start(spec, ws)`. The policy itself is built here, the same way for every task, through
`rbctl.tasks.tiny` (imported, with torch, only when a policy is built).

A task's settings are defined once, in its dataclasses: a field made with `setting(...)` is a key of
the training config's `data.builtin` section (rbctl.config.data_builtin builds each task's section from
them: the default, the one-line description and the bounds come from here), and the spec's
`__post_init__` checks are config errors; the other fields keep their defaults and are recorded in
the policy's marker.
"""

from __future__ import annotations

import dataclasses
import importlib
import typing
from pathlib import Path
from types import ModuleType

from rbctl.errors import UserError
from rbctl.store.rundir import builtin_task_record

KINDS = {"links": "rbctl.tasks.links", "fixpoint": "rbctl.tasks.fixpoint", "maze": "rbctl.tasks.maze"}


@dataclasses.dataclass(frozen=True)
class ConfigKey:
    """One key of `data.builtin` for one task: which spec (`"task"` or `"warm_start"`) and field it sets."""

    key: str
    spec: str
    field: str
    type: object
    default: object
    doc: str
    bounds: dict


def task(kind: str) -> ModuleType:
    if kind not in KINDS:
        raise UserError(f"unknown built-in task {kind!r}; valid: {', '.join(KINDS)}")
    return importlib.import_module(KINDS[kind])


def module_of(spec) -> ModuleType:
    """The task module of a `TaskSpec` (of any built-in task)."""
    return task(spec.kind)


def config_keys(kind: str) -> list[ConfigKey]:
    """The `data.builtin` keys of task `kind`, TaskSpec's first, in field order."""
    mod = task(kind)
    out = []
    for spec, cls in (("task", mod.TaskSpec), ("warm_start", mod.WarmStartSpec)):
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if "doc" in f.metadata:
                out.append(ConfigKey(f.metadata["key"] or f.name, spec, f.name, hints[f.name], f.default,
                                     f.metadata["doc"], f.metadata["bounds"]))
    return out


def specs_from_config(b) -> tuple:
    """(TaskSpec, WarmStartSpec) of the task `b.task` from its `data.builtin` config section: each
    field made with `setting` from its key, every other field its default. A spec's own check (its
    `__post_init__`) raises ValueError with the keys to change."""
    mod = task(b.task)
    values: dict[str, dict] = {"task": {}, "warm_start": {}}
    for k in config_keys(b.task):
        values[k.spec][k.field] = getattr(b, k.key)
    return mod.TaskSpec(**values["task"]), mod.WarmStartSpec(**values["warm_start"])


def task_spec_of(model_dir: Path):
    """The task settings a built-in policy folder (warm start or checkpoint) records, else None."""
    record = builtin_task_record(model_dir) or {}
    if not record.get("task"):
        return None
    return task(record.get("kind", "links")).TaskSpec(**record["task"])


def benchmark(spec):
    """`spec`'s test split as the benchmark `builtin`, with the task's grader (its `benchmark(spec)`)."""
    return module_of(spec).benchmark(spec)


def register_benchmark(spec=None) -> None:
    """Register `spec`'s test split as the benchmark `builtin` (the links task's defaults if None)."""
    from rbctl.tasks.benchmarks import register

    register(benchmark(spec if spec is not None else task("links").TaskSpec()), replace=True)


def build_tokenizer(spec):
    from rbctl.tasks import tiny

    return tiny.build_tokenizer(module_of(spec).alphabet(spec))


def model_config(spec, ws, vocab_size: int):
    """The transformers config of the task's policy (no weights: count its parameters on the meta device)."""
    return module_of(spec).model_config(spec, ws, vocab_size)


def build_model(spec, ws, vocab_size: int):
    from rbctl.tasks import tiny

    return tiny.build_model(model_config(spec, ws, vocab_size))


def warm_start_path(spec, ws) -> Path:
    from rbctl.tasks import tiny

    return tiny.warm_start_path(spec.kind, spec, ws)


def default_warm_start(log=print) -> Path:
    """Path of the default built-in policy (`builtin` as a model name): the links task's warm start."""
    spec = task("links").TaskSpec()
    return warm_started(spec, module_of(spec).WarmStartSpec(), log=log)


def warm_started(spec, ws, log=print, shipped: str | None = None) -> Path:
    """Path of the warm-started policy of `spec`'s task: the shipped warm start `shipped` (checked
    against `spec`, `ws` and its SHA-256s: rbctl.tasks.shipped), else the recipe's cached one,
    trained (under a file lock) if missing."""
    from rbctl.tasks import tiny

    if shipped is not None:
        from rbctl.tasks.shipped import shipped_warm_start

        return shipped_warm_start(shipped, spec, ws)

    return tiny.warm_started(spec.kind, spec, ws, lambda: module_of(spec).sft_warm_start(spec, ws), log=log)
