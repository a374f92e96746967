"""Whether the same sweep, run on two disjoint sets of seeds, calls its principal comparisons the same.

    python -m studies.reward_budgeting.documents.stability SWEEP_A SWEEP_B

Builds the report's data of each sweep (`rbctl.report.report_data`) and prints
both verdict tables side by side (per principal comparison: Δ in points with its 95% t-interval, the
Holm-adjusted p, significant yes/no, the verdict), then whether every comparison got the same call
(the same verdict: higher, lower, equivalent or inconclusive; a comparison that is not testable in either
sweep has no call to agree on). Exit code 0 when every call agrees, 1 when one
differs or is missing from a sweep, 2 on bad input (the two sweeps share a unit, or no comparison).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from rbctl.errors import UserError
from rbctl.report import ReportData, report_data
from rbctl.report.render.tables import delta, markdown_table, pval
from rbctl.report.stats import NOT_TESTABLE


def verdicts(sweep: Path) -> pd.DataFrame:
    """The verdict rows of a sweep's report, indexed by (arm, ref, benchmark, metric)."""
    return verdict_rows(report_data([sweep]), sweep)


def verdict_rows(data: ReportData, sweep: Path) -> pd.DataFrame:
    """The verdict rows (tables/verdicts.csv) of ``data``, the report's data of ``sweep``."""
    table = data.verdict.rows
    if not len(table):
        raise UserError(f"{sweep}: its report has no principal comparison with final evaluations on both sides")
    return table.set_index(["arm", "ref", "benchmark", "metric"])


def side_by_side(a: pd.DataFrame, b: pd.DataFrame) -> tuple[pd.DataFrame, bool]:
    """The two tables joined on the comparison, and whether every call is the same."""

    def cells(t: pd.DataFrame, key) -> tuple[str, str, str, str]:
        if key not in t.index:
            return "–", "–", "–", "missing"
        r = t.loc[key]
        untestable = str(r["verdict"]) == NOT_TESTABLE
        return (delta(r["delta"], r["delta_lo"], r["delta_hi"]), pval(r["p_holm"], NOT_TESTABLE if untestable else "–"),
                "–" if untestable else "yes" if bool(r["significant"]) else "no", str(r["verdict"]))

    rows, same = [], True
    for key in list(dict.fromkeys([*a.index, *b.index])):
        ca, cb = cells(a, key), cells(b, key)
        agree = ca[3] == cb[3] and ca[3] not in ("missing", "same config", NOT_TESTABLE)
        same &= agree
        rows.append({"comparison": f"{key[0]} − {key[1]}", "benchmark": key[2], "metric": key[3],
                     "A: Δ [95% t-CI]": ca[0], "A: Holm p": ca[1], "A: significant": ca[2],
                     "B: Δ [95% t-CI]": cb[0], "B: Holm p": cb[1], "B: significant": cb[2],
                     "same call": "yes" if agree else (f"no call ({ca[3]} / {cb[3]})" if NOT_TESTABLE in (ca[3], cb[3])
                                                       else f"no ({ca[3]} / {cb[3]})")})
    return pd.DataFrame(rows), same


def conclusion(table: pd.DataFrame, same: bool) -> str:
    """One sentence on the side-by-side table: every call the same; some comparison without a call on
    a seed set (not testable there: there is nothing to agree on); or calls that differ."""
    if same:
        return "every principal comparison gets the same call"
    calls = table["same call"].astype(str)
    if calls.str.startswith("no (").any():
        return "the calls differ"
    return ("not every principal comparison has a call on both seed sets (not testable: "
            + ", ".join(table["comparison"][calls.str.startswith("no call")]) + ")")


def seed_units(t: pd.DataFrame) -> set[str]:
    return {u for s in t["seed_list"].astype(str) for u in s.split(",") if u and u != "nan"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("sweep_a", type=Path)
    p.add_argument("sweep_b", type=Path)
    args = p.parse_args(argv)
    try:
        a = verdicts(args.sweep_a)
        b = verdicts(args.sweep_b)
        shared = sorted(seed_units(a) & seed_units(b))
        if shared:
            raise UserError(f"the two sweeps share units ({', '.join(shared)}): their seed sets must be disjoint")
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    table, same = side_by_side(a, b)
    print(f"A: {args.sweep_a} (units {', '.join(sorted(seed_units(a)))})")
    print(f"B: {args.sweep_b} (units {', '.join(sorted(seed_units(b)))})\n")
    print(markdown_table(table))
    print(conclusion(table, same))
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
