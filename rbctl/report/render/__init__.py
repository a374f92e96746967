"""The report's rendering layer: Markdown and self-contained HTML (`document`), tables as
CSV/Markdown/LaTeX (`tables`), figures (`figures`), the page they are written onto (`page`), the
first screen (`lead`: the question, the calls, the design, the per-unit Δ figure), the answer in
words shared by the first screen, the one-page summary and the terminal (`calls`, `summary`,
`terminal`), the calls in detail (`answer`) and the whole report (`report`: the registered sections
of `rbctl.report.sections` in reading order), all from one `rbctl.report.data.ReportData`. Nothing
here computes a statistic or decides a call.
"""
