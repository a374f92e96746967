"""Each method's config block, built from its registry record (rbctl.algo.registry), so a method's
defaults, descriptions and bounds are written once, in its record.

A method with settings has one block, the `algo` field of its name (`algo.<name>`), whose keys are
exactly its settings. The block of a selected method (kinds estimator and policy loss, chosen by
`algo.estimator` / `algo.policy_loss`) is null unless that method is selected, and then holds its
defaults unless given; the block of an optional method (token masks, reward transforms) is
null = off. A sampling hook has no settings: its key `rollout.<name>` is a bool.
"""

from __future__ import annotations

import typing
from typing import Any, Optional

from pydantic import BaseModel, Field, create_model, model_validator

from rbctl.algo import registry
from rbctl.algo.registry import OPTIONAL, REQUIRED, SELECTED, Method
from rbctl.config.base import Section


def _setting_types(m: Method) -> dict[str, Any]:
    hints = typing.get_type_hints(m.fn)
    return {name: hints.get(name, Any) for name in m.settings}


def block_model(m: Method) -> type[Section]:
    """The pydantic block of method `m`: one field per setting, and `m.check` as its validator."""
    types = _setting_types(m)
    fields = {name: (types[name], Field(... if s.default is REQUIRED else s.default, description=s.doc, **s.bounds))
              for name, s in m.settings.items()}
    validators = {}
    if m.check is not None:
        def _check(self, _m=m):
            problem = _m.check(self.model_dump())
            if problem:
                raise ValueError(problem)
            return self
        validators["_check"] = model_validator(mode="after")(_check)
    title = "".join(part.capitalize() for part in m.name.split("_"))
    return create_model(f"{title}Cfg", __base__=Section, __doc__=f"{m.title} ({m.source}).",
                        __validators__=validators, **fields)


def has_block(m: Method) -> bool:
    return m.kind in OPTIONAL or (m.kind in SELECTED and bool(m.settings))


def _block_doc(m: Method) -> str:
    if m.kind in OPTIONAL:
        return f"{m.title}; null = off."
    required = any(s.default is REQUIRED for s in m.settings.values())
    then = "then required" if required else "null there = the defaults below"
    return f"{m.title}: its settings (algo.{m.kind} {m.name} only; {then})."


def block_fields() -> dict[str, tuple]:
    """The `algo` fields of the methods' blocks, in registry order (after checking that every
    record's settings match its function: a mismatch fails here, when the schema is built)."""
    registry.check_settings()
    return {m.name: (Optional[block_model(m)], Field(None, description=_block_doc(m)))
            for m in registry.METHODS.values() if has_block(m)}


def hook_fields() -> dict[str, tuple]:
    """The `rollout` fields of the sampling hooks: a bool each, false = off."""
    return {m.name: (bool, Field(False, description=m.title)) for m in registry.of_kind("sampling_hook")}


def hooks_on(rollout: BaseModel) -> list[Method]:
    """The sampling hooks a `rollout` section switches on."""
    return [m for m in registry.of_kind("sampling_hook") if getattr(rollout, m.name, False)]


def optional_on(a: BaseModel, kind: str) -> list[Method]:
    """The optional methods of `kind` (token_mask, reward_transform) an `algo` section switches on."""
    return [m for m in registry.of_kind(kind) if getattr(a, m.name, None) is not None]


def fill_selected(schema: type[BaseModel], data):
    """A raw `algo` dict with the selected estimator's and policy loss's blocks, when not given,
    set to their defaults ({})."""
    if isinstance(data, dict):
        for kind in SELECTED:
            name = data.get(kind, schema.model_fields[kind].default)
            if isinstance(name, str) and name in schema.model_fields and data.get(name) is None:
                data = {**data, name: {}}
    return data


def check_selection(a: BaseModel) -> None:
    """ValueError unless only the selected methods' blocks are set, and the estimator composes with
    the budget and with the reward transforms that are on."""
    for kind in SELECTED:
        chosen = getattr(a, kind)
        for m in registry.of_kind(kind):
            if m.name != chosen and has_block(m) and getattr(a, m.name) is not None:
                raise ValueError(f"algo.{m.name} holds the settings of algo.{kind} {m.name}, but algo.{kind} is "
                                 f"{chosen}: set algo.{m.name} to null (or algo.{kind} to {m.name})")
    est = registry.get_estimator(a.estimator)
    if a.budget is not None and not est.composes_with_budget:
        raise ValueError(f"algo.estimator {a.estimator} does not compose with algo.budget ({est.no_budget}); set algo.budget to null")
    if est.binary_rewards:
        for m in optional_on(a, "reward_transform"):
            raise ValueError(f"algo.{m.name} does not compose with algo.estimator {a.estimator} "
                             "(its rewards must stay binary)")


def at_most_problems(cfg: BaseModel) -> list[str]:
    """Settings above the config key their `Setting.at_most` names (e.g. a k of at most rollout.group_size)."""
    out = []
    for m in registry.METHODS.values():
        block = getattr(cfg.algo, m.name, None) if has_block(m) else None
        if not isinstance(block, BaseModel):
            continue
        for name, s in m.settings.items():
            if s.at_most is None:
                continue
            limit = cfg
            for part in s.at_most.split("."):
                limit = getattr(limit, part)
            value = getattr(block, name)
            if value > limit:
                out.append(f"algo.{m.name}.{name}={value} must be <= {s.at_most}={limit}")
    return out


def method_params(a: BaseModel, name: str) -> dict[str, object]:
    """The keyword arguments of method `name`'s function from the config: its block's values, and
    the shared `algo` keys (the PPO clip) where the function takes one its block does not hold."""
    m = registry.METHODS[name]
    block = getattr(a, name, None)
    own = block.model_dump() if isinstance(block, BaseModel) else {}
    return {p: own[p] if p in own else getattr(a, p) for p in m.params if p not in m.needs}
