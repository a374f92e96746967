"""`python -m scripts.bench_eval --run RUN_DIR` times `rbctl eval RUN_DIR` at its defaults against
`--threads 1` (each into a fresh folder, `--force`), then the reuse of the run's own result, and prints
both times and their ratio. The commands are stubbed here; the clock advances by a set time each."""

from __future__ import annotations

import subprocess
import types

from scripts import bench_eval


def test_the_run_bench_times_the_defaults_against_one_thread_and_the_reuse(monkeypatch, capsys):
    calls, seconds = [], iter([12.0, 10.0, 2.0])
    clock = {"t": 0.0}

    def fake_run(argv, **kwargs):
        calls.append(argv[3:])  # after python -m rbctl
        clock["t"] += next(seconds)
        return types.SimpleNamespace(returncode=0, stderr="")

    monkeypatch.setattr(subprocess, "run", fake_run)
    monkeypatch.setattr(bench_eval.time, "perf_counter", lambda: clock["t"])
    bench_eval.bench_run_eval("runs/first")
    out = capsys.readouterr().out
    assert [c[:2] for c in calls] == [["eval", "runs/first"]] * 3
    assert "--force" in calls[0] and "--threads" not in calls[0]
    assert calls[1][calls[1].index("--threads") + 1] == "1" and "--force" in calls[1]
    assert calls[2] == ["eval", "runs/first"]  # the defaults into the run's own folder: its result reused
    assert "12.0 s" in out and "10.0 s" in out and "ratio defaults / --threads 1: 1.20 (bar: <= 1.5)" in out
    assert "reused:" in out and "2.0 s" in out
