"""A study's families (`rbctl.config.study.StudyFamily`): their members on each sweep they read, each a
`Comparison` adjusted and called like any family's (`rbctl.report.analyses.comparisons.apply_family`).

A member pattern ``"{X}_budget − {X}"`` binds the wildcard ``{X}`` to the same text in both arm names,
so it names every arm ``<x>_budget`` whose arm ``<x>`` the sweep also ran; an interaction
``"(a − b) − (c − d)"`` is the difference of two pairs' Δ over the units all four arms share (does
the budget's effect differ between baselines?), its wildcards bound by its first arm. A family the
sweep file declares (``declared``) is read as it is: its members keep the sweep report's own Holm p
and call. Members on different sweeps that share runs (a long horizon resumes the testbed's runs: the
same config but for the steps and the evaluation grid) are marked dependent and share a group, which a
rule counts once. What a family cannot read is refused in one line (a pattern that matches no arm of
any sweep it reads; a training metric no run logs), and a sweep it names but does not read is named
with the reason (`FamilyResult.notes`).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field

import numpy as np

from rbctl.config.base import RUN_ONLY_KEYS
from rbctl.config.study import INTERACTION, StudyFamily, split_member
from rbctl.errors import UserError
from rbctl.report.analyses.comparisons import Comparison, apply_family, apply_noninferiority, compare, in_family
from rbctl.report.analyses.escape_time import escape_rows, logrank_rows
from rbctl.report.analyses.warm_starts import warm_start_level
from rbctl.report.load import Run
from rbctl.report.power import mde_paired
from rbctl.report.sequential_calls import mark_interim
from rbctl.report.series import at_step
from rbctl.report.stats import DELTA_BOUNDS, PairedDelta, holm, paired_delta
from rbctl.report.study.sweeps import Study, Testbed, did_you_mean, logged_keys
from rbctl.store.rundir import METRICS

_WILD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
# what two runs may differ in and still be one run up to the shorter one's last step
_HORIZON_KEYS = ("steps", "eval", "save_every")


def _regex(pattern: str) -> re.Pattern:
    parts, last = [], 0
    for m in _WILD.finditer(pattern):
        parts += [re.escape(pattern[last:m.start()]), f"(?P<{m.group(1)}>.+?)"]
        last = m.end()
    return re.compile("".join(parts) + re.escape(pattern[last:]) + r"\Z")


def match_members(patterns: list[str], arms: list[str]) -> list[tuple[tuple[str, ...], str]]:
    """(names, binding) of every member of ``arms`` a pattern names, in the patterns' order then the
    arms': names is (arm, reference) for a pair, the four arms of an interaction; binding is the
    wildcards' text joined by "/" ("" for a plain member). A wildcard of a later name that the first
    arm does not bind is an error."""
    out: list[tuple[tuple[str, ...], str]] = []
    for p in patterns:
        first, *rest = split_member(p)
        loose = set().union(*(_WILD.findall(r) for r in rest)) - set(_WILD.findall(first))
        if loose:
            raise UserError(f"member '{p}': the wildcard {{{sorted(loose)[0]}}} is not in its first arm '{first}'")
        rx = _regex(first)
        for arm in arms:
            m = rx.match(arm)
            if m is None:
                continue
            names = (arm, *(_WILD.sub(lambda w: m.group(w.group(1)), r) for r in rest))
            same_pairs = len(names) == 4 and names[:2] == names[2:]  # an interaction of a pair with itself is 0
            if all(n in arms for n in names) and len(set(names[:2])) == 2 and not same_pairs and names not in [x for x, _ in out]:
                out.append((names, "/".join(m.groupdict().values())))
    return out


def match_pairs(patterns: list[str], arms: list[str]) -> list[tuple[str, str, str]]:
    """(arm, reference, binding) of every pair a pair pattern names (`match_members`; interactions
    left out)."""
    pairs = [p for p in patterns if not INTERACTION.match(p)]
    return [(names[0], names[1], b) for names, b in match_members(pairs, arms)]


@dataclass
class Member:
    """One member of a study family: ``arm − ref`` (or an interaction) on one sweep."""

    sweep: str
    binding: str  # the wildcards' text ("grpo" for "{X}_budget − {X}" on grpo_budget − grpo), "" for a plain pair
    comparison: Comparison
    scale: float  # Δ, margin and detectable effect printed × scale in ``unit``
    unit: str
    over_warm_starts: PairedDelta | None = None  # the warm start as the unit (None: the runs carry none, or it is the test)
    group: str = ""  # members sharing runs share a group
    shares: str = ""  # "shares its runs with fixpoint up to step 100", or ""
    extra: dict = field(default_factory=dict)  # escape: tau, escaped_arm, escaped_ref, logrank_p
    level: str = "unit"  # "warm_start": the test's units are warm starts (each its seeds' mean Δ)
    interaction: bool = False  # Δ is the difference of two pairs' Δ; comparison.arm / ref are "(a − b)", "(c − d)"

    @property
    def where(self) -> str:
        return f"{self.sweep} {self.comparison.label}"


@dataclass(frozen=True)
class FamilyResult:
    name: str
    spec: StudyFamily
    members: tuple[Member, ...]
    notes: tuple[str, ...]  # sweeps it names but does not read, and why
    bound: tuple[float, str] = (0.0, "")  # the family-wise error its adjustment guarantees, and in words (`error_bound`)

    def member(self, sweep: str, arm: str, ref: str) -> Member | None:
        return next((m for m in self.members if m.sweep == sweep and m.comparison.arm == arm
                     and m.comparison.ref == ref), None)

    @property
    def measure(self) -> str:
        """What the members compare, in words."""
        s = self.spec
        if s.declared:
            return f"the sweep file's declared family `{s.declared}` (its metric, margin and calls)"
        if s.metric == "escape":
            e = s.escape
            return (f"the restricted escape step min(T, τ): T the first evaluation where `{e.metric}` is {e.direction} "
                    f"{e.threshold:g} and stays so for the next {e.hold} (a crossing not held that long is censored)")
        if s.metric.startswith("last_quarter:"):
            return f"the last-quarter mean of `{s.metric.split(':', 1)[1]}` ({METRICS})"
        if s.step is not None:
            return f"{s.metric} of the periodic held-out evaluation at step {s.step}"
        return f"{s.metric} of the final held-out evaluation"


def _identity(run: Run) -> str:
    """What makes two runs the same run up to the shorter horizon: the config but for the horizon keys (the
    steps stay when a cosine schedule spans them: the learning rate then differs from the first step)."""
    config = run.config or {}
    optim = config.get("optim") or {}
    spans = optim.get("schedule") == "cosine" and optim.get("schedule_steps") is None
    drop = RUN_ONLY_KEYS + tuple(k for k in _HORIZON_KEYS if not (spans and k == "steps"))
    cfg = {k: v for k, v in config.items() if k not in drop}
    return json.dumps([run.arm, run.unit, cfg], sort_keys=True, default=str)


def mark_shared(members: list[Member], sweeps: dict[str, Testbed]) -> None:
    """Group members on different sweeps whose arm's and reference's runs are the same runs up to the
    shorter horizon (equal configs but for steps, evaluation and checkpoints; same unit); each member
    of a group names the others."""
    ids = {}
    for m in members:
        runs = sweeps[m.sweep].data.sweep.by_arm
        ids[id(m)] = ({_identity(r) for r in runs.get(m.comparison.arm, []) if r.config},
                      {_identity(r) for r in runs.get(m.comparison.ref, []) if r.config})
    for i, m in enumerate(members):
        m.group = m.group or f"{m.sweep}:{m.comparison.label}"
        for o in members[i + 1:]:
            if o.sweep != m.sweep and ids[id(m)][0] & ids[id(o)][0] and ids[id(m)][1] & ids[id(o)][1]:
                o.group = m.group
    for m in members:
        same = [o for o in members if o is not m and o.group == m.group]
        if same:
            steps = min(min((r.last_step for r in sweeps[s.sweep].runs), default=0) for s in [m, *same])
            m.shares = ("dependent: shares its runs with " + ", ".join(o.where for o in same)
                        + f" up to step {steps}")


# --- one member's per-unit values -----------------------------------------------------------------------


def _per_unit(tb: Testbed, spec: StudyFamily, arm: str) -> dict:
    """{unit: value} of an arm for a last-quarter or an at-step family."""
    if spec.metric.startswith("last_quarter:"):
        return tb.per_unit(arm, spec.metric.split(":", 1)[1])
    return at_step(tb.data.sweep.by_arm.get(arm, []), spec.step, spec.benchmark or tb.benchmark, spec.metric)


def _pair(tb: Testbed, name: str, spec: StudyFamily, arm: str, ref: str, binding: str) -> Comparison | None:
    """One pair's comparison: the final evaluation's scores, a training metric's last quarter, or a
    held-out metric at a stated step; None when either arm has no values."""
    if spec.metric.startswith("last_quarter:") or spec.step is not None:
        a, b = _per_unit(tb, spec, arm), _per_unit(tb, spec, ref)
        if not a or not b:
            return None
        bounds = None if spec.metric.startswith("last_quarter:") else DELTA_BOUNDS
        return Comparison(name, "study", binding, arm, ref, spec.benchmark or tb.benchmark, spec.metric, 0,
                          float(np.mean(list(a.values()))), float(np.mean(list(b.values()))),
                          paired_delta(a, b, bounds=bounds))
    bench = spec.benchmark or tb.benchmark
    sc = tb.data.sweep.scores
    if (arm, bench) not in sc or (ref, bench) not in sc:
        return None
    metric = "pass" if spec.metric == "pass@n" else spec.metric
    c = compare(sc[arm, bench], sc[ref, bench], metric, "study", binding, name, tb.data.sweep.n_boot)
    c.same_config = tb.data.sweep.same_config(arm, ref)
    return c


def _interaction(tb: Testbed, name: str, spec: StudyFamily, names: tuple[str, ...], binding: str) -> Comparison | None:
    """(a − b) − (c − d) per unit over the units all four arms share: the difference of two pairs' Δ."""
    first, second = _pair(tb, name, spec, *names[:2], binding), _pair(tb, name, spec, *names[2:], binding)
    if first is None or second is None:
        return None
    d1, d2 = (dict(zip(c.delta.units, c.delta.deltas)) for c in (first, second))
    bounds = None if spec.metric.startswith("last_quarter:") else (-2.0, 2.0)
    d = paired_delta(d1, d2, bounds=bounds)
    return Comparison(name, "study", binding, f"({names[0]} − {names[1]})", f"({names[2]} − {names[3]})",
                      first.benchmark, first.metric, first.k, float(np.mean(list(d1.values()))),
                      float(np.mean(list(d2.values()))), d)


