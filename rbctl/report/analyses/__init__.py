"""The report's analyses, one per question, each a function of the loaded runs returning a frozen
dataclass: final scores (`scores`), the comparisons (`comparisons`), the answer (`verdict`), the
design's power (`design`), warm starts (`warm_starts`), the plateau test (`plateau`), escape times
(`escape_time`), entropy and κ_eff (`entropy`) and training trajectories (`trajectories`).
`rbctl.report.data` runs them all once. `crossing` (the step from which one arm's mean curve stays
above another's, with a bootstrap-over-units interval) and `trend` (the per-unit slope of a paired Δ
over a setting such as log2 G, tested over units) are pure functions for the study's claims, not
yet run by the report.
"""
