"""A study's claims document (`rbctl report STUDY.yaml`): generic sections over what the study file declares — its
sweeps (provenance, each plain arm's plateau test, each declared family's design, how a setting was chosen), each
study family's members and calls, the long horizons, each claim with its rule, call, the members it read and when it
was declared, the changes of call since a previous document — and the README's block (`readme_block`)."""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path

import pandas as pd

from rbctl.config.base import read_yaml
from rbctl.config.study import AssociationRule, CallsRule, TrendRule
from rbctl.report.analyses.comparisons import EQUIVALENT, call, call_text, in_family
from rbctl.report.analyses.plateau import setting_by_rule
from rbctl.report.analyses.trajectories import training_curve
from rbctl.report.power import units_for_tost
from rbctl.report.provenance import code_text, cpu_description, provenance, same_training_code
from rbctl.report.render.calls import deciding_test
from rbctl.report.render.figures import draw_curves
from rbctl.report.render.tables import criterion_cell, markdown_table, pct, pval
from rbctl.report.sequential_calls import family_note
from rbctl.report.study.changes import study_change_lines
from rbctl.report.study.declared import families_read, declaration_lines
from rbctl.report.study.families import FamilyResult, Member, families
from rbctl.report.study.long_horizons import ahead_family, long_rows, pass_at_k_lines
from rbctl.report.study.rules import Verdict, apply_rule, delta_format, delta_text, warm_start_caveat
from rbctl.report.study.sweeps import Study, Testbed, load_study
from rbctl.store.rundir import REPORT_FIGURES


def table(df: pd.DataFrame, empty: str = "None.") -> str:
    return markdown_table(df) if len(df) else empty


# --- the sweeps ------------------------------------------------------------------------------------------


def provenance_lines(beds) -> tuple[list[str], list[str]]:
    """One line per sweep, and every commit the study's runs came from."""
    out, commits = [], set()
    for tb in beds:
        p = provenance(tb.path, short=True, runs=tb.runs)
        mine = p.commit_list
        commits |= set(mine)
        same = same_training_code(mine)
        out.append(f"- {tb.name}: `{tb.path}` — {len(tb.runs)} runs, code {p.code}"
                   f"{' (' + same + ')' if same else ''}, last logged {p.last}")
    return out, sorted(commits)


def aggregation_rows(beds) -> pd.DataFrame:
    """Per sweep and arm: the estimator and the loss aggregation its runs' saved configs used."""
    rows = []
    for tb in beds:
        for arm, runs in sorted(tb.data.sweep.by_arm.items()):
            algo = (runs[0].config or {}).get("algo") or {}
            aggs = sorted({str(((r.config or {}).get("algo") or {}).get("loss_agg")) for r in runs})
            rows.append({"sweep": tb.name, "arm": arm, "estimator": algo.get("estimator", "?"),
                         "loss aggregation": ", ".join(aggs)})
    return pd.DataFrame(rows)


def plateau_rows(beds) -> pd.DataFrame:
    """Per sweep: the plateau test of each plain arm (no budget, no bonus), criterion by criterion."""
    rows = []
    for tb in beds:
        p = tb.data.plateau
        if not p.plain:
            rows.append({"sweep": tb.name, "arm": "none", **dict.fromkeys(("stalled", "below the ceiling", "entropy collapsed",
                         "improved on step 0"), "–"), "plateau": "not tested (no plain arm with evaluations)"})
            continue
        show = lambda c: "not evaluated" if c.held is None else ("holds" if c.held else "does not hold") + f" ({c.detail})"  # noqa: E731
        for arm, v in p.plain.items():
            rows.append({"sweep": tb.name, "arm": arm, "stalled": show(v.stalled),
                         "below the ceiling": show(v.below_ceiling), "entropy collapsed": show(v.entropy_collapsed),
                         "improved on step 0": show(v.improved) if v.improved is not None else "–",
                         "plateau": "holds" if tb.plateau_held(arm) else
                         "not tested: no stated ceiling (the sweep's ceiling:)" if v.held else "does not hold"})
    return pd.DataFrame(rows)


