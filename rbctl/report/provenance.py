"""Where a result document's numbers come from: the runs' commits, whether each run's tree was clean
(`code_text`: a document says "one commit" only when every run records the same commit and a clean
tree), the date they last logged, whether the training code is the same at those commits, and the
machine the document was generated on.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from rbctl.report.load import find_runs
from rbctl.store.read import newest_metrics_time

ISA_FLAGS = ("avx2", "avx512f", "amx_bf16", "amx_int8", "amx_tile")
# the packages a run's numbers depend on: runs made at commits that agree on these ran the same training code
TRAINING_CODE = ("rbctl/algo", "rbctl/train", "rbctl/rollout", "rbctl/tasks", "rbctl/config", "rbctl/eval", "rbctl/grading")


def cpu_description(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """``AMD EPYC (16 logical CPUs, 2 usable); avx2 yes, avx512f yes, amx_bf16 no, …`` from /proc/cpuinfo."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return "unknown (no /proc/cpuinfo)"
    model = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), "unknown")
    flags = set(next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), []))
    cpus = sum(line.startswith("processor") for line in text.splitlines())
    isa = ", ".join(f"{f} {'yes' if f in flags else 'no'}" for f in ISA_FLAGS)
    return f"{model} ({cpus} logical CPUs, {os.cpu_count()} usable); {isa}"


@dataclass
class Provenance:
    """A sweep directory's runs, their commits (a Markdown list), what code they ran (`code_text`:
    "one commit" only where the records show it) and the date they last logged."""

    runs: list
    commits: str
    last: str
    code: str = ""

    @property
    def per_arm(self) -> list[int]:
        """The distinct numbers of units per arm."""
        return sorted({sum(r.arm == a for r in self.runs) for a in {r.arm for r in self.runs}})

    @property
    def commit_list(self) -> list[str]:
        return sorted({str(r.provenance.get("git_commit"))[:7] for r in self.runs if r.provenance.get("git_commit")})


def provenance(sweep: Path, short: bool = False, runs: list | None = None) -> Provenance:
    """The provenance of a sweep directory (commits of 7 characters if ``short``); ``runs``: its runs,
    when the caller has read them already."""
    if runs is None:
        runs, _ = find_runs([sweep])
    commits = sorted({str(r.provenance.get("git_commit"))[:7 if short else None] for r in runs if r.provenance.get("git_commit")})
    logged = newest_metrics_time(sweep)
    last = dt.datetime.fromtimestamp(logged, tz=dt.timezone.utc).date().isoformat() if logged else "unknown"
    return Provenance(runs, ", ".join(f"`{c}`" for c in commits) or "unknown (no provenance)", last,
                      code_text([r.provenance for r in runs], short))


def code_text(headers: list[dict], short: bool = True) -> str:
    """What code a set of runs ran, from their headers (provenance.json): "one commit `abc1234`
    (every run from a clean tree)" only when every run records the same commit and records its tree
    clean (``git_dirty`` false); otherwise the commits, and how many runs came from a dirty tree (with
    how many distinct diffs), have no dirty flag recorded (runs made before rbctl recorded one:
    unknown) or no commit at all. A dirty run's code is its commit plus a diff that is not kept, so
    it does not re-run from the commit alone."""
    n = len(headers)
    if not n:
        return "unknown (no runs)"
    cut = 7 if short else None
    commits = sorted({str(h.get("git_commit"))[:cut] for h in headers if h.get("git_commit")})
    if not commits:
        return f"unknown (no run of {n} records a commit)"
    dirty = [h for h in headers if h.get("git_commit") and h.get("git_dirty") is True]
    unknown = sum(1 for h in headers if h.get("git_commit") and h.get("git_dirty") is None)
    no_commit = sum(1 for h in headers if not h.get("git_commit"))
    named = ", ".join(f"`{c}`" for c in commits)
    if len(commits) == 1 and not dirty and not unknown and not no_commit:
        return f"one commit {named} (every run from a clean tree)"
    parts = []
    if dirty:
        diffs = len({h.get("git_diff_sha256") for h in dirty})
        parts.append(f"{len(dirty)} of {n} runs from a dirty tree, {diffs} distinct uncommitted {'diff' if diffs == 1 else 'diffs'}")
    if unknown:
        parts.append(f"{unknown} of {n} runs record no dirty flag: unknown")
    if no_commit:
        parts.append(f"{no_commit} of {n} runs record no commit")
    if not parts:
        parts.append("every run from a clean tree")
    return f"{'commit' if len(commits) == 1 else f'{len(commits)} commits'} {named} ({'; '.join(parts)})"


def same_training_code(commits: list[str]) -> str:
    """Whether the packages a run's numbers depend on (`TRAINING_CODE`) are identical at these commits,
    by `git diff --quiet`; "" for one commit, "unknown" outside a git checkout."""
    if len(commits) < 2:
        return ""
    try:
        same = all(subprocess.run(["git", "diff", "--quiet", commits[0], c, "--", *TRAINING_CODE],
                                  capture_output=True).returncode == 0 for c in commits[1:])
    except OSError:
        return "unknown"
    return ("training code identical at these commits" if same else
            "the training code is not identical at these commits (git diff)")


def write_block(path: Path, text: str, begin: str, end: str) -> None:
    """Replace the block between the markers ``begin`` and ``end`` of a document (the README's
    generated blocks) with ``text``; a document without both markers is an error naming them."""
    from rbctl.errors import UserError

    doc = Path(path).read_text()
    if begin not in doc or end not in doc:
        raise UserError(f"{path} has no {begin} … {end} block")
    head, rest = doc.split(begin, 1)
    _, tail = rest.split(end, 1)
    Path(path).write_text(f"{head}{begin}\n{text}\n{end}{tail}")
