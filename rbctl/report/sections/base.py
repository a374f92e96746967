"""The section registry: every block of report.md and report.html after its title is one
`ReportSection` record, and the report renders the registered sections in reading order
(`rbctl.report.render.report`). Adding a section is one module and one registration line.

A record carries its name (what a sweep file's `report.sections` names it by), its title, its
render function ``render(data, page)`` (it computes from the loaded runs and the shared analyses of
`rbctl.report.data.ReportData` and draws itself on the `rbctl.report.render.page.Page`), what it
needs of the runs (`Need`s: declared comparisons, final or periodic evaluations, a logged metric, an
arm...), whether it is optional (a study's question: on only where the sweep file asks for it, or by
its source's defaults, `default_for`), its place in reading order, and the schema of its settings (a
plug-in's, read from `report.settings.<name>`). A section that is off, or whose needs are not met, is
left out with its reason, listed under "Not in this report" before the list of runs (`LAST`).

Register one with the decorator on its render function::

    @section("my_table", "My table", needs=(logged("entropy"),), optional=True)
    def my_table(data, page): ...

or `register(ReportSection(...))`, in a module of rbctl or one of your own named in the environment
variable `RBCTL_SECTIONS` (comma-separated module names, imported with `rbctl.report.sections`).
The built-in sections and which are on by default: docs/method.md, "Report sections".
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from rbctl.config.base import validate
from rbctl.errors import UserError
from rbctl.report.data import ReportData

SWEEP, MANIFEST = "sweep", "manifest"  # where runs come from: rbctl's own (a sweep file, or none), or trained elsewhere
LAST = 1000  # the list of runs' place: the sections from here on come after the list of those left out
PLUGIN_ORDER = 900  # a section that names no place: after the built-in analyses, before the list of runs
METHOD_REF = 'docs/method.md, "Report sections"'


@dataclass(frozen=True)
class Need:
    """One thing a section needs of the runs: ``missing(data)`` is None when it is met, else why it
    is not, in the report's words (the section's line under "Not in this report")."""

    what: str
    missing: Callable[[ReportData], str | None]


@dataclass(frozen=True)
class ReportSection:
    """One section of the report (the module docstring). ``order``: its place in reading order (ties
    in registration order). ``optional``: a study's question, on only where the sweep file's
    `report.sections` names it or, without one, where its source is in ``default_for`` (`SWEEP`: a
    sweep file or rbctl's runs outside one; `MANIFEST`: runs trained elsewhere). ``settings``: a
    pydantic model of its settings, read from the sweep file's `report.settings.<name>`."""

    name: str
    title: str
    render: Callable[[ReportData, Any], None]
    needs: tuple[Need, ...] = ()
    optional: bool = False
    default_for: tuple[str, ...] = ()
    order: int = PLUGIN_ORDER
    settings: type[BaseModel] | None = None

    def missing(self, data: ReportData) -> str | None:
        """Why its needs are not met by ``data`` (the first need that is not), or None."""
        return next((why for n in self.needs if (why := n.missing(data)) is not None), None)

    def settings_of(self, data: ReportData) -> BaseModel | None:
        """Its settings as the sweep file states them (`report.settings.<name>`), validated against
        ``settings``, its defaults where the file states none; None for a section without settings."""
        if self.settings is None:
            return None
        where = data.sweep.ask.source or "the report"
        return validate(self.settings, data.sweep.report.settings.get(self.name) or {},
                        f"{where} report.settings.{self.name}")


SECTIONS: dict[str, ReportSection] = {}


def register(s: ReportSection) -> ReportSection:
    """Add ``s`` to the registry. A name taken by another section's render function, a name that is
    not a plain one, or an unknown source in ``default_for`` is a ValueError naming it; registering
    the same section again (a module imported twice) changes nothing."""
    old = SECTIONS.get(s.name)
    if old is not None and _key(old) != _key(s):
        raise ValueError(f"report section '{s.name}' is already registered ({_key(old)})")
    problems = []
    if not s.name.isidentifier() or s.name != s.name.lower():
        problems.append("its name must be lower-case letters, digits and _")
    if bad := [x for x in s.default_for if x not in (SWEEP, MANIFEST)]:
        problems.append(f"default_for names {', '.join(bad)}, not {SWEEP} or {MANIFEST}")
    if s.default_for and not s.optional:
        problems.append("default_for is for an optional section (the others are always on)")
    if problems:
        raise ValueError(f"report section '{s.name}': " + "; ".join(problems))
    SECTIONS[s.name] = s
    return s


def _key(s: ReportSection) -> str:
    """What makes two records of one name the same section: the dotted path of their render function."""
    return f"{s.render.__module__}.{s.render.__qualname__}"


def section(name: str, title: str, **fields) -> Callable[[Callable], Callable]:
    """The decorator form of `register`: ``@section(name, title, needs=..., optional=...)`` above a
    render function ``render(data, page)`` registers it and returns it unchanged."""
    def wrap(render: Callable) -> Callable:
        register(ReportSection(name, title, render, **fields))
        return render
    return wrap


def settings_for(name: str, data: ReportData) -> BaseModel | None:
    """The settings of section ``name`` for the report of ``data`` (`ReportSection.settings_of`): what a
    section's render function reads its thresholds from."""
    return SECTIONS[name].settings_of(data)


def optional_names() -> list[str]:
    """The optional sections, in reading order."""
    return [s.name for s in sorted(SECTIONS.values(), key=lambda s: s.order) if s.optional]


def asked(data: ReportData) -> set[str]:
    """The optional sections the report adds: those the `report.sections` of the runs' sweep file or
    runs manifest names, or without one the defaults of the runs' source. A name that is no optional
    section is a one-line error naming the file and key."""
    ask = data.sweep.ask
    if ask.block is None or ask.block.sections is None:
        source = MANIFEST if ask.imported else SWEEP
        return {s.name for s in SECTIONS.values() if s.optional and source in s.default_for}
    names, optional = ask.block.sections, optional_names()
    for i, name in enumerate(names):
        if name not in optional:
            close = difflib.get_close_matches(name, optional, n=1, cutoff=0.6)
            why = (f"'{name}' is always in the report" if name in SECTIONS else
                   f"unknown section '{name}'" + (f" (did you mean '{close[0]}'?)" if close else ""))
            raise UserError(f"{ask.source}: config key 'report.sections.{i}': {why}; the optional sections: "
                            + ", ".join(optional))
    return set(names)


def _not_asked(data: ReportData, s: ReportSection) -> str:
    ask = data.sweep.ask
    if ask.block is not None and ask.block.sections is not None:
        return f"not asked (`report.sections` does not name `{s.name}`)"
    who = "a runs manifest's report" if ask.imported else "this report"
    return (f"an optional section, not in {who} by default: `report.sections` adds it ({METHOD_REF})")


def plan(data: ReportData) -> list[tuple[ReportSection, str | None]]:
    """Every registered section in reading order, with why it is left out (None: it is rendered)."""
    on = asked(data)
    out = []
    for s in sorted(SECTIONS.values(), key=lambda s: s.order):  # stable: ties keep registration order
        why = _not_asked(data, s) if s.optional and s.name not in on else s.missing(data)
        out.append((s, why))
    return out


# --- needs --------------------------------------------------------------------------------------------


def need(what: str, met: Callable[[ReportData], bool], why: str | Callable[[ReportData], str]) -> Need:
    """A `Need` from a test ``met(data)`` and the reason when it fails (a text, or a function of the data)."""
    return Need(what, lambda d: None if met(d) else (why(d) if callable(why) else why))


def declared_comparisons() -> Need:
    """The sweep file (or runs manifest) declares principal comparisons and their design (`comparisons:`)."""
    return need("declared comparisons", lambda d: d.sweep.spec is not None,
                "no principal comparisons are declared (`comparisons:`), so there is no design to assess")


def further_families() -> Need:
    """The sweep file declares a family besides the principal one (`comparisons.families`)."""
    return need("a further declared family", lambda d: d.sweep.spec is not None and bool(d.sweep.spec.families),
                "no further family is declared (`comparisons.families`)")


def warm_starts() -> Need:
    """The runs carry warm starts (a level crossed with the seeds)."""
    return need("warm starts", lambda d: bool(d.sweep.warm_starts), "the runs carry no warm starts")


def final_evaluations() -> Need:
    """Some arm has final held-out scores."""
    return need("final evaluations", lambda d: bool(d.sweep.benchmarks), "no run has a final evaluation")


def periodic_evaluations() -> Need:
    """Some run logged a periodic held-out evaluation."""
    return need("periodic evaluations", lambda d: any(r.evals for r in d.sweep.runs),
                "no run logged a periodic held-out evaluation")


def logged(key: str) -> Need:
    """Some run's metrics log holds a finite value of ``key`` (a role: `entropy`, `kappa_eff`, ...)."""
    def met(d: ReportData) -> bool:
        return any(isinstance(v := m.get(key), (int, float)) and math.isfinite(v) for r in d.sweep.runs for m in r.metrics)
    return need(f"logged {key}", met, f"no run logs `{key}`")


def arm(baseline: str, variant: str) -> Need:
    """An arm of this (baseline, variant) label."""
    return need(f"a {baseline} {variant} arm", lambda d: (baseline, variant) in d.sweep.info.values(),
                f"no arm is {baseline} {variant} (baseline {baseline}, variant {variant})")

