"""The config reference, docs/config.md: every key of a training config and of a sweep file, with its
type, default and description, generated from the schemas (rbctl.config.train, rbctl.config.sweep).

    python scripts/config_doc.py > docs/config.md

`tests/integration/test_cli.py` checks that docs/config.md is current.
"""

from __future__ import annotations

import sys
import typing
from pathlib import Path
from typing import Literal, Union

from pydantic import BaseModel

if __package__ in (None, ""):  # run as a script: make the checkout importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rbctl.config.sweep import SweepConfig  # noqa: E402
from rbctl.config.train import TrainConfig  # noqa: E402


def _type_name(ann) -> str:
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is Literal:
        return " / ".join(repr(a) for a in args)
    if origin is Union:
        return " or ".join("null" if a is type(None) else _type_name(a) for a in args)
    if origin is list:
        return f"list[{_type_name(args[0])}]" if args else "list"
    if origin is dict:
        return "mapping"
    return getattr(ann, "__name__", str(ann))


def _section_of(ann):
    for a in (ann, *typing.get_args(ann)):
        if isinstance(a, type) and issubclass(a, BaseModel):
            return a
    return None


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def schema_markdown(schema: type[BaseModel] = TrainConfig, title: str = "Training config (`rbctl train`)") -> str:
    """A Markdown table of every key of `schema`: dotted name, type, default, description."""
    rows = []

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, f in model.model_fields.items():
            key = prefix + name
            sub = _section_of(f.annotation)
            if sub is not None:
                optional = sub is not f.annotation
                rows.append((key, "section" + (" or null" if optional else ""), "null" if optional else "",
                             f.description or ""))
                walk(sub, key + ".")
                continue
            default = f.default_factory() if f.default_factory is not None else f.default
            shown = "required" if f.is_required() else ("null" if default is None else repr(default))
            rows.append((key, _type_name(f.annotation), shown, f.description or ""))

    walk(schema, "")
    lines = [f"## {title}", "", "| key | type | default | description |", "|---|---|---|---|"]
    lines += [f"| `{k}` | {_cell(t)} | {_cell(d)} | {_cell(desc)} |" for k, t, d, desc in rows]
    return "\n".join(lines) + "\n"


def reference_markdown() -> str:
    """docs/config.md: every key of the training config and of a sweep file."""
    head = ("# Config reference\n\nGenerated from the schemas in `rbctl/config/train.py` and `rbctl/config/sweep.py` "
            "by `python scripts/config_doc.py > docs/config.md`; `tests/integration/test_cli.py` checks that this file is "
            "current.\n\n")
    return head + schema_markdown() + "\n" + schema_markdown(SweepConfig, "Sweep file (`rbctl ablate`)")


if __name__ == "__main__":
    print(reference_markdown(), end="")
