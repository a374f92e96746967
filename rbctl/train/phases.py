"""Where a sweep run's wall time goes, for `python -m scripts.bench_main_job --split` (opt-in: off
unless RBCTL_PHASES names a file; nothing of it runs otherwise).

With RBCTL_PHASES=FILE each sweep run (`rbctl.sweep.ablate._run_one`) appends one JSON line to
FILE: its wall and CPU seconds in all and in each phase (building the trainer: the policy, the
warm start, the engine; the training steps; the periodic evaluations, the step-0 one included;
the final evaluation; checkpoint writes; log lines), how long its worker process had lived when
the run began (a process started for this run, or one kept from earlier runs) and how many modules
the run imported. The phases are timed by wrapping the functions that do them, once per process;
nothing a run computes changes.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

ENV = "RBCTL_PHASES"

_acc: dict[str, list[float]] | None = None  # phase -> [wall s, cpu s, calls] of the run in progress
_installed = False
_start: dict = {}
_inside = [False]  # a phase in progress: the calls inside it are its own time, not another phase's


def _wrap(owner, name: str, phase: str) -> None:
    fn = getattr(owner, name)

    def timed(*a, **k):
        if _acc is None or _inside[0]:
            return fn(*a, **k)
        w, c = time.perf_counter(), time.process_time()
        _inside[0] = True
        try:
            return fn(*a, **k)
        finally:
            _inside[0] = False
            slot = _acc.setdefault(phase, [0.0, 0.0, 0])
            slot[0] += time.perf_counter() - w
            slot[1] += time.process_time() - c
            slot[2] += 1

    setattr(owner, name, timed)


def _install() -> None:
    global _installed
    if _installed:
        return
    _installed = True
    from rbctl.train import loop, tracking
    from rbctl.train.trainer import Trainer

    _wrap(Trainer, "__init__", "trainer")       # policy, warm start, reference, optimizer, engine, data
    _wrap(Trainer, "step", "steps")
    _wrap(Trainer, "checkpoint", "checkpoint")  # the state to save
    _wrap(loop, "save_checkpoint", "checkpoint")
    _wrap(loop, "_periodic_eval", "periodic_eval")
    _wrap(loop, "evaluate_final", "final_eval")
    _wrap(loop, "append_jsonl", "logs")
    _wrap(tracking.Tracker, "log", "logs")


def _process_age() -> float | None:
    """Seconds since this process was started (Linux /proc), else None."""
    try:
        start_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return uptime - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def begin() -> None:
    """At a run's start, in its worker: start timing it (nothing unless RBCTL_PHASES is set)."""
    global _acc
    if not os.environ.get(ENV):
        return
    _start.update(wall=time.perf_counter(), cpu=time.process_time(), age=_process_age(), modules=len(sys.modules))
    _install()
    _acc = {}


def end(key: str, status: str) -> None:
    """At a run's end: append its record to RBCTL_PHASES's file."""
    global _acc
    path = os.environ.get(ENV)
    if not path or _acc is None:
        return
    rec = {"key": key, "status": status, "pid": os.getpid(), "process_age_s": _start["age"],
           "modules_imported": len(sys.modules) - _start["modules"],
           "wall_s": time.perf_counter() - _start["wall"], "cpu_s": time.process_time() - _start["cpu"],
           "phases": {k: {"wall_s": v[0], "cpu_s": v[1], "calls": v[2]} for k, v in _acc.items()}}
    _acc = None
    with open(path, "a") as f:
        f.write(json.dumps(rec) + "\n")
