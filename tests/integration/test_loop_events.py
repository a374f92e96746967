"""The training loop's events (rbctl.train.callbacks): the order its callbacks hear them in, the
phases a `PhaseTimer` times, and a callback that answers an evaluation that is due."""

from __future__ import annotations

import json

import pytest

from rbctl.config.eval import EvalConfig
from rbctl.store.rundir import EVAL_LINES, METRICS, periodic_eval_dir
from rbctl.train.callbacks import Callback
from rbctl.train.loop import train
from rbctl.train.phases import PhaseTimer

QUIET = dict(progress=False, log=lambda *a: None)


class Recorder(Callback):
    def __init__(self):
        self.heard = []

    def on_start(self, run):
        self.heard.append(("start", run.start))

    def on_step_end(self, run, step):
        self.heard.append(("step_end", step.step, "time/eval_s" in step.metrics))

    def on_progress(self, run, step):
        self.heard.append(("progress", step.step, step.saved))

    def on_evaluated(self, run, request, results):
        self.heard.append(("evaluated", request.step, sorted(results)))

    def on_end(self, run):
        self.heard.append(("end",))


def test_a_callback_hears_the_events_in_order_before_the_runs_own(tiny_config, tmp_path):
    rec = Recorder()
    cfg = tiny_config(steps=3, save_every=2, eval__every=2, eval__n=2, eval__limit=4)
    train(cfg, tmp_path / "run", callbacks=[rec], **QUIET)
    # a callback given to `train` hears each event before the run's own: at its step_end the periodic
    # evaluation has not run yet (no time/eval_s); by progress, step 2's checkpoint is written
    assert rec.heard == [("start", 0), ("evaluated", 0, ["builtin"]),
                         ("step_end", 1, False), ("progress", 1, False),
                         ("step_end", 2, False), ("evaluated", 2, ["builtin"]), ("progress", 2, True),
                         ("step_end", 3, False), ("evaluated", 3, ["builtin"]), ("progress", 3, True),
                         ("end",)]
    lines = [json.loads(x) for x in (tmp_path / "run" / METRICS).read_text().splitlines()]
    assert ["time/eval_s" in x for x in lines] == [False, True, True]


def test_the_phase_timer_times_each_phase_of_a_run(tiny_config, tmp_path):
    out = tmp_path / "phases.jsonl"
    timer = PhaseTimer(out)
    cfg = tiny_config(steps=2, save_every=2, sample_every=1, eval__every=2, eval__n=2, eval__limit=4)
    final = EvalConfig(benchmarks=["builtin"], n=2, limit=4, max_new_tokens=cfg.rollout.max_new_tokens, device="cpu")
    train(cfg, tmp_path / "run", callbacks=[timer], final_eval=final, **QUIET)
    timer.write("run", "done")
    rec = json.loads(out.read_text())
    calls = {k: v["calls"] for k, v in rec["phases"].items()}
    # steps 1, 2; evaluations at steps 0, 2; one checkpoint (step 2); metrics and samples lines of 2 steps
    assert calls == {"trainer": 1, "periodic_eval": 2, "steps": 2, "logs": 4, "checkpoint": 1, "final_eval": 1}
    assert sum(v["wall_s"] for v in rec["phases"].values()) <= rec["wall_s"]
    assert rec["key"] == "run" and rec["status"] == "done"


class Answers(Callback):
    """Answers the step-2 evaluation with a made-up result (the loop writes what it is given)."""

    def recall(self, run, request):
        if request.step != 2:
            return None
        return {"builtin": {"benchmark": "builtin", "n": 2, "metrics": {"avg@n": {"value": 0.125}}, "labels": {}}}


def test_an_evaluation_a_callback_recalls_is_not_made_again(tiny_config, tmp_path, monkeypatch):
    from rbctl.train import evaluation

    made = []
    real = evaluation.evaluate_trainer
    monkeypatch.setattr(evaluation, "evaluate_trainer", lambda tr, ecfg, out, step, *a: made.append(step) or real(tr, ecfg, out, step, *a))
    run = tmp_path / "run"
    train(tiny_config(steps=2, eval__every=2, eval__n=2, eval__limit=4), run, callbacks=[Answers()], **QUIET)
    assert made == [0]
    lines = [json.loads(x) for x in (run / EVAL_LINES).read_text().splitlines()]
    assert [(x["step"], x["avg@n"]) for x in lines][-1] == (2, 0.125)
    assert not periodic_eval_dir(run, 2).exists()  # the answer's files are the callback's to write


@pytest.mark.parametrize("hook", ["on_step_end", "on_progress"])
def test_an_error_in_a_callback_stops_the_run_and_closes_the_others(tiny_config, tmp_path, hook):
    ended = []

    class Fails(Callback):
        def on_end(self, run):
            ended.append(True)

    def fail(self, run, step):
        raise RuntimeError("boom")

    setattr(Fails, hook, fail)
    with pytest.raises(RuntimeError, match="boom"):
        train(tiny_config(steps=2), tmp_path / "run", callbacks=[Fails()], **QUIET)
    assert ended == [True]
