"""The sections on the calls, registered here and drawn by `rbctl.report.render.lead` (the first
screen: the question, the calls in plain words, the design, the per-unit Δ figure) and
`rbctl.report.render.answer` (the principal family in detail, each further declared family, the
design's power, the warm start as a level), whose renderers the summary and the study documents
share."""

from __future__ import annotations

from rbctl.report.render import answer, lead
from rbctl.report.sections.base import ReportSection, declared_comparisons, further_families, register, warm_starts

register(ReportSection("lead", "The question and the answer", lead.lead, order=10))
register(ReportSection("answer", "Calls in detail", answer.answer, order=20))
register(ReportSection("families", "Declared families", answer.families, needs=(further_families(),), order=30))
register(ReportSection("power", "Power of the design", answer.power, needs=(declared_comparisons(),), order=40))
register(ReportSection("warm_starts", "Warm starts", answer.warm_starts, needs=(warm_starts(),), order=50))
