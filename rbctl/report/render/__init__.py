"""The report's rendering layer: Markdown and self-contained HTML (`document`), tables as
CSV/Markdown/LaTeX (`tables`), figures (`figures`), the page they are written onto (`page`), the
sections in reading order (`answer`, `convergence`, `sections`) and the whole report (`report`),
all from one `rbctl.report.data.ReportData`. Nothing here computes a statistic.
"""
