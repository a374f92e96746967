"""Faults beyond SIGKILL: planted pickles, two writers, a full disk, interrupts."""

from __future__ import annotations

import json
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import TINY_TRAIN


def _cfg_file(tmp_path: Path, **over) -> Path:
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump({**TINY_TRAIN, **over}))
    return path


class _Planted:
    """Unpickling this runs os.system: what a malicious trainer_state.pt would do."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_planted_trainer_state_is_refused_on_resume_and_runs_nothing(tiny_config, tmp_path, capsys):
    from rbctl.cli import run
    from rbctl.store.checkpoint import checkpoint_manifest
    from rbctl.store.rundir import CKPT_DONE
    from rbctl.train.loop import train

    cfg = tiny_config(steps=2, save_every=2)
    rd = tmp_path / "run"
    train(cfg, rd, progress=False, log=lambda *a: None)
    ck = rd / "checkpoints" / "step_000002"
    marker = tmp_path / "pwned"
    (ck / "trainer_state.pt").write_bytes(pickle.dumps({"optimizer": _Planted(marker)}, protocol=2))
    (ck / CKPT_DONE).write_text(json.dumps({"step": 2, "files": checkpoint_manifest(ck)}))
    capsys.readouterr()
    code = run(["train", str(_cfg_file(tmp_path, steps=4)), "-o", str(rd), "--extend", "-q"])
    err = capsys.readouterr().err
    errors = [x for x in err.splitlines() if x.startswith("error:")]
    assert code == 2 and "Traceback" not in err
    assert len(errors) == 1 and "trainer_state.pt" in errors[0] and "posix.system" in errors[0], err
    assert not marker.exists()


@pytest.mark.slow
def test_a_second_train_on_a_live_run_directory_is_refused_and_a_stale_lock_is_taken_over(rbctl_cache, tmp_path, capsys):
    import signal
    import socket
    import time

    from rbctl.cli import run
    from rbctl.store.jsonl import read_jsonl

    cfg = _cfg_file(tmp_path, steps=500, save_every=2)
    rd = tmp_path / "run"
    first = subprocess.Popen([sys.executable, "-m", "rbctl", "train", str(cfg), "-o", str(rd), "-q"],
                             env={**os.environ, "RBCTL_CACHE": str(rbctl_cache)},
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 240
        while len(read_jsonl(rd / "metrics.jsonl")) < 2 and first.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        assert first.poll() is None, "the first run ended early"
        capsys.readouterr()
        assert run(["train", str(cfg), "-o", str(rd), "-q"]) == 2
        err = [x for x in capsys.readouterr().err.splitlines() if x.startswith("error:")]
        assert len(err) == 1 and f"pid {first.pid} on host {socket.gethostname()}" in err[0], err
        lines = len(read_jsonl(rd / "metrics.jsonl"))
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    assert lines >= 2  # the refused run wrote nothing: the first one's lines are all there
    # The killed run left its pid in the lock file: the next run takes it over with a warning.
    assert run(["train", str(_cfg_file(tmp_path, steps=2, save_every=2)), "-o", str(rd), "--extend", "-q"]) == 0
    out = capsys.readouterr()
    assert f"taking over the stale lock {rd / '.lock'} of pid {first.pid}" in out.out + out.err
    assert (rd / ".lock").read_text() == ""  # released cleanly


# --- disk faults (RBCTL_FAULT) --------------------------------------------------------------------

_STRAIGHT: dict = {}


@pytest.fixture
def fault(monkeypatch):
    """Set RBCTL_FAULT for this test, with fresh write counts."""
    from rbctl.store import faults

    monkeypatch.setattr(faults, "_counts", faults.Counter())

    def set_(spec: str | None):
        faults._counts.clear()
        if spec is None:
            monkeypatch.delenv(faults.ENV, raising=False)
        else:
            monkeypatch.setenv(faults.ENV, spec)

    return set_


def _weights(run: Path, step: int = 4) -> dict:
    from safetensors.torch import load_file

    return load_file(str(run / "checkpoints" / f"step_{step:06d}" / "model" / "model.safetensors"))


def _straight(tiny_config, tmp_path_factory) -> Path:
    """The uninterrupted 4-step run, trained once per pytest session."""
    if "run" not in _STRAIGHT:
        from rbctl.train.loop import train

        run = tmp_path_factory.mktemp("straight") / "run"
        train(tiny_config(steps=4, save_every=2), run, progress=False, log=lambda *a: None)
        _STRAIGHT["run"] = run
    return _STRAIGHT["run"]


def _one_error_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("spec, message", [
    ("enospc:checkpoint:2", "No space left on device (ENOSPC)"),
    ("eio:marker:2", "Input/output error (EIO)"),
    ("enospc:metrics:3", "No space left on device (ENOSPC)"),
])
@pytest.mark.slow
def test_a_disk_fault_in_training_is_one_line_exit_1_nothing_torn_and_a_rerun_equals_the_straight_run(
        spec, message, tiny_config, tmp_path, tmp_path_factory, capsys, fault):
    import torch

    from rbctl.cli import run
    from rbctl.store.jsonl import read_jsonl
    from rbctl.store.checkpoint import checkpoint_problem

    straight = _straight(tiny_config, tmp_path_factory)
    cfg, rd = _cfg_file(tmp_path, steps=4, save_every=2), tmp_path / "run"
    fault(spec)
    capsys.readouterr()
    assert run(["train", str(cfg), "-o", str(rd), "-q"]) == 1
    err = _one_error_line(capsys.readouterr().err)
    assert message in err and str(rd) in err, err
    kind = spec.split(":")[1]
    if kind in ("checkpoint", "marker"):  # step 4's checkpoint stayed a .tmp folder; step 2's is intact
        assert "step_000004" in err
        assert (rd / "checkpoints" / "step_000004.tmp").is_dir() and not (rd / "checkpoints" / "step_000004").exists()
        assert checkpoint_problem(rd / "checkpoints" / "step_000002") is None
    else:  # the metrics line was cut back off: no torn line, lines 1-2 only
        assert "metrics.jsonl" in err
        assert [r["step"] for r in read_jsonl(rd / "metrics.jsonl")] == [1, 2]
        assert (rd / "metrics.jsonl").read_text().endswith("\n")
    fault(None)
    assert run(["train", str(cfg), "-o", str(rd), "-q"]) == 0
    assert [r["step"] for r in read_jsonl(rd / "metrics.jsonl")] == [1, 2, 3, 4]
    a, b = _weights(straight), _weights(rd)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_disk_fault_writing_an_eval_summary_leaves_no_summary_and_a_rerun_completes_it(
        tiny_config, tmp_path, tmp_path_factory, capsys, fault):
    from rbctl.cli import run

    straight = _straight(tiny_config, tmp_path_factory)
    out = tmp_path / "ev"
    args = ["eval", str(straight), "-b", "builtin", "--limit", "4", "-o", str(out)]
    fault("eio:eval_summary:1")
    capsys.readouterr()
    assert run(args) == 1
    err = _one_error_line(capsys.readouterr().err)
    assert "summary.json" in err and "(EIO)" in err, err
    assert not list(out.rglob("summary.json")) and not list(out.rglob(".*tmp*"))
    fault(None)
    assert run(args) == 0
    summary = json.loads(next(out.rglob("summary.json")).read_text())
    assert summary  # complete and parsable


@pytest.mark.parametrize("kind", ["report", "sweep_state", "eval_summary"])
def test_store_writes_of_a_kind_fail_as_planned_and_leave_the_old_file(kind, tmp_path, fault):
    from rbctl.store.atomic import write_atomic
    from rbctl.store.jsonl import append_jsonl, read_jsonl

    path = tmp_path / "f.txt"
    write_atomic(path, "old", kind=kind)
    fault(f"enospc:{kind}:1")
    with pytest.raises(OSError) as e:
        write_atomic(path, "new and longer", kind=kind)
    assert e.value.filename == str(path) and "No space left" in str(e.value)
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["f.txt"]
    write_atomic(path, "new", kind=kind)  # only the 1st write fails
    assert path.read_text() == "new"
    lines = tmp_path / "l.jsonl"
    append_jsonl(lines, {"step": 1})
    fault(f"eio:{kind}:1")
    with pytest.raises(OSError):
        append_jsonl(lines, {"step": 2}, kind=kind)
    assert read_jsonl(lines) == [{"step": 1}] and lines.read_text() == '{"step": 1}\n'


# --- interrupts and dead workers (subprocesses) ---------------------------------------------------


def _env(rbctl_cache, **extra) -> dict:
    return {**os.environ, "RBCTL_CACHE": str(rbctl_cache), **extra}


def _interruptible():
    """For a child that a test Ctrl-Cs: SIGINT as a terminal delivers it. A process started in the
    background by a non-interactive shell inherits SIGINT ignored, and so would the child."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _wait(cond, proc, timeout=240.0):
    import time

    deadline = time.time() + timeout
    while not cond():
        assert proc.poll() is None, f"exited early with {proc.returncode}: {proc.communicate()}"
        assert time.time() < deadline, "timed out"
        time.sleep(0.1)