def selection_lines(study: Study) -> list[str]:
    """Per testbed with a settings sweep: every setting's plain arm by the plateau test, the setting the
    rule keeps (`rbctl.report.analyses.plateau.setting_by_rule`) and the one the study file states."""
    out = []
    for name, sw, kept in study.selection:
        p = sw.data.plateau
        rows = []
        for arm, v in p.plain.items():
            show = lambda c, d: criterion_cell(c.value, c.held, d)  # noqa: E731
            rows.append({"setting (plain arm)": arm, "units": v.seeds, "stalled: change (< 2 points)": show(v.stalled, 2),
                         "points below the ceiling (≥ 15)": show(v.below_ceiling, 1),
                         "final entropy (< 1/3 of the warm start's)": show(v.entropy_collapsed, 3),
                         "final − step 0 (> 0)": show(v.improved, 1) if v.improved is not None else "–",
                         "plateau": "holds" if p.held_for(arm) else "does not hold"})
        rule = setting_by_rule(p.plain, p.thresholds)
        c = p.ceiling
        ceiling = f"{100 * c.value:.1f}% ({c.source})" if c.value is not None else f"unknown ({c.source})"
        out += [f"### How the {name} setting was chosen", "",
                f"`{sw.path}`: plain {', '.join(sorted({sw.data.sweep.info[a][0] for a in p.plain})) or '–'} alone at each "
                f"setting, before any other arm ran there; ceiling {ceiling}. The rule (docs/method.md): the setting "
                "whose plain arm passes all three criteria, the smallest change among several; else the most criteria, "
                "then the smallest change" + ("; never one whose plain arm ended at or below its step-0 pass@1 (diverged)."
                                              if p.thresholds.improved_on_start else "."), "", table(pd.DataFrame(rows), "No plain arm with evaluations."), "",
                f"The rule keeps **{rule or '–'}**; the study file states `{kept}`"
                + ("." if rule == kept else " — **they differ**: the claims sweep did not run the setting the rule keeps."), ""]
    return out


def design_rows(beds) -> pd.DataFrame:
    """Per sweep and declared family: units, α, margin, and the smallest |Δ| the members' tests
    detect at the family's power (the range over members, measured SD)."""
    rows = []
    for tb in beds:
        spec = tb.data.sweep.spec
        for fam in (spec.families_declared() if spec is not None else []):
            comps = tb.family(fam.name)
            det = [100 * c.detectable for c in comps if math.isfinite(c.detectable)]
            units = sorted({c.delta.n for c in comps})
            sds = [100 * c.delta.sd for c in comps if math.isfinite(c.delta.sd) and c.delta.sd > 0]
            m = max(1, sum(1 for c in comps if c.delta.testable))
            tost = (f"{units_for_tost(max(sds), fam.margin, m, fam.power, fam.alpha)}" if fam.margin is not None and sds
                    else "–")
            rows.append({"sweep": tb.name, "family": fam.name, "members": len(fam.pairs),
                         "units": ", ".join(map(str, units)) or "–", "α": f"{fam.alpha:g}",
                         "margin (points)": f"±{fam.margin:g}" if fam.margin is not None else "none",
                         f"detectable |Δ| at power {fam.power:g} (points)":
                             (f"{min(det):.1f}–{max(det):.1f}" if det else "–"),
                         "stated effect (points)": f"{fam.mde:g}",
                         "units TOST needs at the largest measured SD": tost})
    return pd.DataFrame(rows)


# --- the families ----------------------------------------------------------------------------------------


def _score(m: Member, v: float) -> str:
    if m.scale == 100.0:
        return pct(v)
    return f"{v:.1f}" if m.unit == "steps" else f"{v:.3f}"


def family_rows(fam: FamilyResult) -> pd.DataFrame:
    """One row per member: its sweep, Δ, the p that decided its call, the TOST p, the call, the warm
    start as the unit (unadjusted), whether it shares runs with another member."""
    rows = []
    for m in fam.members:
        c, d = m.comparison, m.comparison.delta
        row = {"sweep": m.sweep, "member": c.label, "units": d.n, "reference": _score(m, c.ref_score),
               "arm": _score(m, c.arm_score), f"Δ {m.unit} [95% CI]": delta_text(m),
               "p that decided the call": deciding_test(c, "not testable"),  # a sequential look's: its test
               "TOST Holm p": (f"±{m.scale * c.margin:g}: {pval(c.p_tost_holm, '–')}" if math.isfinite(c.margin)
                               else "no margin"),
               "call": call_text(c, m.scale, m.unit) + (" (these warm starts)" if warm_start_caveat(m) else "")}
        if m.extra:
            row.update({"escaped reference / arm": f"{m.extra['escaped_ref']} / {m.extra['escaped_arm']} of {d.n}",
                        "τ (step)": f"{m.extra['tau']:.0f}",
                        "log-rank p (stratified, unadj.)": pval(m.extra["logrank_p"], "–")})
        if any(x.over_warm_starts is not None for x in fam.members):
            o = m.over_warm_starts
            fmt = delta_format(m)
            row["unit = warm start: Δ [95% CI], p (unadj.)"] = (
                f"{fmt.format(m.scale * o.mean)} [{fmt.format(m.scale * o.lo)}, {fmt.format(m.scale * o.hi)}], "
                f"{pval(o.p, 'not testable')} ({o.n} warm starts)" if o is not None and math.isfinite(o.lo) else "–")
        if any(x.shares for x in fam.members):
            row["shares runs"] = m.shares or "–"
        rows.append(row)
    return pd.DataFrame(rows)