def _escape(tb: Testbed, name: str, spec: StudyFamily, pairs) -> tuple[list[tuple[Comparison, dict]], str]:
    """The escape members of ``pairs`` and, when there are none, why."""
    bench = spec.escape.benchmark or spec.benchmark or tb.benchmark
    rows = escape_rows(tb.runs, spec.escape, bench)
    if not len(rows):
        return [], f"no run logs `{spec.escape.metric}` at its {spec.escape.signal} points on {bench}"
    tau = float(rows["last_step"].min())
    rows = rows.assign(restricted=rows["time"].clip(upper=tau))
    out = []
    for arm, ref, binding in pairs:
        a, b = rows[rows["arm"] == arm], rows[rows["arm"] == ref]
        if not len(a) or not len(b):
            continue
        d = paired_delta(dict(zip(a["unit"], a["restricted"])), dict(zip(b["unit"], b["restricted"])))
        c = Comparison(name, "study", binding, arm, ref, tb.benchmark, "escape step", 0,
                       float(a["restricted"].mean()), float(b["restricted"].mean()), d)
        lr = logrank_rows(rows, [(arm, ref)])
        out.append((c, {"tau": tau, "escaped_arm": int(a["event"].sum()), "escaped_ref": int(b["event"].sum()),
                        "logrank_p": float(lr["p"].iloc[0]) if len(lr) else math.nan}))
    return out, ""


