"""`rbctl ablate` with a sequential design (rbctl.sweep.sequential_run.run_looks): blocks up to each
look, only the arms an undecided comparison needs, each look recorded in state.json and the log, a
resume that continues from the last look without deciding an earlier one again, and the report
reading the same looks. The runs are written by hand (no training): `launch` writes each run's final
evaluation from a seeded generator."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from rbctl.report.sequential_calls import design_source, replay
from rbctl.report.sequential_looks import CONTINUE, Design, LookRecord, decide_look, status
from rbctl.store.read import read_sweep_looks, read_sweep_state
from rbctl.store.write import write_sweep_file, write_sweep_state
from rbctl.sweep.ablate import load_sweep, pending_runs, resolved_sweep
from rbctl.sweep.sequential_run import dropped_design, look_lines, run_looks
from tests.conftest import TINY_TRAIN
from tests.integration.hand_runs import write_run

PROBLEMS, N = 20, 8
# b is far above a (decided at an early look); c is a itself (decided late or never)
P = {"a": 0.40, "b": 0.75, "c": 0.40}
LOOKS = [4, 8, 12]


def sweep_file(tmp_path, looks=LOOKS, futility=False):
    (tmp_path / "base.yaml").write_text(yaml.safe_dump({**TINY_TRAIN, "steps": 2}))
    sweep = {"name": "seq", "base": "base.yaml", "seeds": list(range(100, 100 + looks[-1])),
             "arms": {"a": {}, "b": {"algo.budget": 1.0}, "c": {"algo.entropy.mode": "static", "algo.entropy.alpha": 0.01}},
             "eval": {"benchmarks": ["builtin"], "n": N}, "jobs": 1,
             "comparisons": {"principal": [["b", "a"], ["c", "a"]], "mde": 10.0, "planning_sd": 10.0},
             "design": {"looks": list(looks), "futility": futility}}
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep, sort_keys=False))
    return path


def correct(arm: str, seed: int) -> list[int]:
    """The run's correct counts: a per-unit shift shared by the arms (the pairing) and the arm's own draw."""
    unit = np.random.default_rng(seed).normal(0.0, 0.08)
    rng = np.random.default_rng([seed, ord(arm)])
    p = np.clip(P[arm] + unit + rng.normal(0.0, 0.06), 0.02, 0.98)
    return [int(x) for x in rng.binomial(N, p, size=PROBLEMS)]


class Launcher:
    """`launch(todo)`: writes each run as finished and records it done; ``log`` of every key launched."""

    def __init__(self, state):
        self.state, self.launched = state, []

    def __call__(self, todo):
        for key, rd, cfg, meta in todo:
            write_run(rd, cfg=cfg.model_dump(mode="json"), meta=meta, metrics=[{"step": 1, "reward/mean": 0.5}],
                      evals=[], steps=cfg.steps, correct=correct(meta["arm"], meta["seed"]), n=N)
            self.state["runs"][key] = {"status": "done", "error": None}
            self.launched.append(key)


def start(tmp_path, **kw):
    sweep, configs = load_sweep(sweep_file(tmp_path, **kw))
    out = tmp_path / "out"
    out.mkdir()
    write_sweep_file(out, resolved_sweep(sweep, configs))
    state = {"runs": {}}
    return sweep, configs, out, state


def go(sweep, configs, out, state, launcher, log=lambda *a: None, now=lambda: "2026-01-01T00:00:00Z"):
    return run_looks(sweep, configs, out, state, lambda arms, upto: pending_runs(sweep, configs, out, state, arms, upto),
                     launcher, 1, log, now)


def deltas_by_hand(upto, pairs):
    """Per-unit Δ (fractions) of avg@n, recomputed from the counts."""
    return {("principal", x, y): [np.mean(correct(x, s)) / N - np.mean(correct(y, s)) / N for s in upto]
            for x, y in pairs}


def test_the_sweep_runs_to_each_look_decides_there_and_stops_an_arm_no_comparison_needs(tmp_path):
    sweep, configs, out, state = start(tmp_path)
    launcher, logged = Launcher(state), []
    history = go(sweep, configs, out, state, launcher, log=logged.append)
    design = Design(tuple(LOOKS))
    fam = sweep.comparisons.families_declared()
    # the looks, recomputed by hand: each look on the Δ of its units, as the sweep's own record says
    by_hand = []
    for n in LOOKS[:len(history)]:
        upto = list(range(100, 100 + n))
        open_ = [(a, r) for (_, a, r), s in status(fam, by_hand).items() if s.decision == CONTINUE]
        by_hand.append(decide_look(design, fam, by_hand, deltas_by_hand(upto, open_), time="2026-01-01T00:00:00Z",
                                   scale=100.0))
    assert history == by_hand
    st = status(fam, history)
    assert st[("principal", "b", "a")].decision == "higher" and st[("principal", "b", "a")].look < len(LOOKS)
    # b ran only to the look that decided b − a; a and c to the last look taken
    b_units = LOOKS[st[("principal", "b", "a")].look - 1]
    ran = lambda arm: sorted(int(k.split("_")[-1]) for k in launcher.launched if k.startswith(arm + "/"))  # noqa: E731
    assert ran("b") == list(range(100, 100 + b_units))
    assert ran("a") == ran("c") == list(range(100, 100 + LOOKS[len(history) - 1]))
    assert len(launcher.launched) == len(set(launcher.launched))  # no run launched twice
    # state.json holds the design and the looks (strict JSON); the log names each look and comparison
    saved = read_sweep_looks(out)
    assert saved["design"] == sweep.design.model_dump(mode="json")
    assert [LookRecord.from_json(r) for r in saved["looks"]] == history
    json.loads((out / "state.json").read_text(), parse_constant=lambda c: pytest.fail(f"non-strict JSON {c}"))
    for rec in history:
        assert all(line in logged for line in look_lines(rec, design))
    assert "look 1 of 3 at 4 units: 12 runs to run (a, b, c; seeds 100, 101, 102, 103)" in logged
    # the report takes the same looks from the sweep directory: recorded, none recomputed
    src = design_source(out)
    assert src.recorded == tuple(history) and src.design == design
    assert replay(design, fam, src.recorded, {}, src.order) == history
    # and its section: each comparison's look, units, boundary crossed, units saved; the runs saved
    import pandas as pd

    from rbctl.report import make_report

    report = make_report([out], tmp_path / "rep", n_boot=100)
    rows = pd.read_csv(tmp_path / "rep" / "tables" / "sequential_calls.csv").set_index("comparison")
    b = st[("principal", "b", "a")]
    assert rows.loc["b − a", "decision"] == "higher" and rows.loc["b − a", "look"] == f"{b.look} of 3"
    assert rows.loc["b − a", "units"] == b_units and rows.loc["b − a", "units saved (of 12)"] == 12 - b_units
    assert rows.loc["b − a", "boundary crossed"] == b.entry.crossed
    used = b_units + 2 * LOOKS[len(history) - 1]
    assert (f"Every comparison is decided: the design runs {used} runs of the fixed design's 36 ({36 - used} saved"
            in report.read_text())


class Stop(Exception):
    pass


def test_a_sweep_interrupted_after_a_look_resumes_from_it_and_leaves_its_record_unchanged(tmp_path):
    sweep, configs, out, state = start(tmp_path)
    launcher = Launcher(state)

    def log(line):
        if line.startswith("look 1 of 3 at 4 units ("):  # the look is recorded: stop here, as Ctrl-C would
            raise Stop

    with pytest.raises(Stop):
        go(sweep, configs, out, state, launcher, log=log)
    first = (out / "state.json").read_text()
    recorded = read_sweep_looks(out)["looks"]
    assert len(recorded) == 1 and len(launcher.launched) == 12
    # resume: a fresh process reads the state back, takes look 2 on, never look 1 again
    state = {"runs": read_sweep_state(out), **read_sweep_looks(out)}
    again = Launcher(state)
    history = go(sweep, configs, out, state, again, now=lambda: "2026-01-02T00:00:00Z")
    assert read_sweep_looks(out)["looks"][0] == recorded[0] == json.loads(first)["looks"][0]
    assert history[0].time == "2026-01-01T00:00:00Z" and history[1].time == "2026-01-02T00:00:00Z"
    assert not set(again.launched) & set(launcher.launched)
    assert all(int(k.split("_")[-1]) >= 104 for k in again.launched)
    # the whole sweep again: every look is recorded, nothing runs, nothing is decided again
    state = {"runs": read_sweep_state(out), **read_sweep_looks(out)}
    before = (out / "state.json").read_text()
    idle = Launcher(state)
    assert go(sweep, configs, out, state, idle, now=lambda: "later") == history
    assert idle.launched == [] and (out / "state.json").read_text() == before


def test_looks_taken_under_another_design_are_refused(tmp_path):
    sweep, configs, out, state = start(tmp_path)
    go(sweep, configs, out, state, Launcher(state))
    other, _ = load_sweep(sweep_file(tmp_path, futility=True))
    state = {"runs": read_sweep_state(out), **read_sweep_looks(out)}
    with pytest.raises(Exception, match="were taken under the design .* a design is fixed before its first look"):
        go(other, configs, out, state, Launcher(state))


def test_a_failed_run_stops_the_sweep_before_its_look(tmp_path):
    sweep, configs, out, state = start(tmp_path)
    logged = []

    def launch(todo):
        Launcher(state)(todo[:-1])
        state["runs"][todo[-1][0]] = {"status": "failed", "error": "RuntimeError: boom"}

    assert go(sweep, configs, out, state, launch, log=logged.append) == []
    assert read_sweep_looks(out) == {}
    assert any(line.startswith("look 1 not taken: 1 of its runs did not finish (c/seed_103)") for line in logged)
    write_sweep_state(out, state)


def test_a_selection_of_seeds_or_of_arms_without_comparisons_runs_without_the_design(tmp_path):
    path = sweep_file(tmp_path)
    sweep, _ = load_sweep(path, arms=["a", "b"])  # b − a is left: the design stays
    assert sweep.design is not None and [tuple(p) for p in sweep.comparisons.principal] == [("b", "a")]
    assert dropped_design(path, sweep, None) is None
    sweep, _ = load_sweep(path, seeds=[0, 1, 2])  # 3 seeds: the design's looks count 12
    assert sweep.design is None and sweep.seeds == [0, 1, 2]
    assert dropped_design(path, sweep, [0, 1, 2]).startswith("--seeds: the sweep file's sequential design is not applied")
    sweep, _ = load_sweep(path, arms=["a"])
    assert sweep.design is None and sweep.comparisons is None
    assert dropped_design(path, sweep, None).startswith("--arms: no declared comparison is left among these arms")


def test_a_sweep_file_without_a_design_records_the_version_it_recorded_before(tmp_path):
    """A sweep directory made before `design:` existed resumes without a new version of its sweep file
    (the report would print it as a change of declaration); a stated design is recorded."""
    from rbctl.store.history import record_version
    from rbctl.sweep.ablate import sweep_file_content

    data = yaml.safe_load(sweep_file(tmp_path).read_text())
    data.pop("design")
    plain = tmp_path / "plain.yaml"
    plain.write_text(yaml.safe_dump(data))
    content, _ = sweep_file_content(plain)
    assert "design" not in content
    history = tmp_path / "sweep_history.jsonl"
    old = {k: v for k, v in content.items()}  # the version an earlier rbctl recorded: no design key at all
    assert record_version(history, old, str(plain), 0, 0) is not None
    assert record_version(history, content, str(plain), 3, 36) is None  # resumed today: no new version
    designed, _ = sweep_file_content(sweep_file(tmp_path))
    assert designed["design"] == {"looks": LOOKS, "spending": "obrien_fleming", "futility": False}
    assert record_version(history, designed, "sweep.yaml", 3, 36) is not None


def test_a_claim_reading_a_sequentially_decided_family_says_so(tmp_path):
    """The claims document: the declared family's members carry their look's call, the family and the
    claim say they were decided sequentially, with the runs saved; a study family of its own on the
    same sweep reads fewer units than the design's for b − a, so no call."""
    from rbctl.report.study import make_study_report

    sweep, configs, out, state = start(tmp_path)
    history = go(sweep, configs, out, state, Launcher(state))
    decided_at = status(sweep.comparisons.families_declared(), history)[("principal", "b", "a")].look
    study = {"name": "s", "testbeds": {"seq": str(out)},
             "families": {"main": {"members": ["b − a", "c − a"], "declared": "principal"},
                          "own": {"members": ["b − a"], "metric": "avg@n"}},
             "claims": {"b-higher": {"hypothesis": "b beats a",
                                     "rule": {"kind": "calls", "family": "main", "members": ["b − a"], "support": "higher"}}}}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    text = make_study_report(path, tmp_path / "claims", n_boot=100).read_text()
    note = ("Decided sequentially (`seq`: looks at 4, 8, 12 units, O'Brien–Fleming-type α-spending; 32 runs of the "
            "fixed design's 36, 4 saved): each member's call is that of the look that decided it")
    assert f"It reads a sequentially decided family. {note}" in text
    assert text.count(note) == 2  # the family's section and the claim's
    assert f"| higher at look {decided_at} of 3 ({LOOKS[decided_at - 1]} units; superiority at α = 0.025" in text
    own = text[text.index("### Family `own`"):]
    assert f"interim ({LOOKS[decided_at - 1]} of 12 units): not a call" in own.split("###")[1]


def test_the_main_job_ships_a_sequential_design_and_its_dry_run_prints_it(tmp_path):
    from rbctl.report import power
    from rbctl.sweep.ablate import DEFAULT_SWEEP
    from rbctl.sweep.plan import sweep_plan

    sweep, _ = load_sweep(DEFAULT_SWEEP)
    assert sweep.design.model_dump() == {"looks": [12, 18, 24], "spending": "obrien_fleming", "futility": True}
    out = sweep_plan(DEFAULT_SWEEP, tmp_path / "s", power)
    assert ("sequential    looks at 12, 18, 24 units; O'Brien–Fleming-type α-spending (Lan–DeMets); futility stop, "
            "non-binding") in out
    assert "fixed design 72 (24 units × 3 arms)" in out and "at Δ = 0 everywhere: " in out
    selected = sweep_plan(DEFAULT_SWEEP, tmp_path / "s", power, seeds=[0, 1, 2])
    assert "sequential    --seeds: the sweep file's sequential design is not applied" in selected
    assert "looks at" not in selected
