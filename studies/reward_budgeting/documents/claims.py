"""Write the study's one-line-per-baseline summary into its README's claims block (studies/reward_budgeting/README.md).

    python -m studies.reward_budgeting.documents.claims studies/reward_budgeting/configs/study_claims.yaml --write-readme

The claims document itself is `rbctl report studies/reward_budgeting/configs/study_claims.yaml -o runs/study_claims`
(rbctl.report.study); this entry point only puts that study's summary (`readme_block`) between the
study README's ``<!-- claims: begin -->`` and ``<!-- claims: end -->``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rbctl.errors import exit_code
from rbctl.report.study import load_study, readme_block
from rbctl.report.provenance import write_block
from studies.reward_budgeting.documents import STUDY_README

BEGIN, END = "<!-- claims: begin -->", "<!-- claims: end -->"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m studies.reward_budgeting.documents.claims", description=__doc__.split("\n")[0])
    ap.add_argument("study", type=Path, help="the study file (studies/reward_budgeting/configs/study_claims.yaml)")
    ap.add_argument("--write-readme", type=Path, nargs="?", const=STUDY_README, default=STUDY_README,
                    help="the README whose claims block to rewrite (default: the study's README)")
    a = ap.parse_args(argv)
    return exit_code(lambda: write_block(a.write_readme, readme_block(load_study(a.study)), BEGIN, END))


if __name__ == "__main__":
    raise SystemExit(main())