# --- adjustment -----------------------------------------------------------------------------------------


def joint_holm(comps: list[Comparison], alpha: float, power: float) -> None:
    """One Holm–Bonferroni over a family's superiority and TOST p-values together (2m hypotheses), so
    the family-wise error over both kinds of call is at most α (docs/method.md, "Comparing arms");
    replaces the separate adjustments `apply_family` made. Holm's first step is then α/(2m), so each
    member's detectable effect is the |Δ| its t-test detects at α/(2m) with ``power``."""
    counted = [c for c in comps if in_family(c)]
    adj, reject = holm([c.delta.p for c in counted] + [c.p_tost for c in counted], alpha)
    m = len(counted)
    for i, c in enumerate(counted):
        c.p_holm, c.significant = float(adj[i]), bool(reject[i])
        c.p_tost_holm, c.equivalent = float(adj[m + i]), bool(reject[m + i])
        c.detectable = mde_paired(c.delta.sd, c.delta.n, alpha / (2 * max(1, m)), power)


def error_bound(spec: StudyFamily, beds: list[Testbed] = ()) -> tuple[float, str]:
    """The family-wise error over the family's calls that its adjustment guarantees, and in words: α
    for one kind of call (no margin, non-inferiority) or a joint adjustment, 2α for superiority and
    TOST each adjusted at α (docs/method.md). A family the sweep files declare (``declared``) takes
    their α and margin (adjusted separately), the largest bound over the sweeps ``beds``."""
    alpha, two = spec.alpha, spec.margin is not None and spec.adjust == "separate" and spec.test == "two_sided"
    if spec.declared:
        found = [f for tb in beds if tb.data.sweep.spec is not None
                 for f in tb.data.sweep.spec.families_declared() if f.name == spec.declared]
        alpha = max((f.alpha for f in found), default=spec.alpha)
        two = any(f.margin is not None for f in found)
    return (2 * alpha, f"at most 2α = {2 * alpha:g}") if two else (alpha, f"at most α = {alpha:g}")


