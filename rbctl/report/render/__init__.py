"""The report's rendering layer: Markdown and self-contained HTML (`document`), tables as
CSV/Markdown/LaTeX (`tables`), figures (`figures`), the page they are written onto (`page`), the
first screen (`lead`: the question, the calls, the design, the per-unit Δ figure), the answer in
words shared by the first screen, the one-page summary and the terminal (`calls`, `summary`,
`terminal`), the sections of details in reading order (`answer`, `convergence`, `sections`) and the
whole report (`report`), all from one `rbctl.report.data.ReportData`. Nothing here computes a
statistic or decides a call.
"""