def _sweep_file(tmp_path: Path, arms: dict, steps: int, jobs: int, seeds=(0,)) -> Path:
    (tmp_path / "base.yaml").write_text(yaml.safe_dump({**TINY_TRAIN, "steps": steps, "save_every": 2}))
    sweep = {"name": "f", "base": "base.yaml", "seeds": list(seeds), "arms": arms,
             "eval": {"benchmarks": ["builtin"], "n": 2, "limit": 4}, "jobs": jobs}
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(sweep, sort_keys=False))
    return tmp_path / "sweep.yaml"


def _prewarm(tiny_config):
    """Build the cached warm start here, so the subprocesses only train."""
    from rbctl.rollout.models import load_policy
    from rbctl.train.training_data import base_model

    cfg = tiny_config()
    load_policy(base_model(cfg, log=lambda *a: None), log=lambda *a: None)


@pytest.mark.slow
def test_sigint_to_train_prints_the_last_checkpoint_and_the_resume_command_exit_130(tiny_config, rbctl_cache, tmp_path):
    import signal

    from rbctl.store.jsonl import read_jsonl
    from rbctl.store.checkpoint import last_good_checkpoint

    _prewarm(tiny_config)
    cfg, rd = _cfg_file(tmp_path, steps=500, save_every=2), tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "rbctl", "train", str(cfg), "-o", str(rd), "-q"],
                            env=_env(rbctl_cache), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_interruptible)
    _wait(lambda: len(read_jsonl(rd / "metrics.jsonl")) >= 3, proc)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    lines = [x for x in err.splitlines() if x.startswith("interrupted")]
    step = last_good_checkpoint(rd)[0]
    assert step >= 2 and lines == [f"interrupted: the last checkpoint is step {step}; resume with: "
                                   f"rbctl train {cfg} -o {rd}"], err
    assert "Traceback" not in err
    assert (rd / ".lock").read_text() == ""  # the lock was released


