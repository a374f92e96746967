"""The sections on the calls, registered here and drawn by `rbctl.report.render.lead` (the first
screen: the question, the calls in plain words, the design, the per-unit Δ figure) and
`rbctl.report.render.answer` (the principal family in detail, each further declared family, the
design's power, the warm start as a level), whose renderers the summary and the study documents
share, and `rbctl.report.render.looks` (a sequential design's looks, or the interim label)."""

from __future__ import annotations

from rbctl.report.render import answer, lead, looks
from rbctl.report.sections.base import (ReportSection, declared_comparisons, further_families, need, register,
                                        warm_starts)

register(ReportSection("lead", "The question and the answer", lead.lead, order=10))
register(ReportSection("answer", "Calls in detail", answer.answer, order=20))
register(ReportSection("looks", "Sequential design and interim calls", looks.looks, order=25,
                       needs=(need("a design or an interim reading", lambda d: d.sequential is not None,
                                   "the runs' sweep states no design and every comparison has its units"),)))
register(ReportSection("families", "Declared families", answer.families, needs=(further_families(),), order=30))
register(ReportSection("power", "Power of the design", answer.power, needs=(declared_comparisons(),), order=40))
register(ReportSection("warm_starts", "Warm starts", answer.warm_starts, needs=(warm_starts(),), order=50))
