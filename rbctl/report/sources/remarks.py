"""What a manifest's runs do not log, or do unlike each other, one line each (the report shows them
once, beside the analyses that use what the runs do log): a role no run logs (with the logged name
closest to a mistyped one), a role logged as null or NaN (undefined at those steps, not missing),
runs that logged different numbers of steps or evaluated at different steps, runs without an end
record, and where `rbctl eval` can supply the held-out scores the runs did not log."""

from __future__ import annotations

import math
import shlex
from collections import Counter

from rbctl.config.manifest import RunsManifest
from rbctl.report.runs import Run
from rbctl.report.sources.checkpoint_evals import checkpoint_folders
from rbctl.report.sources.roles import ROLE_LABELS, ROLE_NAMES, did_you_mean, matches

UNDEFINED = "null or NaN"


def _logged_names(runs: list[Run]) -> set[str]:
    """The names the runs logged (rbctl's names for the roles they fill aside)."""
    return {k for r in runs for x in r.metrics for k in x if k != "step"} - set(ROLE_NAMES.values())


def _names(runs: list[Run]) -> str:
    return ", ".join(r.name for r in runs)


def _training_role(role: str, label: str, pattern: str, runs: list[Run], logged: set[str]) -> list[str]:
    key = ROLE_NAMES[role]
    present = [r for r in runs if any(key in x for x in r.metrics)]
    finite = [r for r in present if any(math.isfinite(x.get(key, math.nan)) for x in r.metrics)]
    if not present:
        return [f"{label}: not logged by these runs (no `{pattern}` in their records{did_you_mean(pattern, logged)})"]
    out = []
    if len(present) < len(runs):
        out.append(f"{label}: logged by {len(present)} of {len(runs)} runs (`{pattern}`); not by "
                   + _names([r for r in runs if r not in present]))
    never = [r for r in present if r not in finite]
    if never:
        out.append(f"{label}: undefined at every step {_names(never)} logged it (`{pattern}` is {UNDEFINED} there)")
    steps = [(x.get(key), r) for r in finite for x in r.metrics if key in x]
    gaps = sum(1 for v, _ in steps if not math.isfinite(v))
    if gaps:
        out.append(f"{label}: undefined ({UNDEFINED}) at {gaps} of the {len(steps)} steps it was logged; those steps "
                   "are left out of its trajectory")
    return out


def _heldout(m: RunsManifest, pattern: str | None, runs: list[Run], logged: set[str]) -> list[str]:
    label, out = ROLE_LABELS["heldout"], []
    having = [r for r in runs if r.evals]
    if not having:
        why = ("the manifest names no metric for roles.heldout" if pattern is None else
               f"no `{pattern}` in their records{did_you_mean(pattern, logged)}")
        out.append(f"{label}: not logged by these runs ({why}){eval_hint(m, runs)}")
    elif len(having) < len(runs):
        out.append(f"{label}: logged by {len(having)} of {len(runs)} runs; not by {_names([r for r in runs if r not in having])}")
    for r in runs:
        steps = r.provenance.get("heldout_undefined") or []
        if steps:
            out.append(f"{label}: undefined ({UNDEFINED}) in {r.name} at step{'s' if len(steps) > 1 else ''} "
                       f"{', '.join(map(str, steps))}")
    return out


def eval_hint(m: RunsManifest, runs: list[Run]) -> str:
    """How to get held-out scores for runs that logged none: `rbctl eval` on a checkpoint the report
    found (it writes where the report reads), else how to tell the report where checkpoints are."""
    found = [(r, ck) for r in runs if r.provenance.get("checkpoints")
             for ck in checkpoint_folders(r.provenance["checkpoints"])[-1:]]
    if found:
        run, (step, model) = found[0]
        return (f"; `rbctl eval {shlex.quote(str(model))} -b BENCHMARKS` scores a checkpoint (here {run.name}'s "
                f"step {step}) where this report reads it: its last step's is the run's final score (docs/your_runs.md)")
    if m.checkpoints is None and m.runs_from != "trl":
        return ("; name the metric of their evaluation as roles.heldout, or give the manifest `checkpoints:` (where "
                "each run's checkpoints are) and score them with `rbctl eval` (docs/your_runs.md)")
    return "; no checkpoint (checkpoint-N/, global_step_N/) was found to score with `rbctl eval` either"


def _grids(runs: list[Run]) -> list[str]:
    out = []
    lasts = Counter(r.last_step for r in runs)
    if len(lasts) > 1:
        out.append("the runs logged different numbers of steps: " + "; ".join(
            f"{s} steps: {_names([r for r in runs if r.last_step == s])}" for s in sorted(lasts)))
    for bench in sorted({e["benchmark"] for r in runs for e in r.evals}):
        grids = {r.name: tuple(e["step"] for e in r.evals if e["benchmark"] == bench) for r in runs}
        if len(set(grids.values())) > 1:
            by: dict[tuple, list[str]] = {}
            for name, g in grids.items():
                by.setdefault(g, []).append(name)
            out.append(f"the runs evaluated {bench} at different steps: " + "; ".join(
                f"{','.join(map(str, g)) or 'never'} ({', '.join(names)})" for g, names in by.items()))
    return out


def remarks(m: RunsManifest, runs: list[Run]) -> list[str]:
    """The lines of the module docstring for the runs of manifest ``m``."""
    if not runs:
        return []
    roles, out, logged = m.resolved_roles(), [], _logged_names(runs)
    # a did-you-mean never offers a name another role already reads (κ_eff's for κ)
    logged -= {k for role in ROLE_LABELS if getattr(roles, role) for k in matches(getattr(roles, role), logged)}
    for role, label in ROLE_LABELS.items():
        pattern = getattr(roles, role)
        if role == "heldout":
            out += _heldout(m, pattern, runs, logged)
        elif pattern is None:
            out.append(f"{label}: not logged by these runs (the manifest names no metric for roles.{role})")
        else:
            out += _training_role(role, label, pattern, runs, logged)
    if m.escape is not None:
        where = (lambda r: r.evals) if m.escape.signal == "eval" else (lambda r: r.metrics)
        if not any(m.escape.metric in x for r in runs for x in where(r)):
            out.append(f"escape signal: not logged by these runs (no `{m.escape.metric}` in their "
                       f"{'evaluation' if m.escape.signal == 'eval' else 'training'} records"
                       f"{did_you_mean(m.escape.metric, logged)})")
    out += _grids(runs)
    open_runs = [r for r in runs if r.provenance.get("unfinished")]
    if open_runs:
        out.append(f"not finished (still running, or stopped early: no W&B exit record, an MLflow status other "
                   f"than FINISHED, or TRL's global step short of max_steps): {_names(open_runs)}")
    means = sorted({b for r in runs for b, f in r.finals.items() if f.get("mean_only")})
    if means:
        out.append(f"held-out scores ({', '.join(means)}) are the runs' logged means per evaluation: one value per "
                   "unit, so no pass@k beyond it, no maj@k and no bootstrap over problems")
    return out
