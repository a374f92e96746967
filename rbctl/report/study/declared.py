"""Whether each family and claim of a study was declared before any run it reads finished, from the
version records rbctl keeps in every sweep directory and the runs' own provenance
(`rbctl.report.declaration`): a family the sweep file declares by the sweep file's history and the
study file's entry that selects its members, a study family or claim by the study file's history in
that sweep directory. A claim is in force only once every family it reads is too (its rule's family
and the family of ``applies_if.called_in``: `latest`). What the study file itself lists as written
after an earlier run set's results (``written_after_results``) says so, whatever the records show."""

from __future__ import annotations

from rbctl.config.study import CallsRule, TrendRule
from rbctl.report.declaration import Declaration, family_declaration, study_declaration
from rbctl.report.study.sweeps import Study, Testbed


def latest(declarations: list[Declaration]) -> Declaration:
    """Of several declarations one thing depends on (a claim and the families it reads), the one that came
    into force last: a problem or an unknown time first (nothing is then known), else the most runs
    finished or started before it; an absent key counts only when every one is absent."""
    unknown = [d for d in declarations if d.in_force_before_first is None and not d.absent]
    if unknown:
        return next((d for d in unknown if d.problem), unknown[0])
    present = [d for d in declarations if not d.absent] or declarations
    return max(present, key=lambda d: ((d.finished_before or 0) + d.started_before + d.unknown_start,
                                       d.first_seen or ""))


def families_read(claim) -> list[str]:
    """Every study family a claim's rule reads: its family and the family its applicability names."""
    r = claim.rule
    names = [r.family] if isinstance(r, (CallsRule, TrendRule)) else []
    if isinstance(r, CallsRule) and r.applies_if.called_in:
        names.append(r.applies_if.called_in)
    return list(dict.fromkeys(names))


def _family(study: Study, tb: Testbed, name: str, content: dict) -> Declaration:
    """A study family's declaration on one sweep: the study file's entry, and for a family the sweep
    file declares the sweep file's family too (the later of the two)."""
    spec = study.config.families[name]
    own = study_declaration(study.source, tb.path, f"families.{name}", content)
    if spec.declared:
        return latest([own, family_declaration(tb.path, spec.declared)])
    return own


def declarations(study: Study, key: str, declared: str | None, beds: list[Testbed],
                 families: list[str] = ()) -> list[tuple[str, Declaration]]:
    """(sweep, declaration) for ``key`` of the study file on each sweep (``declared``: a study family
    the sweep file declares, read by both files); with ``families`` (a claim's), the latest of the
    claim's and those families'. A key the study lists in ``written_after_results`` is marked so."""
    content = study.config.model_dump(mode="json")
    earlier = key in study.config.written_after_results or key.removeprefix("claims.") in study.config.written_after_results
    out = []
    for tb in beds:
        if declared and key.startswith("families."):
            d = _family(study, tb, key.removeprefix("families."), content)
        else:
            d = study_declaration(study.source, tb.path, key, content)
        if families:
            d = latest([d, *(_family(study, tb, f, content) for f in families)])
            earlier = earlier or any(f"families.{f}" in study.config.written_after_results for f in families)
        out.append((tb.name, d.but(earlier=earlier)))
    return out


def declaration_lines(study: Study, key: str, declared: str | None, beds: list[Testbed],
                      families: list[str] = ()) -> list[str]:
    """One line: "Declared: fixpoint declared before any run in this directory finished; maze declared
    after 3 of 45 runs had finished"."""
    got = declarations(study, key, declared, beds, families)
    if not got:
        return ["Declared: no sweep read yet."]
    what = "the study file and the sweep files" if declared or any(
        study.config.families[f].declared for f in families) else "the study file"
    texts = {d.text for _, d in got}
    if len(texts) == 1:
        return [f"Declared ({what}): {texts.pop()} (every sweep it reads)."]
    return [f"Declared ({what}): " + "; ".join(f"{name}: {d.text}" for name, d in got) + "."]
