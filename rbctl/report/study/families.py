"""A study's families (`rbctl.config.study.StudyFamily`): their members on each sweep they read, each a
`Comparison` adjusted and called like any family's (`rbctl.report.analyses.comparisons.apply_family`).

A member pattern ``"{X}_budget − {X}"`` binds the wildcard ``{X}`` to the same text in both arm names,
so it names every arm ``<x>_budget`` whose arm ``<x>`` the sweep also ran. A family the sweep file
declares (``declared``) is read as it is: its members keep the sweep report's own Holm p and call.
Members on different sweeps that share runs (a long horizon resumes the testbed's runs: the same
config but for the steps and the evaluation grid) are marked dependent and share a group, which a
rule counts once.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field

import numpy as np

from rbctl.config.base import RUN_ONLY_KEYS
from rbctl.config.study import StudyFamily, split_pair
from rbctl.errors import UserError
from rbctl.report.analyses.comparisons import Comparison, apply_family, compare, in_family
from rbctl.report.analyses.escape_time import escape_rows, logrank_rows
from rbctl.report.analyses.warm_starts import warm_start_level
from rbctl.report.load import Run
from rbctl.report.sequential_calls import mark_interim
from rbctl.report.stats import PairedDelta, holm, paired_delta
from rbctl.report.study.sweeps import Study, Testbed
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


def match_pairs(patterns: list[str], arms: list[str]) -> list[tuple[str, str, str]]:
    """(arm, reference, binding) of every pair of ``arms`` a member pattern names, in the patterns'
    order then the arms'; binding is the wildcards' text joined by "/" ("" for a plain pair)."""
    out = []
    for p in patterns:
        arm_p, ref_p = split_pair(p)
        loose = set(_WILD.findall(ref_p)) - set(_WILD.findall(arm_p))
        if loose:
            raise UserError(f"member '{p}': the reference's wildcard {{{sorted(loose)[0]}}} is not in the arm's")
        rx = _regex(arm_p)
        for arm in arms:
            m = rx.match(arm)
            if m is None:
                continue
            ref = _WILD.sub(lambda w: m.group(w.group(1)), ref_p)
            if ref in arms and ref != arm and (arm, ref) not in [(a, r) for a, r, _ in out]:
                out.append((arm, ref, "/".join(m.groupdict().values())))
    return out


@dataclass
class Member:
    """One member of a study family: ``arm − ref`` on one sweep."""

    sweep: str
    binding: str  # the wildcards' text ("grpo" for "{X}_budget − {X}" on grpo_budget − grpo), "" for a plain pair
    comparison: Comparison
    scale: float  # Δ, margin and detectable effect printed × scale in ``unit``
    unit: str
    over_warm_starts: PairedDelta | None = None  # the warm start as the unit (None: the runs carry none)
    group: str = ""  # members sharing runs share a group
    shares: str = ""  # "shares its runs with fixpoint up to step 100", or ""
    extra: dict = field(default_factory=dict)  # escape: tau, escaped_arm, escaped_ref, logrank_p

    @property
    def where(self) -> str:
        return f"{self.sweep} {self.comparison.label}"


@dataclass(frozen=True)
class FamilyResult:
    name: str
    spec: StudyFamily
    members: tuple[Member, ...]
    notes: tuple[str, ...]  # sweeps that do not declare the family, patterns that match nothing

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


def _final(tb: Testbed, name: str, spec: StudyFamily, arm: str, ref: str, binding: str) -> Comparison | None:
    bench = spec.benchmark or tb.benchmark
    sc = tb.data.sweep.scores
    if (arm, bench) not in sc or (ref, bench) not in sc:
        return None
    metric = "pass" if spec.metric == "pass@n" else spec.metric
    c = compare(sc[arm, bench], sc[ref, bench], metric, "study", binding, name, tb.data.sweep.n_boot)
    c.same_config = tb.data.sweep.same_config(arm, ref)
    return c


def _last_quarter(tb: Testbed, name: str, key: str, arm: str, ref: str, binding: str) -> Comparison | None:
    a, b = tb.per_unit(arm, key), tb.per_unit(ref, key)
    if not a or not b:
        return None
    return Comparison(name, "study", binding, arm, ref, tb.benchmark, key, 0, float(np.mean(list(a.values()))),
                      float(np.mean(list(b.values()))), paired_delta(a, b))


def _escape(tb: Testbed, name: str, spec: StudyFamily, pairs) -> list[tuple[Comparison, dict]]:
    rows = escape_rows(tb.runs, spec.escape, spec.escape.benchmark or spec.benchmark or tb.benchmark)
    if not len(rows):
        return []
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
    return out


def joint_holm(comps: list[Comparison], alpha: float) -> None:
    """One Holm–Bonferroni over a family's superiority and TOST p-values together (2m hypotheses), so
    the family-wise error over both kinds of call is at most α (docs/method.md, "Comparing arms");
    replaces the separate adjustments `apply_family` made. The detectable effect keeps α/m."""
    counted = [c for c in comps if in_family(c)]
    adj, reject = holm([c.delta.p for c in counted] + [c.p_tost for c in counted], alpha)
    m = len(counted)
    for i, c in enumerate(counted):
        c.p_holm, c.significant = float(adj[i]), bool(reject[i])
        c.p_tost_holm, c.equivalent = float(adj[m + i]), bool(reject[m + i])


def family(study: Study, name: str, spec: StudyFamily) -> FamilyResult:
    """The members of one study family on every finished sweep it reads, adjusted and called."""
    members, notes = [], []
    declared = spec.declared
    scale, unit = ((1.0, "steps") if spec.metric == "escape" else
                   (1.0, f"(units of {spec.metric.split(':', 1)[1]})") if spec.metric.startswith("last_quarter:") else
                   (100.0, "points"))
    for tb in study.named(spec.sweeps):
        pairs = match_pairs(spec.members, tb.arms)
        if not pairs:
            notes.append(f"{tb.name}: no pair of its arms matches {', '.join(spec.members)}")
            continue
        if declared:
            if not tb.declares(declared):
                notes.append(f"{tb.name}: its sweep file declares no family `{declared}`")
                continue
            comps = {(c.arm, c.ref): c for c in tb.family(declared)}
            found = [(comps[a, r], b, {}) for a, r, b in pairs if (a, r) in comps]
            missing = [f"{a} − {r}" for a, r, _ in pairs if (a, r) not in comps]
            if missing:
                notes.append(f"{tb.name}: {', '.join(missing)} not in its declared family `{declared}`")
        elif spec.metric == "escape":
            found = [(c, c.baseline, x) for c, x in _escape(tb, name, spec, pairs)]
        elif spec.metric.startswith("last_quarter:"):
            key = spec.metric.split(":", 1)[1]
            found = [(c, b, {}) for a, r, b in pairs if (c := _last_quarter(tb, name, key, a, r, b)) is not None]
        else:
            found = [(c, b, {}) for a, r, b in pairs if (c := _final(tb, name, spec, a, r, b)) is not None]
        for c, binding, extra in found:
            over = (warm_start_level(c.delta).over_warm_starts
                    if any(u[0] for u in c.delta.units) and spec.metric != "escape" else None)
            members.append(Member(tb.name, binding or c.baseline, c, scale, unit, over, extra=extra))
    if not declared:
        margin = None if spec.margin is None else spec.margin / scale
        apply_family([m.comparison for m in members], spec.alpha, margin, spec.power)
        if spec.adjust == "joint" and margin is not None:
            joint_holm([m.comparison for m in members], spec.alpha)
        mark_interim([(m.comparison, study.sweeps[m.sweep].path) for m in members])  # fewer units than a design's: no call
    mark_shared(members, study.sweeps)
    return FamilyResult(name, spec, tuple(members), tuple(notes))


def families(study: Study) -> dict[str, FamilyResult]:
    return {name: family(study, name, spec) for name, spec in study.config.families.items()}