def adjustment_words(fam: FamilyResult) -> str:
    """How the family is adjusted and the family-wise error it guarantees (`error_bound`)."""
    s = fam.spec
    tested = sum(1 for m in fam.members if in_family(m.comparison))
    bound = fam.bound[1]
    if s.declared:
        return f"Holm p and calls are the sweep's own report's (family-wise error {bound}, the sweep file's adjustment)"
    if s.test == "noninferiority":
        side = f"Δ > −{s.margin:g}" if s.better == "higher" else f"Δ < +{s.margin:g}"
        return (f"non-inferiority: one one-sided t-test per member of {side}, Holm over the {tested} testable members at "
                f"α {s.alpha:g} (family-wise error {bound})")
    if s.margin is None:
        return f"Holm over the {tested} testable members at α {s.alpha:g}, no equivalence margin (family-wise error {bound})"
    if s.adjust == "joint":
        return (f"equivalence by TOST within ±{s.margin:g}; one Holm over the {tested} testable members' superiority "
                f"and TOST p-values together at α {s.alpha:g} (family-wise error {bound} over both kinds of call; the "
                f"detectable effect at α/{2 * max(1, tested)}, Holm's first step)")
    return (f"Holm over the {tested} testable members at α {s.alpha:g}, equivalence by TOST within ±{s.margin:g} "
            f"Holm-adjusted alike (family-wise error {bound} over both kinds of call)")


def family_lines(study: Study, fam: FamilyResult) -> list[str]:
    s = fam.spec
    out = [f"### Family `{fam.name}`", "",
           f"Members {', '.join(f'`{p}`' for p in s.members)} on {', '.join(tb.name for tb in study.named(s.sweeps)) or 'no finished sweep'}; "
           f"each compares {fam.measure}, paired by "
           f"{'warm start (each its seeds’ mean Δ)' if s.unit == 'warm_start' else 'unit'}; {adjustment_words(fam)}.", "",
           *declaration_lines(study, f"families.{fam.name}", s.declared, study.named(s.sweeps)), "",
           table(family_rows(fam), "No member has runs."), ""]
    eq = [m for m in fam.members if call(m.comparison) == EQUIVALENT and m.over_warm_starts is not None]
    if family_note(study, fam):  # a declared family its sweep's sequential design decided
        out += [family_note(study, fam), ""]
    if eq:
        out += ["An equivalence with (warm start, seed) units holds for the warm starts these runs used; the warm-start "
                "column is what generalises to another warm start.", ""]
    if fam.notes:
        out += ["Not read: " + "; ".join(fam.notes) + ".", ""]
    if any(m.level == "warm_start" for m in fam.members):
        out += ["Each member's test counts warm starts: a call holds for the warm starts these runs are a sample of.", ""]
    return out


def measure_rows(study: Study, keys: list[str]) -> pd.DataFrame:
    rows = []
    for tb in study.sweeps.values():
        for arm in tb.arms:
            row = {"sweep": tb.name, "arm": arm}
            for key in keys:
                m, lo, hi = tb.interval(arm, key)
                row[f"last-quarter {key} [95% CI]"] = f"{m:.3f} [{lo:.3f}, {hi:.3f}]" if math.isfinite(lo) else f"{m:.3f}"
            rows.append(row)
    return pd.DataFrame(rows)


