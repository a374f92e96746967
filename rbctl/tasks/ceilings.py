"""The reachable held-out pass@1 a built-in task states: the ceiling of the plateau test (docs/method.md,
"Premature convergence": a ceiling shown reachable on the same task, never read off the runs being
compared). No rbctl imports and no torch, so the report reads it without loading a task.

Keyed by the task's kind (`data.builtin.task`). The value was shown on the task's shipped settings
(configs/fixpoint.yaml) and evaluation protocol; a sweep that changes the task states its own
(`ceiling:` in the sweep file, written to SWEEP_DIR/ceiling.json, which takes precedence).
"""

from __future__ import annotations

# kind -> (pass@1 as a fraction, where it was shown reachable)
CEILINGS: dict[str, tuple[float, str]] = {
    "fixpoint": (0.98, "the fixpoint task's stated ceiling: plain GRPO's own longer runs reach 0.98-0.99 "
                       "(240 and 480 steps from fixpoint-ws0, docs/plateau_task.md §3-4)"),
}


def task_ceiling(kind: str | None) -> tuple[float, str] | None:
    """The ceiling the task ``kind`` states, or None (the maze's depends on its setting: its sweeps state it)."""
    return CEILINGS.get(kind) if kind else None
