"""Faults beyond SIGKILL (issue 14): planted pickles, two writers, a full disk, interrupts."""

from __future__ import annotations

import json
import os
import pickle
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
    from rbctl.store.rundir import CKPT_DONE, checkpoint_manifest
    from rbctl.train.loop import train

    cfg = tiny_config(steps=2, save_every=2)
    rd = tmp_path / "run"
    train(cfg, rd, progress=False, log=lambda *a: None)
    ck = rd / "checkpoints" / "step_000002"
    marker = tmp_path / "pwned"
    (ck / "trainer_state.pt").write_bytes(pickle.dumps({"optimizer": _Planted(marker)}, protocol=2))
    (ck / CKPT_DONE).write_text(json.dumps({"step": 2, "files": checkpoint_manifest(ck)}))
    capsys.readouterr()
    code = run(["train", str(_cfg_file(tmp_path, steps=4)), "-o", str(rd), "-q"])
    err = capsys.readouterr().err
    errors = [x for x in err.splitlines() if x.startswith("error:")]
    assert code == 2 and "Traceback" not in err
    assert len(errors) == 1 and "trainer_state.pt" in errors[0] and "posix.system" in errors[0], err
    assert not marker.exists()


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
    assert run(["train", str(_cfg_file(tmp_path, steps=2, save_every=2)), "-o", str(rd), "-q"]) == 0
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
    """The uninterrupted 4-step run, trained once per session."""
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
def test_a_disk_fault_in_training_is_one_line_exit_1_nothing_torn_and_a_rerun_equals_the_straight_run(
        spec, message, tiny_config, tmp_path, tmp_path_factory, capsys, fault):
    import torch

    from rbctl.cli import run
    from rbctl.store.jsonl import read_jsonl
    from rbctl.store.rundir import checkpoint_problem

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