def measured_keys(study: Study) -> list[str]:
    """The training metrics the study's families and conditions read (their per-arm values are printed)."""
    keys = [s.metric.split(":", 1)[1] for s in study.config.families.values() if s.metric.startswith("last_quarter:")]
    keys += [c.rule.applies_if.raised for c in study.config.claims.values()
             if isinstance(c.rule, CallsRule) and c.rule.applies_if.raised]
    return list(dict.fromkeys(keys))


# --- the curves ------------------------------------------------------------------------------------------


def curve_lines(study: Study, figures: Path | None, number: int) -> list[str]:
    """The study's curve figures (`rbctl.config.study.Curves`), drawn into ``figures`` (None: named, not drawn)."""
    out = [f"## {number}. Curves", ""]
    for spec in study.config.curves:
        tb = study.sweeps.get(spec.sweep)
        if tb is None:
            out += [f"{spec.sweep}: not finished yet, no curves.", ""]
            continue
        for metric in spec.metrics:
            slug = f"{study.source.stem}_{spec.sweep}_{metric.replace('@', '_').replace('/', '_')}"
            train = training_curve(metric)
            what = train[2] if train else f"held-out {metric}"
            drawn = figures is not None and draw_curves(tb.data.sweep.by_arm, metric, tb.benchmark, Path(figures), slug,
                                                        f"{spec.sweep}: {what}" + ("" if train else
                                                                                   " over the periodic evaluations"),
                                                        spec.arms)
            out += [f"![{spec.sweep}: {what}]({REPORT_FIGURES}/{slug}.png)" if drawn else
                    f"{spec.sweep}, {metric}: no figure (the document was written without an output folder, or no "
                    f"arm has {'logged it' if train else 'periodic evaluations of it'})", ""]
    return out


# --- the claims ------------------------------------------------------------------------------------------


def verdicts(study: Study, fams: dict[str, FamilyResult]) -> dict[str, Verdict]:
    return {cid: apply_rule(claim, study, fams) for cid, claim in study.config.claims.items()}


def claim_reads(claim, study: Study, fams: dict[str, FamilyResult]) -> list[Testbed]:
    """The sweeps a claim's rule reads (for its declaration line)."""
    r = claim.rule
    if isinstance(r, (CallsRule, TrendRule)):
        return study.named(fams[r.family].spec.sweeps)
    if isinstance(r, AssociationRule):
        return study.named(r.sweeps)
    return list(study.testbeds)


def claim_lines(study: Study, fams: dict[str, FamilyResult], verdict_of: dict[str, Verdict], number: int = 1) -> list[str]:
    rows = [{"claim": cid, "hypothesis": c.hypothesis, "rule": v.rule, "call": f"**{v.outcome}**: {v.reason}"}
            for cid, c in study.config.claims.items() for v in [verdict_of[cid]]]
    out = [f"## {number}. The claims", "",
           "Each claim's rule is the study file's; rbctl applies it and prints it beside the call (docs/method.md, "
           "studies). A member that does not apply is listed with the reason; an inconclusive result is one no test "
           "decided, with the effect its design could detect, never an absence of effect.", "",
           table(pd.DataFrame(rows), "The study file declares no claim."), ""]
    for cid, c in study.config.claims.items():
        v = verdict_of[cid]
        read = fams[c.rule.family] if isinstance(c.rule, (CallsRule, TrendRule)) else None
        out += [f"### ({cid}) {c.hypothesis}", "", f"Rule: {v.rule}.", "", f"Call: **{v.outcome}** — {v.reason}.", "",
                *([f"It reads a sequentially decided family. {family_note(study, read)}", ""]
                  if read is not None and family_note(study, read) else []),
                *declaration_lines(study, f"claims.{cid}", None, claim_reads(c, study, fams), families_read(c)), ""]
        if v.readings:
            out += [f"- {r.where}: " + (f"not applicable ({r.why})" if r.call is None else r.text) for r in v.readings]
            out.append("")
        if v.table is not None and len(v.table):
            shown = v.table.copy()
            if "p_holm" in shown:
                shown = shown.assign(**{"r [95% CI]": [f"{r:+.2f} [{lo:+.2f}, {hi:+.2f}]" if math.isfinite(lo) else
                                                       (f"{r:+.2f}" if math.isfinite(r) else "–")
                                                       for r, lo, hi in zip(shown["r"], shown["r_lo"], shown["r_hi"])],
                                        "p (unadj.)": [pval(p, "–") for p in shown["p"]],
                                        "Holm p": [pval(p, "–") for p in shown["p_holm"]],
                                        "other unit: r, p (unadj.)": [f"{r:+.2f}, {pval(p, '–')}" if math.isfinite(r) else "–"
                                                                      for r, p in zip(shown["other_r"], shown["other_p"])],
                                        "test": [{"warm_start": f"t over {b} warm starts, {d} df",
                                                  "unit": f"permutation over {b} units"
                                                          + (f" ({o:,} orderings)" if o else ""),
                                                  "arm_means": f"Pearson over {b} arm means, {d} df"}[lv]
                                                 for lv, b, d, o in zip(shown["level"], shown["blocks"], shown["df"],
                                                                        shown["orderings"])]})
                shown = shown[["sweep", "runs", "arms", "test", "r [95% CI]", "p (unadj.)", "Holm p",
                               "other unit: r, p (unadj.)"]]
            out += [markdown_table(shown), ""]
    return out


