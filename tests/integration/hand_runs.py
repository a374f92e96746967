"""Hand-made run and sweep directories for report tests whose numbers are worked out by hand from the
counts (4 problems × n samples per run): one run's files (`write_run`) and a sweep's state and sweep file
(`write_sweep_files`)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml


STARTED = "2026-12-05T00:00:00+0000"  # each hand-made run's start (provenance.json), after the histories tests record


def write_run(d: Path, *, cfg: dict, meta: dict, metrics: list[dict], evals: list[dict], steps: int,
              correct: list[int], n: int, started: str = STARTED) -> None:
    """A finished run in ``d``: its saved config, run.json, provenance (``started``), metrics.jsonl,
    periodic eval.jsonl (lines on builtin with n samples) and the final evaluation at ``steps`` with
    ``correct[i]`` of ``n`` right on problem p{i}."""
    final = d / "eval" / f"step_{steps:06d}" / "builtin"
    final.mkdir(parents=True)
    (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    (d / "run.json").write_text(json.dumps(meta))
    (d / "provenance.json").write_text(json.dumps({"git_commit": "0123abc", "started": started}))
    (d / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    (d / "eval.jsonl").write_text("".join(json.dumps({"benchmark": "builtin", "n": n, **x}) + "\n" for x in evals))
    summary = {"benchmark": "builtin", "step": steps, "n": n, "num_problems": len(correct),
               "per_problem": [{"id": f"p{i}", "n": n, "correct": k} for i, k in enumerate(correct)]}
    (final / "summary.json").write_text(json.dumps(summary))


def write_sweep_files(root: Path, run_keys: list[str], sweep: dict) -> None:
    """The sweep's state (every run in ``run_keys`` done) and its resolved sweep file."""
    (root / "state.json").write_text(json.dumps({"runs": {k: {"status": "done"} for k in run_keys}}))
    (root / "sweep.yaml").write_text(yaml.safe_dump({"sweep": sweep, "configs": {}}, sort_keys=False))
