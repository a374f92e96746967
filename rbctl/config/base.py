"""What every schema shares: the strict `Section` base, YAML reading, `--set key=value` overrides,
validation into one-line `UserError`s, and dumping a resolved config."""

from __future__ import annotations

import difflib
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Sequence, Union

import yaml
from pydantic import BaseModel, ConfigDict, Tag, ValidationError

from rbctl.errors import UserError


# the config keys that may differ between two runs of one training config (the seed, the machine's
# threads, where it logs, how long its processes wait for each other, the hardware it is planned for):
# a sweep's same-training check and the report's same-config flag ignore them
RUN_ONLY_KEYS = ("seed", "threads", "log", "dist_timeout_min", "hardware")


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def sections_of(ann) -> dict[str, type[BaseModel]]:
    """The config sections an annotation holds, by tag: {"": Section} for a section (or an optional
    one), {tag: Section, ...} for a tagged union (`data.builtin`: one section per task), {} otherwise."""
    origin = typing.get_origin(ann)
    if origin is Annotated:
        base, *meta = typing.get_args(ann)
        inner, tag = sections_of(base), next((m.tag for m in meta if isinstance(m, Tag)), None)
        return {tag: next(iter(inner.values()))} if tag is not None and len(inner) == 1 else inner
    if origin in (Union, types.UnionType):
        return {k: v for a in typing.get_args(ann) for k, v in sections_of(a).items()}
    return {"": ann} if isinstance(ann, type) and issubclass(ann, BaseModel) else {}


def _all_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    keys = []
    for name, f in model.model_fields.items():
        keys.append(prefix + name)
        for sub in sections_of(f.annotation).values():
            keys.extend(_all_keys(sub, prefix + name + "."))
    return keys


def _key_path(model: type[BaseModel], loc) -> tuple[list[str], str | None, dict[str, type[BaseModel]]]:
    """pydantic's error location as config keys: a tagged union's tag (pydantic puts it in the
    location) is left out. Returns (keys, the last tag passed or None, that union's sections)."""
    keys, here, tag, union = [], {"": model}, None, {}
    for part in map(str, loc):
        if part and part in here:  # a tag: pydantic's step into one member of the union
            tag, union, here = part, here, {"": here[part]}
            continue
        keys.append(part)
        cls = here.get("")
        here = sections_of(cls.model_fields[part].annotation) if cls is not None and part in cls.model_fields else {}
    return keys, tag, union


def _format_error(err: ValidationError, model: type[BaseModel], source: str) -> str:
    e = err.errors()[0]
    keys, tag, union = _key_path(model, e["loc"])
    loc = ".".join(keys)
    if e["type"] == "extra_forbidden":
        if tag is not None:  # a key another member of the union has (another built-in task's)
            owners = [t for t, cls in union.items() if keys[-1] in cls.model_fields]
            close = difflib.get_close_matches(keys[-1], union[tag].model_fields, n=1, cutoff=0.6)
            hint = (f" (did you mean '{'.'.join(keys[:-1] + close)}'?)" if close else
                    f" (a key of {' and '.join(repr(o) for o in owners)}: select it first)" if owners else "")
            return f"{source}: unknown config key '{loc}' for '{tag}'{hint}"
        close = difflib.get_close_matches(loc, _all_keys(model), n=1, cutoff=0.6)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        return f"{source}: unknown config key '{loc}'{hint}"
    if e["type"] == "missing":  # every missing key at once, not one per attempt
        missing = list(dict.fromkeys(".".join(_key_path(model, x["loc"])[0]) for x in err.errors() if x["type"] == "missing"))
        if len(missing) > 1:
            return f"{source}: config keys {', '.join(repr(k) for k in missing)} are required"
        return f"{source}: config key '{loc}' is required"
    msg = e["msg"].removeprefix("Value error, ")
    if loc and isinstance(e.get("input"), dict):  # an error of a whole section: its message names the keys
        return f"{source}: config key '{loc}': {msg}"
    if loc:
        return f"{source}: config key '{loc}': {msg} (got {e.get('input')!r})"
    return f"{source}: {msg}"


def parse_override(item: str) -> tuple[list[str], Any]:
    if "=" not in item:
        raise UserError(f"--set '{item}': expected key.path=value")
    key, raw = item.split("=", 1)
    try:
        value = yaml.safe_load(raw) if raw != "" else ""
    except yaml.YAMLError:
        value = raw
    return key.strip().split("."), value


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    for item in overrides:
        path, value = parse_override(item)
        node = data
        for part in path[:-1]:
            if node.get(part) is None:  # absent, or an optional section written as null (an optional method block: null)
                node[part] = {}
            nxt = node[part]
            if not isinstance(nxt, dict):
                raise UserError(f"--set '{item}': '{part}' is not a section")
            node = nxt
        node[path[-1]] = value
    return data


def flatten(d: dict, prefix: str = "") -> dict:
    """A nested dict's leaves under dotted keys (``{"a": {"b": 1}}`` -> ``{"a.b": 1}``), as `--set`
    names them; an empty dict is a leaf."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


def read_yaml(path: Path) -> dict:
    path = Path(path)
    if not path.exists():
        raise UserError(f"config file {path} does not exist")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise UserError(f"{path}{where}: invalid YAML ({getattr(e, 'problem', e)})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: the top level must be a mapping of config keys")
    return data


def _blame(err: ValidationError, model: type[BaseModel], source: str, overrides: Sequence[str]) -> str:
    """Who set the offending key: the last `--set` item whose key path contains the error's key (or
    lies inside it), else the file. An error of the whole config (no key), or a missing key (set
    nowhere: any input may have asked for it), names the file and every override."""
    if not overrides:
        return source
    first = err.errors()[0]
    loc = _key_path(model, first["loc"])[0]
    if not loc or first["type"] == "missing":
        return f"{source} with " + ", ".join(f"--set '{item}'" for item in overrides)
    for item in reversed(list(overrides)):
        path, _ = parse_override(item)
        n = min(len(path), len(loc))
        if path[:n] == loc[:n]:
            return f"--set '{item}'"
    return source


def validate(schema: type[BaseModel], data: dict, source: str, overrides: Sequence[str] = ()):
    """`schema.model_validate(data)`, a failure as a one-line `UserError` naming the key and where it
    was set: `source` (the file), or the `--set key=value` item among `overrides` that set it."""
    try:
        return schema.model_validate(data)
    except ValidationError as e:
        raise UserError(_format_error(e, schema, _blame(e, schema, source, overrides))) from None


def dump_config(cfg: BaseModel) -> str:
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