# --- the document ----------------------------------------------------------------------------------------


def multiplicity_line(study: Study, fams: dict[str, FamilyResult]) -> str:
    """The study-level multiplicity: how many members are called in how many families, each at its own
    α, and how many association and trend claims test at their own α; nothing is adjusted across them,
    so the chance of a false call somewhere in the study is bounded only by the sum of their bounds."""
    called = {n: sum(1 for m in f.members if in_family(m.comparison)) for n, f in fams.items()}
    live = [n for n, k in called.items() if k]
    tests = [c.rule for c in study.config.claims.values() if isinstance(c.rule, (AssociationRule, TrendRule))]
    total = sum(fams[n].bound[0] for n in live) + sum(r.alpha for r in tests)
    alphas = sorted({f"{fams[n].bound[0] / (2 if '2α' in fams[n].bound[1] else 1):g}" for n in live}
                    | {f"{r.alpha:g}" for r in tests})
    return (f"Study-level multiplicity: {sum(called.values())} members called in {len(live)} families, each family "
            f"adjusted within itself at its own α ({', '.join(alphas) or '–'}), and {len(tests)} association or trend "
            "claims each Holm over its sweeps at its α. Nothing is adjusted across families or claims: the chance of at "
            "least one false call somewhere in this document is bounded only by the sum of their bounds, "
            + (f"{total:.2f}." if total < 1 else f"{total:.2f}, which bounds nothing."))


