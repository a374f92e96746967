"""Whether each family and claim of a study was declared before the first result it reads, from the
version records rbctl keeps in every sweep directory (`rbctl.report.declaration`): a family the sweep
file declares by the sweep file's history, a study family or claim by the study file's history in
that sweep directory; a claim is in force only once its family is too (`latest`)."""

from __future__ import annotations

from rbctl.report.declaration import Declaration, family_declaration, study_declaration
from rbctl.report.study.sweeps import Study, Testbed


def latest(declarations: list[Declaration]) -> Declaration:
    """Of several declarations one thing depends on (a claim and the family it reads), the one that came
    into force last: most runs finished before it; one whose time is unknown wins, as nothing is then
    known; an absent key counts only when every one is absent."""
    unknown = [d for d in declarations if d.in_force_before_first is None and not d.absent]
    if unknown:
        return unknown[0]
    present = [d for d in declarations if not d.absent] or declarations
    return max(present, key=lambda d: (d.finished_before or 0, d.first_seen or ""))


def declarations(study: Study, key: str, declared: str | None, beds: list[Testbed],
                 family: str | None = None) -> list[tuple[str, Declaration]]:
    """(sweep, declaration) for ``key`` of the study file on each sweep (``declared``: the sweep
    file's own family of that name instead); with ``family`` (a claim's), the later of the claim's
    and that family's."""
    fams = study.config.families
    out = []
    for tb in beds:
        d = family_declaration(tb.path, declared) if declared else study_declaration(study.source, tb.path, key)
        if family is not None:
            spec = fams[family]
            f = (family_declaration(tb.path, spec.declared) if spec.declared
                 else study_declaration(study.source, tb.path, f"families.{family}"))
            d = latest([d, f])
        out.append((tb.name, d))
    return out


def declaration_lines(study: Study, key: str, declared: str | None, beds: list[Testbed],
                      family: str | None = None) -> list[str]:
    """One line: "Declared: fixpoint declared before the first result; maze declared after 3 of 45 runs
    had finished"."""
    got = declarations(study, key, declared, beds, family)
    if not got:
        return ["Declared: no sweep read yet."]
    texts = {d.text for _, d in got}
    if len(texts) == 1:
        return [f"Declared ({'the sweep files' if declared else 'the study file'}): {texts.pop()} (every sweep it reads)."]
    return [f"Declared ({'the sweep files' if declared else 'the study file'}): "
            + "; ".join(f"{name}: {d.text}" for name, d in got) + "."]
