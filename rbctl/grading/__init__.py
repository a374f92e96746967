"""Grading without torch: answer extraction, the killable math-verify worker pool, eval metrics.

One grader serves evaluation and the training reward (docs/method.md, "Evaluation metrics").
"""

from rbctl.grading.extract import STATUSES, GradeResult, extract_boxed, precheck
from rbctl.grading.verify import (
    answers_equivalent,
    grade,
    grade_answer,
    grade_detailed,
    grade_many,
    warm_up,
)

__all__ = ["STATUSES", "GradeResult", "answers_equivalent", "extract_boxed", "grade", "grade_answer",
           "grade_detailed", "grade_many", "precheck", "warm_up"]