@pytest.mark.slow
def test_sigint_to_ablate_stops_launching_records_state_and_prints_what_to_rerun(tiny_config, rbctl_cache, tmp_path):
    import signal

    from rbctl.store.jsonl import read_jsonl
    from rbctl.store.read import read_sweep_state

    _prewarm(tiny_config)
    sweep = _sweep_file(tmp_path, {"grpo": {}, "grpo_budget": {"algo.budget": 1.0}}, steps=200, jobs=1, seeds=(0, 1))
    out = tmp_path / "out"
    log = open(tmp_path / "log.txt", "w")  # not a terminal: plain lines
    proc = subprocess.Popen([sys.executable, "-m", "rbctl", "ablate", str(sweep), "-o", str(out), "--no-report"],
                            env=_env(rbctl_cache), stdout=log, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_interruptible)
    first = out / "runs" / "grpo" / "seed_0"
    _wait(lambda: len(read_jsonl(first / "metrics.jsonl")) >= 3, proc)
    proc.send_signal(signal.SIGINT)  # to the parent alone (a terminal's Ctrl-C reaches the workers too)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    lines = [x for x in err.splitlines() if x.startswith("interrupted")]
    assert len(lines) == 1 and "0/4 runs done" in lines[0] and f"finish with: rbctl ablate {sweep} -o {out}" in lines[0], err
    state = read_sweep_state(out)
    assert state["grpo/seed_0"]["status"] == "interrupted"
    assert {state[k]["status"] for k in state if k != "grpo/seed_0"} == {"pending"}
    assert not (out / "runs" / "grpo" / "seed_1").exists() and not (out / "runs" / "grpo_budget").exists()
    assert len(read_jsonl(first / "metrics.jsonl")) < 200  # it stopped, not ran to the end
    text = (tmp_path / "log.txt").read_text()
    assert "start grpo/seed_0" in text and "interrupted grpo/seed_0" in text, text
    assert "\x1b[" not in text  # no Rich display in a log file