def adjust(members: list[Member], spec: StudyFamily) -> None:
    """Holm within the family (`apply_family`; the joint or non-inferiority adjustment where it says)."""
    comps = [m.comparison for m in members]
    margin = None if spec.margin is None else spec.margin / _scale(spec)[0]
    if spec.test == "noninferiority":
        apply_family(comps, spec.alpha, None, spec.power)
        apply_noninferiority(comps, spec.alpha, margin, spec.better)
        return
    apply_family(comps, spec.alpha, margin, spec.power)
    if spec.adjust == "joint" and margin is not None:
        joint_holm(comps, spec.alpha, spec.power)


# --- the family ------------------------------------------------------------------------------------------


def _scale(spec: StudyFamily) -> tuple[float, str]:
    if spec.metric == "escape":
        return 1.0, "steps"
    if spec.metric.startswith("last_quarter:"):
        return 1.0, f"(units of {spec.metric.split(':', 1)[1]})"
    return 100.0, "points"


def _found(tb: Testbed, name: str, spec: StudyFamily, matched) -> tuple[list[tuple[Comparison, str, dict]], list[str]]:
    """The comparisons of one sweep's matched members, and notes on those it cannot read."""
    if spec.declared:
        if not tb.declares(spec.declared):
            return [], [f"{tb.name}: its sweep file declares no family `{spec.declared}`"]
        comps = {(c.arm, c.ref): c for c in tb.family(spec.declared)}
        missing = [f"{n[0]} − {n[1]}" for n, _ in matched if n[:2] not in comps]
        found = [(comps[n[:2]], b, {}) for n, b in matched if n[:2] in comps]
        return found, ([f"{tb.name}: {', '.join(missing)} not in its declared family `{spec.declared}`"] if missing else [])
    if spec.metric == "escape":
        got, why = _escape(tb, name, spec, [(n[0], n[1], b) for n, b in matched])
        return [(c, c.baseline, x) for c, x in got], ([f"{tb.name}: {why}"] if why else [])
    found, missing = [], []
    for names, b in matched:
        c = _pair(tb, name, spec, *names, b) if len(names) == 2 else _interaction(tb, name, spec, names, b)
        if c is None:
            missing.append(" − ".join(names) if len(names) == 2 else f"({names[0]} − {names[1]}) − ({names[2]} − {names[3]})")
        else:
            found.append((c, b, {}))
    what = f"the periodic evaluation at step {spec.step}" if spec.step is not None else (
        "its metrics" if spec.metric.startswith("last_quarter:") else "final scores")
    return found, ([f"{tb.name}: {', '.join(missing)}: no {what} of both arms"] if missing else [])


