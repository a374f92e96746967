"""The training config's `data.builtin` section: one section per built-in task, built from the task's
own settings (the `rbctl.tasks.settings.setting` fields of its TaskSpec and WarmStartSpec), so every
default, description and bound is defined once, in the task. `task` selects the section (links when
absent); a key of another task is an unknown key, and the task's own checks (its specs'
`__post_init__`) are config errors.

`BuiltinTaskBase` holds the keys every task has; a key shared by all tasks belongs there.
"""

from __future__ import annotations

from typing import Annotated, Literal, Optional, Union

from pydantic import Discriminator, Field, Tag, create_model, model_validator

from rbctl.config.base import Section
from rbctl.tasks.builtin import KINDS, config_keys, specs_from_config

DEFAULT_TASK = "links"
TASK_DOC = ("Tasks: 'links' (follow k hops, the hop count shown; the quick default), 'fixpoint' (follow the links to a "
            "fixed point, depth hidden: the plateau testbed, docs/plateau_task.md), 'maze' (MaxRL's maze navigation, a "
            "published testbed: docs/maze_task.md).")


class BuiltinTaskBase(Section):
    """The keys every built-in task has."""

    task: str = Field(DEFAULT_TASK, description="The built-in task (each section narrows it to its own name).")
    warm_start: Optional[str] = Field(None, description="A warm start shipped inside the package (rbctl/tasks/warm_starts/, e.g. fixpoint-ws0), loaded and SHA-256-checked instead of training the SFT recipe; its recorded task and SFT settings must equal this section's (all but the SFT seed, which its name carries). null = train the recipe once and cache it (RBCTL_CACHE).")

    @model_validator(mode="after")
    def _task_checks(self):
        specs_from_config(self)  # the task's own checks raise ValueError naming the keys
        return self


def _section(kind: str) -> type[BuiltinTaskBase]:
    fields = {"task": (Literal[kind], Field(kind, description=f"'{kind}' selects this task's keys (below)."))}
    for k in config_keys(kind):
        fields[k.key] = (k.type, Field(k.default, description=k.doc, **k.bounds))
    return create_model(f"Builtin{kind.capitalize()}Cfg", __base__=BuiltinTaskBase,
                        __doc__=f"`data.builtin` with task: {kind}.", **fields)


SECTIONS: dict[str, type[BuiltinTaskBase]] = {kind: _section(kind) for kind in KINDS}


def _task_of(value) -> str:
    return value.get("task", DEFAULT_TASK) if isinstance(value, dict) else getattr(value, "task", DEFAULT_TASK)


BuiltinCfg = Annotated[
    Union[tuple(Annotated[cls, Tag(kind)] for kind, cls in SECTIONS.items())],
    Discriminator(_task_of, custom_error_type="builtin_task",
                  custom_error_message=f"unknown built-in task; valid: {', '.join(KINDS)}"),
]


def default_section() -> BuiltinTaskBase:
    return SECTIONS[DEFAULT_TASK]()
