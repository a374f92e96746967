"""What the commands of `rbctl` share: the help's layout (usage lines in capitals, flags without a
type column), the options every command takes (`--debug`, `--set`), the help of `rbctl eval`'s
options from the evaluation config, seed lists, and the command line that resumes an interrupted
command (`resume_command`)."""

from __future__ import annotations

import re
import shlex
import sys

import typer
from typer.core import TyperCommand, TyperGroup

from rbctl.errors import UserError


class _FlagsWithoutMetavar:
    """A flag takes no value: show no `<bool>` type column for it (--help, --debug, --force...)."""

    def get_params(self, ctx):
        params = super().get_params(ctx)
        for p in params:
            if getattr(p, "is_flag", False) and p.metavar is None:
                p.metavar = ""
        return params


class Command(_FlagsWithoutMetavar, TyperCommand):
    def collect_usage_pieces(self, ctx):
        """Usage lines with arguments in capitals, as the help's text names them: `rbctl train
        [OPTIONS] CONFIG`, `[SWEEP]` when optional, `DIR...` when repeated (typer writes `{config}`)."""
        pieces = [self.options_metavar] if self.options_metavar else []
        for p in self.get_params(ctx):
            if getattr(p, "param_type_name", "") != "argument":
                pieces += p.get_usage_pieces(ctx)
                continue
            name = p.metavar or p.name.upper()
            repeat = "..." if p.nargs != 1 and "..." not in name else ""
            pieces.append((name if p.required else f"[{name}]") + repeat)
        return pieces


class Group(_FlagsWithoutMetavar, TyperGroup):
    pass


DEBUG = {"on": False}  # --debug was given: `rbctl.cli.run` shows tracebacks


def _debug(value: bool) -> bool:
    if value:
        DEBUG["on"] = True
    return value


# --debug before the command (`rbctl --debug train ...`) or after it (`rbctl train ... --debug`):
# every command takes the option, whose callback turns tracebacks on before the command runs.
DebugOpt = typer.Option(False, "--debug", help="Show full tracebacks for errors.", callback=_debug)
SetOpt = typer.Option(None, "--set", "-s", metavar="KEY=VALUE", help="Override a config value: key.path=value (repeatable).")


def package_version() -> str:
    """The installed distribution's version (package metadata), else the package's own `__version__`
    (a source checkout that is not installed)."""
    from importlib import metadata

    try:
        return metadata.version("rbctl")
    except metadata.PackageNotFoundError:
        from rbctl import __version__

        return __version__


def eval_help(name: str, run_key: str | None = None) -> str:
    """The help of `rbctl eval`'s option for `EvalConfig` field `name`: the field's description and
    default as the config model states them, and the config key of a run directory's protocol that
    the option overrides (`run_key`)."""
    from pydantic_core import PydanticUndefined

    from rbctl.config.eval import EvalConfig

    field = EvalConfig.model_fields[name]
    text = field.description
    default = field.default
    if field.default_factory is not None and not field.default_factory_takes_validated_data:
        default = field.default_factory()
    if isinstance(default, (list, tuple)):
        default = ",".join(map(str, default))
    if isinstance(default, str) and " " in default:
        default = f'"{default}"'
    if default is not None and default is not PydanticUndefined and "default" not in text.lower():
        text += f" Default: {default}."
    text = text.replace("<", "\\<")  # the help is markdown: <name> is not a tag
    return text + (f" A run directory's {run_key} unless given." if run_key else "")


def int_list(text: str, option: str) -> list[int]:
    """`0,1,2` or `0-5` (inclusive) or a mix, as a list of distinct ints; a `UserError` naming `option`
    otherwise. Nothing is read generously: `0-` (no end), `3-1` (backwards), `a-b` are refused, not
    run as something else."""
    out: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if m is None or (m.group(2) is not None and int(m.group(2)) < int(m.group(1))):
            why = "a range needs its end at or after its start" if m is not None else "expected seeds >= 0, comma-separated, ranges as A-B"
            raise UserError(f"{option} '{text}': '{part}': {why} (e.g. 0,1,2 or 0-5)")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        out += range(lo, hi + 1)
    if len(set(out)) != len(out):
        raise UserError(f"{option} '{text}': expected each seed once")
    return out


def typed_argv(ctx: typer.Context) -> list[str]:
    """The arguments `rbctl` was run with: `rbctl.cli.run` keeps them in the root context's `obj`;
    else (the app called another way) the process's own."""
    obj = ctx.find_root().obj
    return list(obj["argv"]) if isinstance(obj, dict) and "argv" in obj else sys.argv[1:]


def command_argv(ctx: typer.Context, drop: tuple[str, ...] = (), pin: dict | None = None) -> list[str]:
    """The running command as typed, from its name on (`train CONFIG -o RUN ...`), without the
    options of the parameters named in `drop` (and their values), with each option of `pin`
    (parameter name -> value) added where it was not typed: a default made explicit. An option is
    recognised as typed whole (`-o DIR`, `--out DIR`, `--out=DIR`), not inside a cluster of short flags."""
    options = {p.name: p for p in ctx.command.params if p.param_type_name == "option"}
    takes_value = {o: not options[n].is_flag for n in options for o in options[n].opts + options[n].secondary_opts}
    dropped = {o for n in drop if n in options for o in options[n].opts + options[n].secondary_opts}
    tokens = typed_argv(ctx)
    tokens = tokens[tokens.index(ctx.info_name) + 1:] if ctx.info_name in tokens else tokens
    out, typed, rest = [ctx.info_name], set(), iter(tokens)
    for tok in rest:
        if tok == "--":  # what follows is arguments only
            out += [tok, *rest]
            break
        name = tok.split("=", 1)[0] if tok.startswith("--") else tok
        typed.add(name)
        if name in dropped:
            if takes_value.get(name) and "=" not in tok:
                next(rest, None)
            continue
        out.append(tok)
    for n, value in (pin or {}).items():
        opts = options[n].opts
        if not typed & set(opts):
            out += [next((o for o in opts if o.startswith("--")), opts[0]), str(value)]
    return out


def resume_command(ctx: typer.Context, drop: tuple[str, ...] = (), pin: dict | None = None) -> str:
    """The command line that resumes the interrupted command: `rbctl` and `command_argv` without
    --debug and the options in `drop` (`rbctl eval --force` would start over), quoted for a shell."""
    return shlex.join(["rbctl", *command_argv(ctx, ("debug", *drop), pin)])