def claims_markdown(study: Study, command: str | None = None, today: dt.date | None = None,
                    cpuinfo: Path = Path("/proc/cpuinfo"), figures: Path | None = None) -> str:
    """The claims document of ``study``; its curve figures are drawn into ``figures`` (None: not drawn)."""
    cfg, beds = study.config, study.testbeds
    fams = families(study)
    verdict_of = verdicts(study, fams)
    claims_sweeps = [*beds, *(t for t, _, _ in study.long), *(s for _, s, _ in study.selection)]
    prov, commits = provenance_lines(claims_sweeps)
    if study.main:
        prov += provenance_lines([study.main])[0]  # the main job keeps its own commits (its line says which)
    same = same_training_code(commits)
    out = [f"# {cfg.name}: the study's claims", "",
           f"Generated on {(today or dt.date.today()).isoformat()} by `{command or f'rbctl report {study.source}'}` "
           f"from the study file `{study.source}`; do not edit by hand.", "",
           f"Machine (where this document was generated): {cpu_description(cpuinfo)}.", "",
           *([f"The study file's note (its author's words, not a record): {cfg.note.strip()}", ""] if cfg.note else []),
           *(["Not in this document yet (the study file names them; each sweep resumes where it stopped): "
              + "; ".join(f"{what} ({why})" for what, why in study.pending) + ".", ""] if study.pending else []),
           f"Code of the claims sweeps (testbeds, settings, long horizons): "
           f"{code_text([r.provenance for tb in claims_sweeps for r in tb.runs])}" + (f" ({same})" if same else "") + ".",
           "", "Runs:", *prov, "",
           "Held-out pass@1 is avg@n of the final evaluation; Δ is paired over units (a (warm start, seed) pair, or a "
           "seed) with a 95% t-interval clipped to [−100, +100]. A family's members are Holm-adjusted within it and "
           "called higher, lower (superiority, the Holm p printed beside the call), equivalent within the stated margin "
           "(TOST, its Holm p printed), or inconclusive with its direction and the smallest effect its test could detect "
           "(docs/method.md, \"Comparing arms\"). Each family states the family-wise error its adjustment "
           "guarantees: at most 2α where superiority and TOST are each Holm-adjusted at α, at most α where one kind "
           "of call is made or the two are adjusted jointly. Columns marked unadjusted are exploratory. Whether each "
           "family and claim was declared before any run it reads finished is computed from the records the tool "
           "keeps in the sweep directories and the runs' own provenance, not from comments.", "",
           multiplicity_line(study, fams), ""]
    number = iter(range(1, 10))
    out += [f"## {next(number)}. The sweeps", "", "Plateau test of each plain arm (docs/method.md, \"Premature convergence\"): a rule "
            "that asks for the plateau reads a member only where it holds for the member's reference.", "",
            table(plateau_rows(list(study.sweeps.values()))), "",
            "Design of each family the sweep files declare: the smallest |Δ| each member's test detects with its units "
            "and measured SD, at α/m.", "", table(design_rows(list(study.sweeps.values()))), "",
            "Loss aggregation each arm ran with (its runs' saved configs):", "",
            table(aggregation_rows(list(study.sweeps.values()))), "", *selection_lines(study)]
    out += [f"## {next(number)}. The families", ""]
    for fam in fams.values():
        out += family_lines(study, fam)
    keys = measured_keys(study)
    if keys:
        out += [f"## {next(number)}. Training measures per arm", "", table(measure_rows(study, keys)), ""]
    if study.long:
        out += [f"## {next(number)}. The long horizons", ""]
        for tb, main_step, family in study.long:
            rows, lines = long_rows(tb, main_step, family, ahead_family(study, tb, fams))
            at_k = pass_at_k_lines(tb)
            out += [f"### {tb.name}", "", *lines, "", table(rows, "No member of the family has runs."), "",
                    *(["pass@k over the periodic evaluations (measured, not called): " + "; ".join(at_k) + ".", ""]
                      if at_k else [])]
    if study.config.curves:
        out += curve_lines(study, figures, next(number))
    out += claim_lines(study, fams, verdict_of, next(number))
    out += study_change_lines(study, fams, verdict_of, next(number), table)
    return "\n".join(out)


def readme_block(study: Study) -> str:
    """One line per member pair of the study's ``readme`` family (its call on each sweep, with the p
    that decided it), the long horizons' lines, and what is still pending."""
    out = []
    name = study.config.readme
    fams = families(study)
    if name:
        fam = fams[name]
        labels = list(dict.fromkeys(m.comparison.label for m in fam.members))
        for label in labels:
            parts = []
            for m in (m for m in fam.members if m.comparison.label == label):
                c = m.comparison
                caveat = warm_start_caveat(m)
                parts.append(f"{m.sweep} {call_text(c, m.scale, m.unit)} ({delta_text(m)}, {deciding_test(c)}"
                             + (f"; {caveat}" if caveat else "") + ")")
            out.append(f"- **{label}** — " + "; ".join(parts))
    for tb, main_step, family in study.long:
        out += [f"- Long horizon: {line}" for line in long_rows(tb, main_step, family, ahead_family(study, tb, fams))[1]]
    if study.pending:
        out.append("- Not in these lines yet: " + "; ".join(f"{what} ({why})" for what, why in study.pending))
    return "\n".join(out)


CLAIMS_MD = "claims.md"


def is_study_file(path: Path) -> bool:
    """Whether ``path`` is a study file (a YAML mapping with ``testbeds``) rather than a run directory."""
    path = Path(path)
    if not (path.is_file() and path.suffix in (".yaml", ".yml")):
        return False
    return "testbeds" in read_yaml(path)


def make_study_report(path: Path, out: Path | None = None, command: str | None = None, n_boot: int = 1000) -> Path:
    """Read the study file ``path`` and every sweep it names, write ``OUT/claims.md`` (default OUT:
    runs/<study name>) and return its path."""
    return write_study_report(load_study(path, n_boot), out, command)


def write_study_report(study: Study, out: Path | None = None, command: str | None = None) -> Path:
    """`make_study_report` of a study already loaded (`load_study`)."""
    from rbctl.store.atomic import write_atomic

    out = Path(out) if out is not None else Path("runs") / study.config.name
    out.mkdir(parents=True, exist_ok=True)
    target = out / CLAIMS_MD
    write_atomic(target, claims_markdown(study, command, figures=out / REPORT_FIGURES) + "\n", kind="report")
    return target