def test_plain_progress_prints_one_line_per_period():
    import io

    from rbctl.sweep.display import PlainDisplay

    out = io.StringIO()
    d = PlainDisplay(every=0.0, out=out)
    d.add("a/seed_0", 10)
    d.add("b/seed_0", 10)
    d.started("a/seed_0")
    d.step("a/seed_0", 3, "")
    d.tick()
    d.finished("a/seed_0", {"status": "done", "error": None})
    lines = out.getvalue().splitlines()
    assert lines[0].endswith("start a/seed_0")
    assert re.search(r"progress: runs 0/2 done, 1 running, 0 failed, 1 pending; 0:\d\d elapsed, no ETA before a "
                     r"run ends \(a/seed_0 step 3/10\)$", lines[1]), lines[1]
    assert " done a/seed_0 (" in lines[2]


STEPS_KILLED = 40  # a tiny step takes ~40 ms: room to kill the worker after its 3rd step and before its last


@pytest.mark.slow
def test_a_sweep_survives_a_sigkilled_worker_and_a_rerun_completes_it(tiny_config, rbctl_cache, tmp_path):
    import signal

    from rbctl.store.jsonl import read_jsonl
    from rbctl.store.read import read_sweep_state

    _prewarm(tiny_config)
    sweep = _sweep_file(tmp_path, {"grpo": {}, "grpo_budget": {"algo.budget": 1.0}}, steps=STEPS_KILLED, jobs=2)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "rbctl", "ablate", str(sweep), "-o", str(out), "--no-report", "-q"]
    proc = subprocess.Popen(cmd, env=_env(rbctl_cache), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    victim = out / "runs" / "grpo" / "seed_0"
    _wait(lambda: len(read_jsonl(victim / "metrics.jsonl")) >= 3, proc)
    pid = json.loads((victim / ".lock").read_text())["pid"]  # the worker process training that run
    assert pid != proc.pid
    os.kill(pid, signal.SIGKILL)  # as the kernel's OOM killer would
    stdout, err = proc.communicate(timeout=600)
    assert proc.returncode == 1, err
    state = read_sweep_state(out)
    assert state["grpo/seed_0"] == {"status": "failed", "error": "worker process killed by SIGKILL"}
    assert state["grpo_budget/seed_0"]["status"] == "done"
    assert "failed: grpo/seed_0: worker process killed by SIGKILL" in stdout
    killed_at = len(read_jsonl(victim / "metrics.jsonl"))
    done = subprocess.run(cmd, env=_env(rbctl_cache), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert all(r["status"] == "done" for r in read_sweep_state(out).values())
    assert [r["step"] for r in read_jsonl(victim / "metrics.jsonl")] == list(range(1, STEPS_KILLED + 1))
    assert killed_at < STEPS_KILLED


@pytest.mark.slow
def test_a_disk_fault_writing_the_sweep_state_is_one_line_exit_1_and_a_rerun_completes(tiny_config, rbctl_cache, tmp_path):
    from rbctl.store.read import read_sweep_state

    _prewarm(tiny_config)
    sweep = _sweep_file(tmp_path, {"grpo": {}, "grpo_budget": {"algo.budget": 1.0}}, steps=2, jobs=1)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "rbctl", "ablate", str(sweep), "-o", str(out), "--no-report", "-q"]
    res = subprocess.run(cmd, env=_env(rbctl_cache, RBCTL_FAULT="enospc:sweep_state:2"), capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 1, res.stderr
    err = _one_error_line(res.stderr)
    assert f"{out / 'state.json'}: No space left on device (ENOSPC)" in err, err
    assert {r["status"] for r in read_sweep_state(out).values()} == {"pending"}  # the last complete state
    assert not list(out.glob(".state.json.tmp*"))
    res = subprocess.run(cmd, env=_env(rbctl_cache), capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert {r["status"] for r in read_sweep_state(out).values()} == {"done"}


@pytest.mark.slow
def test_a_disk_fault_writing_a_report_table_is_one_line_exit_1_and_a_rerun_completes(
        tiny_config, tmp_path, tmp_path_factory, capsys, fault):
    from rbctl.cli import run

    straight = _straight(tiny_config, tmp_path_factory)
    out = tmp_path / "report"
    fault("enospc:report:2")
    capsys.readouterr()
    assert run(["report", str(straight), "-o", str(out)]) == 1
    err = _one_error_line(capsys.readouterr().err)
    assert str(out) in err and "(ENOSPC)" in err, err
    assert not (out / "report.md").exists() and not list(out.rglob(".*tmp*"))
    fault(None)
    assert run(["report", str(straight), "-o", str(out)]) == 0
    assert (out / "report.md").read_text().startswith("#")


@pytest.mark.slow
def test_sigterm_to_ablate_stops_its_workers_as_a_ctrl_c_does(tiny_config, rbctl_cache, tmp_path):
    """`kill PID` (SIGTERM, as `pkill` or a scheduler's preemption sends it) to the launcher: the running
    run saves its step and stops, the state records it interrupted, exit 130. Before, the launcher died
    at once and its worker trained on, writing into the run directory."""
    import signal

    from rbctl.store.jsonl import read_jsonl
    from rbctl.store.read import read_sweep_state

    _prewarm(tiny_config)
    sweep = _sweep_file(tmp_path, {"grpo": {}}, steps=400, jobs=1)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "rbctl", "ablate", str(sweep), "-o", str(out), "--no-report", "-q"],
                            env=_env(rbctl_cache), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = out / "runs" / "grpo" / "seed_0"
    _wait(lambda: len(read_jsonl(first / "metrics.jsonl")) >= 3, proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert read_sweep_state(out)["grpo/seed_0"]["status"] == "interrupted"
    n = len(read_jsonl(first / "metrics.jsonl"))
    import time

    time.sleep(3)
    assert len(read_jsonl(first / "metrics.jsonl")) == n < 400  # nothing trains on after the launcher ended


@pytest.mark.slow
def test_a_sigkilled_launcher_leaves_no_worker_training(tiny_config, rbctl_cache, tmp_path):
    """SIGKILL (an out-of-memory kill) of the launcher forwards nothing: each worker notices its launcher
    is gone within `LAUNCHER_POLL_S` and stops as after a Ctrl-C, its step saved."""
    import signal
    import time

    from rbctl.store.jsonl import read_jsonl
    from rbctl.sweep.local import LAUNCHER_POLL_S

    _prewarm(tiny_config)
    sweep = _sweep_file(tmp_path, {"grpo": {}}, steps=2000, jobs=1)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "rbctl", "ablate", str(sweep), "-o", str(out), "--no-report", "-q"],
                            env=_env(rbctl_cache), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    first = out / "runs" / "grpo" / "seed_0"
    try:
        _wait(lambda: len(read_jsonl(first / "metrics.jsonl")) >= 3, proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        time.sleep(LAUNCHER_POLL_S + 8)  # the watch notices, the step in flight ends and is saved
        n = len(read_jsonl(first / "metrics.jsonl"))
        time.sleep(4)
        assert len(read_jsonl(first / "metrics.jsonl")) == n < 2000  # stopped, not training on
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # whatever is left of the session
