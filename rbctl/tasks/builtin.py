"""The built-in tasks by kind: `links` (follow k hops, the embedded quick default) and `fixpoint`
(follow the links to a fixed point: the plateau testbed, docs/plateau_task.md).

Every built-in task module has the same entry points: `TaskSpec` and `WarmStartSpec` (frozen
dataclasses; `TaskSpec.kind` names the task), `problems(spec, split)`, `extract_answer`, `check`,
`format_problem`, `register_benchmark(spec)`, and for its policy `alphabet(spec)`,
`max_positions(spec)` and `sft_warm_start(spec, ws)`. The policy itself is built here, the same way
for every task, through `rbctl.tasks.tiny` (imported, with torch, only when a policy is built).
"""

from __future__ import annotations

import importlib
from dataclasses import fields
from pathlib import Path
from types import ModuleType

from rbctl.errors import UserError
from rbctl.store.rundir import builtin_task_record

KINDS = {"links": "rbctl.tasks.links", "fixpoint": "rbctl.tasks.fixpoint"}
# The warm-start settings the config sets: dataclass field -> data.builtin key (the others, such as
# the model's size and the SFT seed, are the dataclass's defaults and recorded in the policy's marker)
WARM_START_KEYS = {"demo_error": "demo_error", "walk_demo_frac": "walk_demo_frac",
                   "shortcut_demo_error": "shortcut_demo_error", "walk_phase": "walk_phase",
                   "steps": "warm_start_steps"}


def task(kind: str) -> ModuleType:
    if kind not in KINDS:
        raise UserError(f"unknown built-in task {kind!r}; valid: {', '.join(KINDS)}")
    return importlib.import_module(KINDS[kind])


def module_of(spec) -> ModuleType:
    """The task module of a `TaskSpec` (of any built-in task)."""
    return task(spec.kind)


def specs_from_config(b) -> tuple:
    """(TaskSpec, WarmStartSpec) of the task `b.task` from the `data.builtin` config section: every
    field of the task's `TaskSpec` from the config key of the same name, the warm start's from
    `WARM_START_KEYS`."""
    mod = task(b.task)
    spec = mod.TaskSpec(**{f.name: getattr(b, f.name) for f in fields(mod.TaskSpec) if hasattr(b, f.name)})
    ws = mod.WarmStartSpec(**{f.name: getattr(b, WARM_START_KEYS[f.name]) for f in fields(mod.WarmStartSpec)
                              if f.name in WARM_START_KEYS})
    return spec, ws


def task_spec_of(model_dir: Path):
    """The task settings a built-in policy folder (warm start or checkpoint) records, else None."""
    record = builtin_task_record(model_dir) or {}
    if not record.get("task"):
        return None
    return task(record.get("kind", "links")).TaskSpec(**record["task"])


def register_benchmark(spec=None) -> None:
    """Register `spec`'s test split as the benchmark `builtin` (the links task's defaults if None)."""
    spec = spec if spec is not None else task("links").TaskSpec()
    module_of(spec).register_benchmark(spec)


def build_tokenizer(spec):
    from rbctl.tasks import tiny

    return tiny.build_tokenizer(module_of(spec).alphabet(spec))


def build_model(spec, ws, vocab_size: int):
    from rbctl.tasks import tiny

    return tiny.build_model(ws, vocab_size, module_of(spec).max_positions(spec))


def warm_start_path(spec, ws) -> Path:
    from rbctl.tasks import tiny

    return tiny.warm_start_path(spec.kind, spec, ws)


def warm_started(spec, ws, log=print, shipped: str | None = None) -> Path:
    """Path of the warm-started policy of `spec`'s task: the shipped warm start `shipped` (checked
    against `spec`, `ws` and its SHA-256s: rbctl.tasks.shipped), else the recipe's cached one,
    trained (under a file lock) if missing."""
    from rbctl.tasks import tiny

    if shipped is not None:
        from rbctl.tasks.shipped import shipped_warm_start

        return shipped_warm_start(shipped, spec, ws)

    return tiny.warm_started(spec.kind, spec, ws, lambda: module_of(spec).sft_warm_start(spec, ws), log=log)
