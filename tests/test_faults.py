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
