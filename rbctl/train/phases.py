"""Where a sweep run's wall time goes, for `python -m scripts.bench_main_job --split` (opt-in: off
unless RBCTL_PHASES names a file; nothing of it runs otherwise).

With RBCTL_PHASES=FILE each sweep run (`rbctl.sweep.ablate._run_one`) appends one JSON line to
FILE: its wall and CPU seconds in all and in each phase (building the trainer: the policy, the
warm start, the engine; the training steps; the periodic evaluations, the step-0 one included;
the final evaluation; checkpoint writes; log lines), how long its worker process had lived when
the run began (a process started for this run, or one kept from earlier runs) and how many modules
the run imported. The phases are the loop's (`rbctl.train.callbacks.Events.phase`), reported to
`PhaseTimer`, a callback of the run; nothing a run computes changes.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from rbctl.train.callbacks import Callback

ENV = "RBCTL_PHASES"


def _process_age() -> float | None:
    """Seconds since this process was started (Linux /proc), else None."""
    try:
        start_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return uptime - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


class PhaseTimer(Callback):
    """A run's time by phase (module docstring), from its start (when it is made) to `write`."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.phases: dict[str, list[float]] = {}  # phase -> [wall s, cpu s, calls]
        self.start = {"wall": time.perf_counter(), "cpu": time.process_time(), "age": _process_age(),
                      "modules": len(sys.modules)}

    def on_phase_end(self, name: str, wall_s: float, cpu_s: float) -> None:
        slot = self.phases.setdefault(name, [0.0, 0.0, 0])
        slot[0] += wall_s
        slot[1] += cpu_s
        slot[2] += 1

    def write(self, key: str, status: str) -> None:
        """At the run's end: append its record to the file."""
        rec = {"key": key, "status": status, "pid": os.getpid(), "process_age_s": self.start["age"],
               "modules_imported": len(sys.modules) - self.start["modules"],
               "wall_s": time.perf_counter() - self.start["wall"], "cpu_s": time.process_time() - self.start["cpu"],
               "phases": {k: {"wall_s": v[0], "cpu_s": v[1], "calls": v[2]} for k, v in self.phases.items()}}
        with open(self.path, "a") as f:
            f.write(json.dumps(rec) + "\n")


def timer() -> PhaseTimer | None:
    """At a run's start, in its worker: a `PhaseTimer` when RBCTL_PHASES names a file, else None."""
    path = os.environ.get(ENV)
    return PhaseTimer(path) if path else None
