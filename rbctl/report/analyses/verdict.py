"""The answer of a report: the principal comparisons' verdicts (docs/method.md, "Comparing arms"), or,
when the sweep file states none, those of every stated pair as one family.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from rbctl.report.analyses.comparisons import ALPHA, Comparison, ComparisonSet, in_family


@dataclass(frozen=True)
class Verdict:
    """The comparisons whose verdicts the report calls (`ComparisonSet.headline`), their rows
    (tables/verdicts.csv; empty without any), the Holm family's size and level, and what could not be
    called."""

    comparisons: tuple[Comparison, ...]
    rows: pd.DataFrame
    principal_declared: bool  # the sweep file states principal comparisons (else: the stated pairs)
    alpha: float
    tested: int  # m: the comparisons counted in the Holm family (`in_family`)
    missing: tuple[str, ...]  # principal comparisons without final evaluations of both arms
    refused: tuple[str, ...]  # comparisons of two arms that ran the same training config


def verdict(compared: ComparisonSet, spec=None) -> Verdict:
    """The answer from a report's comparisons; ``spec`` is the sweep file's
    `rbctl.config.sweep.Comparisons` (None when it states none)."""
    comps = compared.headline
    rows = compared.rows[compared.rows["family"] == comps[0].family] if comps else pd.DataFrame()
    missing = () if spec is None else tuple(f"{a} − {r}" for a, r in spec.principal
                                            if not any((c.arm, c.ref) == (a, r) for c in comps))
    return Verdict(tuple(comps), rows, spec is not None, spec.alpha if spec is not None else ALPHA,
                   sum(in_family(c) for c in comps), missing, tuple(c.label for c in comps if c.same_config))
