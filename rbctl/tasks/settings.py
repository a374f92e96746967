"""How a built-in task declares the settings the config sets: `setting(...)` fields of its TaskSpec
and WarmStartSpec dataclasses (read by `rbctl.tasks.builtin.config_keys` and `rbctl.config.data_builtin`).
No rbctl imports, so every task module can use it without importing the registry of tasks."""

from __future__ import annotations

import dataclasses


def setting(default, doc: str, *, key: str | None = None, **bounds):
    """A dataclass field that the config sets: `data.builtin.<key>` (default: the field's name),
    described by `doc`, validated with pydantic's `bounds` (ge, gt, le, lt)."""
    return dataclasses.field(default=default, metadata={"doc": doc, "key": key, "bounds": bounds})
