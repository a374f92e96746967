"""`rbctl ablate` with a sequential design (docs/method.md, "Sequential designs"): the sweep runs in
blocks up to each look and stops where every declared comparison is decided.

At look k the sweep runs the units of looks 1..k (seed by seed, each seed's warm starts together:
`unit_order`) of every arm that an undecided comparison needs, and of every arm in no comparison
(they run with the sweep); an arm whose comparisons are all decided gets no more runs. Once all of
the block's runs are done, each undecided comparison is tested on its paired Δ over those units
(`decide_look`, the report's own per-unit Δ: `rbctl.report.analyses.comparisons.compare`), and the
look is written to state.json (``design`` and ``looks``, `LookRecord.to_json`) and to the sweep's log
(its units, each comparison's t, boundary and decision, the time). A run that fails stops the sweep
before its look (rerunning `rbctl ablate` retries it); a resumed sweep reads its looks back and
takes the next one only: an earlier look is never computed or decided again.
"""

from __future__ import annotations

from pathlib import Path

from rbctl.config.base import read_yaml
from rbctl.config.presets import resolve_config
from rbctl.config.sweep import SweepConfig
from rbctl.errors import UserError
from rbctl.report.sequential_calls import design_of_sweep, unit_text
from rbctl.report.sequential_looks import (CONTINUE, Design, LookRecord, arm_units, decide_look, needed_arms,
                                           next_units, status)
from rbctl.store.history import utc_now
from rbctl.store.rundir import run_key, sweep_run_dir
from rbctl.store.write import write_sweep_state

SPENDING = {"obrien_fleming": "O'Brien–Fleming-type", "pocock": "Pocock-type"}


def dropped_design(sweep_path, sweep: SweepConfig, seeds) -> str | None:
    """What the sweep's log says when a selection runs without the sweep file's sequential design
    (`rbctl.sweep.ablate.select`: `--seeds`, or `--arms` that leaves no declared comparison); None
    when the file states none or the selection keeps it."""
    data = read_yaml(resolve_config(sweep_path, "sweep file"))
    if sweep.design is not None or not isinstance(data, dict) or not data.get("design"):
        return None
    if seeds is not None:
        return ("--seeds: the sweep file's sequential design is not applied (its looks count its own seeds); "
                "these seeds run as a fixed design, every run of every arm")
    return ("--arms: no declared comparison is left among these arms, so the sweep file's sequential design "
            "has nothing to decide: every run of these arms runs")


def resumed_looks(state: dict, sweep: SweepConfig, sweep_dir: Path) -> list[LookRecord]:
    """The looks state.json records, which a resumed sweep continues from; a `UserError` when they
    were taken under another design (a design is fixed before its first look)."""
    if not state.get("looks"):
        return []
    now = sweep.design.model_dump(mode="json")
    if state.get("design") != now:
        raise UserError(f"{sweep_dir}: its {len(state['looks'])} look(s) were taken under the design {state.get('design')}, "
                        f"but the sweep file now states {now}: a design is fixed before its first look; use another -o")
    return [LookRecord.from_json(r) for r in state["looks"]]


def look_deltas(sweep: SweepConfig, sweep_dir: Path, families, history, upto) -> dict:
    """Each comparison undecided after ``history``: its per-unit Δ (fractions) over the units ``upto``
    ((warm start or None, seed)), in that order, from the runs' final evaluations as the report
    computes them."""
    from rbctl.report.analyses.comparisons import compare
    from rbctl.report.analyses.scores import score_arms
    from rbctl.report.load import load_run

    open_ = [k for k, s in status(families, history).items() if s.decision == CONTINUE]
    arms = sorted({a for _, x, y in open_ for a in (x, y)})
    runs = [load_run(sweep_run_dir(sweep_dir, run_key(arm, s, ws)), sweep=sweep.name, status="done",
                     sweep_dir=Path(sweep_dir)) for arm in arms for ws, s in upto]
    scores, _, _ = score_arms(runs, arms)
    bench_of = {f.name: f.benchmark or sorted(sweep.eval.benchmarks)[0] for f in families}  # the report's choice
    metric_of = {f.name: f.metric for f in families}
    out = {}
    for fam, arm, ref in open_:
        b = bench_of[fam]
        if (arm, b) not in scores or (ref, b) not in scores:
            raise UserError(f"look {len(history) + 1}: {arm} − {ref} has no final evaluation on {b} in {sweep_dir}")
        c = compare(scores[arm, b], scores[ref, b], metric_of[fam], "declared", "", fam, n_boot=100)
        d = dict(zip(c.delta.units, c.delta.deltas))
        missing = [(ws, s) for ws, s in upto if (ws or "", s) not in d]
        if missing:
            raise UserError(f"look {len(history) + 1}: {arm} − {ref} lacks the final scores of {unit_text(missing)}")
        out[(fam, arm, ref)] = [d[(ws or "", s)] for ws, s in upto]
    return out


