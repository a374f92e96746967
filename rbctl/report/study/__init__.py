"""A study's claims as data (`rbctl report STUDY.yaml`; the study file: `rbctl.config.study`): its
sweeps (`sweeps`), its families (`families`), the rules its claims are called by (`rules`, `checks`),
when each was declared (`declared`), and the document's generic sections (`document`)."""

from rbctl.report.study.claims_document import (CLAIMS_MD, claims_markdown, is_study_file, make_study_report,
                                         readme_block)
from rbctl.report.study.sweeps import Study, Testbed, load_study

__all__ = ["CLAIMS_MD", "Study", "Testbed", "claims_markdown", "is_study_file", "load_study", "make_study_report",
           "readme_block"]