def check_readable(study: Study, name: str, spec: StudyFamily, beds: list[Testbed]) -> None:
    """Refuse what the family cannot read on any sweep it reads (one line, with the nearest name): a
    member pattern that matches no arm, a training metric no run logs."""
    arms = sorted({a for tb in beds for a in tb.arms})
    for p in spec.members:
        if beds and not any(match_members([p], tb.arms) for tb in beds):
            first = split_member(p)[0]
            raise UserError(f"family '{name}': member '{p}' matches no arm of {', '.join(tb.name for tb in beds)}"
                            + did_you_mean(first, arms))
    if spec.metric.startswith("last_quarter:") and beds:
        key = spec.metric.split(":", 1)[1]
        keys = logged_keys(beds)
        if key not in keys:
            raise UserError(f"family '{name}': metric last_quarter:{key}: no run of {', '.join(tb.name for tb in beds)} "
                            f"logs '{key}' in {METRICS}" + did_you_mean(key, sorted(keys)))


def family(study: Study, name: str, spec: StudyFamily) -> FamilyResult:
    """The members of one study family on every finished sweep it reads, adjusted and called; a sweep it
    names but does not read is a note with the reason."""
    members, notes = [], [f"{s}: {why}" for s, why in study.unread(spec.sweeps)]
    scale, unit = _scale(spec)
    beds = study.named(spec.sweeps)
    check_readable(study, name, spec, beds)
    for tb in beds:
        matched = match_members(spec.members, tb.arms)
        if not matched:
            notes.append(f"{tb.name}: no arms match {', '.join(spec.members)}")
            continue
        found, why = _found(tb, name, spec, matched)
        notes += why
        for c, binding, extra in found:
            over = (warm_start_level(c.delta).over_warm_starts
                    if any(u[0] for u in c.delta.units) and spec.metric != "escape" else None)
            level = "unit"
            if spec.unit == "warm_start":
                if over is None:
                    raise UserError(f"family '{name}': unit warm_start, but the runs of {tb.name} carry no warm start")
                c.delta, c.hb_lo, c.hb_hi, over, level = over, math.nan, math.nan, None, "warm_start"
            members.append(Member(tb.name, binding or c.baseline, c, scale, unit, over, extra=extra, level=level,
                                  interaction=c.arm.startswith("(")))
    if not spec.declared:
        adjust(members, spec)
        mark_interim([(m.comparison, study.sweeps[m.sweep].path) for m in members])  # fewer units than a design's: no call
    mark_shared(members, study.sweeps)
    return FamilyResult(name, spec, tuple(members), tuple(notes), error_bound(spec, beds))


def families(study: Study) -> dict[str, FamilyResult]:
    return {name: family(study, name, spec) for name, spec in study.config.families.items()}
