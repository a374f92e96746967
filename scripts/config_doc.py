"""The config reference, docs/config.md: every key of a training config, of a sweep file and of a runs
manifest, with its type, default and description, generated from the schemas (rbctl.config.train,
rbctl.config.sweep, rbctl.config.manifest).

    python scripts/config_doc.py > docs/config.md

`tests/integration/test_cli.py` checks that docs/config.md is current.
"""

from __future__ import annotations

import typing
from typing import Literal, Union

from pydantic import BaseModel


from rbctl.config.base import sections_of
from rbctl.config.manifest import RunsManifest
from rbctl.config.sweep import SweepConfig
from rbctl.config.train import TrainConfig


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


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def schema_markdown(schema: type[BaseModel] = TrainConfig, title: str = "Training config (`rbctl train`)") -> str:
    """A Markdown table of every key of `schema`: dotted name, type, default, description."""
    rows = []

    def walk(model: type[BaseModel], prefix: str, tag: str = "") -> None:
        for name, f in model.model_fields.items():
            key = prefix + name
            subs = sections_of(f.annotation)
            if "" in subs:
                optional = subs[""] is not f.annotation
                rows.append((key, "section" + (" (or null = off)" if optional else ""), "null" if optional else "",
                             f.description or "", ""))
                walk(subs[""], key + ".")
                continue
            if subs:  # a tagged union (data.builtin): each member's keys, marked with its tag
                rows.append((key, "section, by task: " + " / ".join(subs), "", f.description or "", ""))
                for t, sub in subs.items():
                    walk(sub, key + ".", t)
                continue
            default = f.default_factory() if f.default_factory is not None else f.default
            shown = "required" if f.is_required() else ("null" if default is None else repr(default))
            rows.append((key, _type_name(f.annotation), shown, f.description or "", tag))

    walk(schema, "")
    lines = [f"## {title}", "", "| key | type | default | description |", "|---|---|---|---|"]
    lines += [f"| `{k}`{f' ({tag})' if tag else ''} | {_cell(t)} | {_cell(d)} | {_cell(desc)} |" for k, t, d, desc, tag in rows]
    return "\n".join(lines) + "\n"


def reference_markdown() -> str:
    """docs/config.md: every key of the training config, of a sweep file and of a runs manifest."""
    head = ("# Config reference\n\nGenerated from the schemas in `rbctl/config/train.py`, `rbctl/config/sweep.py` and "
            "`rbctl/config/manifest.py` "
            "by `python scripts/config_doc.py > docs/config.md`; `tests/integration/test_cli.py` checks that this file is "
            "current.\n\n")
    return (head + schema_markdown() + "\n" + schema_markdown(SweepConfig, "Sweep file (`rbctl ablate`)") + "\n"
            + schema_markdown(RunsManifest, "Runs manifest (`rbctl report MANIFEST.yaml`: runs trained elsewhere, "
                              "docs/your_runs.md)"))


if __name__ == "__main__":
    print(reference_markdown(), end="")
