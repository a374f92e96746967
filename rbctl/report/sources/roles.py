"""How a role's name (the manifest's `roles`, `rbctl.config.manifest.Roles`) matches what a run
logged, and rbctl's names for the roles in a run's records (docs/metrics.md)."""

from __future__ import annotations

import difflib
import re

from rbctl.config.manifest import Roles

# role -> rbctl's name for it in a run's metrics (docs/metrics.md); "heldout" -> the evals' avg@n
ROLE_NAMES = {"entropy": "entropy", "kappa": "kappa", "kappa_eff": "kappa_eff", "adv_gap": "adv/gap",
              "reward": "reward/mean", "response_length": "response/len_mean"}
ROLE_LABELS = {"heldout": "held-out score", "entropy": "entropy", "kappa": "κ", "kappa_eff": "κ_eff",
               "adv_gap": "advantage gap", "reward": "training reward", "response_length": "response length"}
HELDOUT = "avg@n"
MEAN_ONLY_ID = "mean"  # the one "problem" of a final summary that holds only the logged mean


def regex(pattern: str) -> re.Pattern:
    """A role's name as a regex: {benchmark} captured (it may hold slashes: verl's data source
    `openai/gsm8k`), {n} captured (digits), any other {x} one path segment."""
    out, pos = "", 0
    for m in re.finditer(r"{(\w+)}", pattern):
        out += re.escape(pattern[pos:m.start()])
        name = m.group(1)
        out += (r"(?P<n>\d+)" if name == "n" else r"(?P<benchmark>.+?)" if name == "benchmark" else r"[^/]+")
        pos = m.end()
    return re.compile(out + re.escape(pattern[pos:]) + r"\Z")


def find(values: dict[str, float], pattern: str | None) -> tuple[str, float] | None:
    """The logged (name, value) a training role's name matches (the first in sorted order)."""
    if pattern is None:
        return None
    if pattern in values:
        return pattern, values[pattern]
    rx = regex(pattern)
    hit = sorted(k for k in values if rx.match(k))
    return (hit[0], values[hit[0]]) if hit else None


def matches(pattern: str, names) -> list[str]:
    """The names among ``names`` a role's name matches."""
    rx = regex(pattern)
    return [k for k in names if k == pattern or rx.match(k)]


def did_you_mean(pattern: str, names) -> str:
    """" (did you mean `x`?)" when a logged name is close to a role's name that matches none."""
    near = difflib.get_close_matches(pattern, sorted(names), n=1, cutoff=0.75)
    return f"; did you mean `{near[0]}`?" if near else ""


def heldout_scores(values: dict[str, float], roles: Roles) -> dict[str, tuple[str, float]]:
    """{benchmark: (logged name, score)} of one step: per benchmark the match of ``roles.heldout``
    with the largest {n} (verl's val-core holds the largest n only; an explicit name has none)."""
    if roles.heldout is None:
        return {}
    rx, found = regex(roles.heldout), {}
    for k in sorted(values):
        m = rx.match(k)
        if m:
            g = m.groupdict()
            bench, n = g.get("benchmark") or roles.benchmark, int(g["n"]) if g.get("n") else 0
            if bench not in found or n > found[bench][0]:
                found[bench] = (n, k, values[k])
    return {b: (k, v) for b, (_, k, v) in found.items()}
