"""The changes of call since a previous claims document (a study file's `previous:`): each claim and each
family member whose call differs from the one that document printed, read from its own tables (the
document at a git commit, or a file), so that a regenerated document says what it no longer says."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from rbctl.config.study import AssociationRule, CallsRule, TrendRule
from rbctl.errors import UserError
from rbctl.report.analyses.comparisons import call_text
from rbctl.report.study.declared import families_read
from rbctl.report.study.long_horizons import ahead_family, long_rows

_CELL = re.compile(r"(?<!\\)\|")
_FAMILY = re.compile(r"^### Family `([^`]+)`")
_CLAIMS = re.compile(r"^## \d+\. The claims")
_LONG = re.compile(r"^## \d+\. The long horizons")
_SECTION = re.compile(r"^## ")
_SUB = re.compile(r"^### (\S+)$")
LONG = "long horizon"  # the family column of a long horizon's final-level call
_OUTCOME = re.compile(r"^\*\*([^*]+)\*\*:?\s*(.*)$")
_DATE = re.compile(r"^Generated on (\d{4}-\d{2}-\d{2})")


@dataclass
class PreviousDocument:
    """What a claims document printed: its date, each claim's call and reason, each member's call."""

    where: str
    date: str | None = None
    claims: dict[str, tuple[str, str]] = field(default_factory=dict)     # claim -> (outcome, reason)
    members: dict[tuple[str, str, str], str] = field(default_factory=dict)  # (family, sweep, member) -> call


def _cells(line: str) -> list[str]:
    return [c.strip().replace("\\|", "|") for c in _CELL.split(line.strip())[1:-1]]


def _tables(lines: list[str], start: int):
    """The markdown table starting at or after ``start`` (before the next heading): header, rows."""
    i = start
    while i < len(lines) and not lines[i].startswith("|"):
        if i > start and lines[i].startswith("#"):
            return None, []
        i += 1
    if i + 1 >= len(lines):
        return None, []
    header = _cells(lines[i])
    rows = []
    for line in lines[i + 2:]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(header, _cells(line))))
    return header, rows


def parse_claims_document(text: str, where: str) -> PreviousDocument:
    """The calls a claims document printed (its summary table of claims and its family tables)."""
    doc = PreviousDocument(where)
    lines = text.splitlines()
    in_long = False
    for i, line in enumerate(lines):
        if doc.date is None and (m := _DATE.match(line)):
            doc.date = m.group(1)
        if _SECTION.match(line):
            in_long = bool(_LONG.match(line))
        if in_long and (m := _SUB.match(line)):
            header, rows = _tables(lines, i + 1)
            if header and {"comparison", "call (final level)"} <= set(header):
                for r in rows:
                    doc.members[(LONG, m.group(1), r["comparison"])] = r["call (final level)"]
        elif m := _FAMILY.match(line):
            header, rows = _tables(lines, i + 1)
            if header and {"sweep", "member", "call"} <= set(header):
                for r in rows:
                    doc.members[(m.group(1), r["sweep"], r["member"])] = r["call"]
        elif _CLAIMS.match(line):
            header, rows = _tables(lines, i + 1)
            if header and {"claim", "call"} <= set(header):
                for r in rows:
                    o = _OUTCOME.match(r["call"])
                    doc.claims[r["claim"]] = (o.group(1), o.group(2)) if o else (r["call"], "")
    if not doc.claims and not doc.members:
        raise UserError(f"previous.file: {where} holds no claims table and no family table of a claims document")
    return doc


def read_previous(file: str, commit: str | None, repo: Path = Path(".")) -> PreviousDocument:
    """The previous document: ``file`` (a path from the repository's root) at git ``commit`` in the repository
    that holds ``repo`` (the study file's folder), or the file itself (from the current directory) when no
    commit is named."""
    if commit is None:
        path = Path(file)
        if not path.is_file():
            raise UserError(f"previous.file: {file} does not exist")
        return parse_claims_document(path.read_text(), file)
    try:
        text = subprocess.run(["git", "-C", str(repo), "show", f"{commit}:{file}"], capture_output=True, text=True,
                              check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        why = (getattr(e, "stderr", "") or str(e)).strip().splitlines()
        raise UserError(f"previous: cannot read {file} at commit {commit} ({why[0] if why else 'git failed'})") from None
    return parse_claims_document(text, f"{file} at {commit}")


def call_kind(text: str) -> str:
    """A member's call without the detail that can move with no change of call: the detectable effect and
    direction of an inconclusive call, a warm-start caveat; 'lower (within ±5)' stays itself."""
    text = re.sub(r"\s*\(these warm starts\)$", "", text.strip())
    m = re.match(r"^(.*?)\s*\((.*)\)$", text)
    if m and not m.group(2).startswith("within"):
        return m.group(1)
    return text


def member_changes(previous: PreviousDocument, now: dict[tuple[str, str, str], str]):
    """(changed rows, kept count, members only in the previous document, members only in this one)."""
    changed = [{"family": f, "sweep": s, "member": mem, "previous call": previous.members[(f, s, mem)], "this call": c}
               for (f, s, mem), c in now.items()
               if (f, s, mem) in previous.members and call_kind(previous.members[(f, s, mem)]) != call_kind(c)]
    kept = sum(1 for k, c in now.items() if k in previous.members and call_kind(previous.members[k]) == call_kind(c))
    gone = sorted(k for k in previous.members if k not in now)
    new = sorted(k for k in now if k not in previous.members)
    return pd.DataFrame(changed), kept, gone, new


def study_change_lines(study, fams, verdict_of, number: int, table) -> list[str]:
    """`change_lines` for a study whose file names `previous:` (none: no section)."""
    spec = study.config.previous
    if spec is None:
        return []
    members = {(name, m.sweep, m.comparison.label): call_text(m.comparison, m.scale, m.unit)
               for name, fam in fams.items() for m in fam.members}
    for tb, main_step, family in study.long:  # each long horizon's final-level call, as its table prints it
        rows = long_rows(tb, main_step, family, ahead_family(study, tb, fams))[0]
        members.update({(LONG, tb.name, r["comparison"]): r["call (final level)"] for _, r in rows.iterrows()})
    claims = {cid: (v.outcome, v.reason) for cid, v in verdict_of.items()}
    unread = {cid: [n for n, _ in study.unread(sweeps_read(c, fams))] for cid, c in study.config.claims.items()}
    try:
        previous = read_previous(spec.file, spec.commit, study.source.resolve().parent)
    except UserError as e:  # e.g. a shallow clone without the commit: the document says so, the rest stands
        return [f"## {number}. Changes of call since the previous document", "", f"Not compared: {e}.", ""]
    return change_lines(previous, spec.note, claims, members, number, table, unread)


def sweeps_read(claim, fams) -> list[str] | None:
    """The study names of the sweeps a claim's rule reads (None: every testbed)."""
    r = claim.rule
    if isinstance(r, AssociationRule):
        return r.sweeps
    if isinstance(r, (CallsRule, TrendRule)):
        return list(dict.fromkeys(s for f in families_read(claim) for s in (fams[f].spec.sweeps or [])))
    return []


def change_lines(previous: PreviousDocument, note: str | None, claims_now: dict[str, tuple[str, str]],
                 members_now: dict[tuple[str, str, str], str], number: int, table,
                 unread: dict[str, list[str]] | None = None) -> list[str]:
    """The section: claims whose call changed (both calls and reasons; a claim that reads a sweep not read
    yet is marked so, its call not final), members whose call changed, what either document has that the
    other does not, and the study file's own words on why (labelled so)."""
    unread = unread or {}
    when = f" (generated {previous.date})" if previous.date else ""
    out = [f"## {number}. Changes of call since the previous document", "",
           f"Compared with `{previous.where}`{when}, read from its own tables: a call is the outcome of a claim, or a "
           "member's higher, lower, equivalent or inconclusive (an inconclusive call's detectable effect and a "
           "warm-start caveat are detail, not a change).", ""]
    if note:
        out += [f"The study file's words on the change (its author's, not a record): {note.strip()}", ""]
    rows = [{"claim": cid, "previous call": f"{po}: {pr}" if pr else po, "this call": f"{o}: {r}" if r else o,
             "sweeps not read yet": ", ".join(unread.get(cid, [])) or "–"}
            for cid, (o, r) in claims_now.items() if cid in previous.claims
            for po, pr in [previous.claims[cid]] if po != o]
    if rows and not any(unread.get(r["claim"]) for r in rows):
        rows = [{k: v for k, v in r.items() if k != "sweeps not read yet"} for r in rows]
    same = [cid for cid, (o, _) in claims_now.items() if cid in previous.claims and previous.claims[cid][0] == o]
    out += [f"Claims whose call changed: {len(rows)} of {sum(1 for c in claims_now if c in previous.claims)}"
            + (f" (the same call: {', '.join(same)})" if same else "") + ".", ""]
    if rows:
        out += [table(pd.DataFrame(rows)), ""]
        if any(unread.get(r["claim"]) for r in rows):
            out += ["A claim with sweeps not read yet is called on the sweeps that are: its call may move again "
                    "when they finish.", ""]
    fresh = [c for c in claims_now if c not in previous.claims]
    dropped = [c for c in previous.claims if c not in claims_now]
    if fresh or dropped:
        out += ["; ".join(([f"Claims new in this document: {', '.join(fresh)}"] if fresh else [])
                          + ([f"claims the previous document had and this one does not: {', '.join(dropped)}"]
                             if dropped else [])) + ".", ""]
    changed, kept, gone, new = member_changes(previous, members_now)
    out += [f"Members whose call changed: {len(changed)}; the same call: {kept}.", ""]
    if len(changed):
        out += [table(changed), ""]
    if gone:
        out += ["In the previous document, not read in this one (a sweep pending, or a member no longer formed): "
                + "; ".join(f"{f} {s} {m}" for f, s, m in gone) + ".", ""]
    if new:
        out += ["Read in this document, not in the previous one: " + "; ".join(f"{f} {s} {m}" for f, s, m in new) + ".", ""]
    return out