def look_lines(rec: LookRecord, design: Design) -> list[str]:
    """The sweep's log of one look: its units and time, then each comparison tested there."""
    out = [f"look {rec.look} of {len(design.looks)} at {rec.units} units ({rec.time}):"]
    for c in rec.comparisons:
        what = c.crossed if c.crossed else f"|t| = {abs(c.t):.2f} < {c.bounds.t:.2f} at α = {c.bounds.level:.4g}"
        out.append(f"  {c.family}: {c.arm} − {c.reference}: Δ {c.mean:+.1f} points (sd {c.sd:.1f}, {c.n} units): "
                   f"{c.decision} ({what})")
    return out


def run_looks(sweep: SweepConfig, configs: dict, sweep_dir: Path, state: dict, pending, launch, jobs: int,
              log=print, now=utc_now) -> list[LookRecord]:
    """Run the sweep look by look (module docstring); ``pending(arms, units)`` lists the runs not yet
    done (`rbctl.sweep.ablate.pending_runs`), ``launch(todo)`` runs them. Returns the looks."""
    design, families, order = design_of_sweep(sweep)
    history = resumed_looks(state, sweep, sweep_dir)
    arms, K = list(configs), len(design.looks)
    in_family = {a for f in families for pair in f.pairs for a in pair}
    fixed = design.units * len(arms)
    log(f"sweep '{sweep.name}': sequential design, looks at {', '.join(map(str, design.looks))} units "
        f"({SPENDING[design.spending]} α-spending{', futility stop' if design.futility else ''}): at most {fixed} runs "
        f"({len(arms)} arms × {design.units} units), {jobs} in parallel"
        + (f"; resumed after look {len(history)} of {K}" if history else ""))
    while block := next_units(design, families, history, order):
        k = len(history) + 1
        upto = order[:design.looks[k - 1]]
        need = needed_arms(families, history)
        run_arms = [a for a in arms if a in need or a not in in_family]
        todo = pending(run_arms, upto)
        write_sweep_state(sweep_dir, state)
        log(f"look {k} of {K} at {len(upto)} units: {len(todo)} runs to run ({', '.join(run_arms)}; "
            f"{unit_text([(ws or '', s) for ws, s in block])})")
        launch(todo)
        failed = [key for key, *_ in todo if state["runs"].get(key, {}).get("status") != "done"]
        if failed:
            log(f"look {k} not taken: {len(failed)} of its runs did not finish ({', '.join(failed[:4])}"
                f"{', …' if len(failed) > 4 else ''}); rerun `rbctl ablate` on {sweep_dir} to retry them and take it")
            return history
        rec = decide_look(design, families, history, look_deltas(sweep, sweep_dir, families, history, upto),
                          time=now(), scale=100.0)
        history.append(rec)
        state["design"], state["looks"] = sweep.design.model_dump(mode="json"), [r.to_json() for r in history]
        write_sweep_state(sweep_dir, state)
        for line in look_lines(rec, design):
            log(line)
    used = sum(arm_units(design, families, history, arms).values())
    left = [f"{a} − {r}" for (_, a, r), s in status(families, history).items() if s.decision == CONTINUE]
    if left:
        log(f"sequential design: {', '.join(left)} not decided after look {len(history)} of {K}")
    else:
        log(f"sequential design: every comparison decided by look {len(history)} of {K}: {used} runs of the fixed "
            f"design's {fixed} ({fixed - used} saved)")
    return history


def plan_lines(sweep_path, sweep: SweepConfig, arms: list[str], seeds, trials: int = 2000) -> list[str]:
    """What `rbctl ablate --dry-run` prints of the design: the looks, each family's boundaries and the
    expected runs against the fixed design's (`rbctl.report.sequential_sim.design_lines`), or why a
    selection runs without the file's design; [] for a fixed design."""
    from rbctl.report.sequential_sim import design_lines

    design, families, _ = design_of_sweep(sweep)
    if design is None:
        note = dropped_design(sweep_path, sweep, seeds)
        return [] if note is None else ["", f"sequential    {note}"]
    return [""] + design_lines(design, families, arms, trials=trials)
