"""Grading without torch: answer extraction, the killable math-verify worker pool, eval metrics.

One grader serves evaluation and the training reward (docs/method.md, "Evaluation metrics" and
"Answer extraction").
"""

from rbctl.grading.extract import (
    EXTRACTION_POLICY,
    EXTRACTIONS,
    STATUSES,
    GradeResult,
    extract_boxed,
    extract_final_answer,
    join_digit_groups,
    precheck,
)
from rbctl.grading.verify import (
    answers_equivalent,
    grade,
    grade_answer,
    grade_detailed,
    grade_many,
    warm_up,
)

__all__ = ["EXTRACTIONS", "EXTRACTION_POLICY", "STATUSES", "GradeResult", "answers_equivalent", "extract_boxed",
           "extract_final_answer", "grade", "grade_answer", "grade_detailed", "grade_many", "join_digit_groups",
           "precheck", "warm_up"]
