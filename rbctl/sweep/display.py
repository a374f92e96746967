"""What `rbctl ablate` shows while its local runs go (`rbctl.sweep.local.execute` drives it).

One `SweepProgress` counts the runs and times them; two displays read it:

- `RichDisplay` (a terminal): one overall line (runs done / running / failed / pending, the time
  elapsed and an ETA from the runs finished so far) and one line per *running* run, within the
  terminal's height: a sweep of 72 runs in a 24-row terminal shows its overall line and its 2
  running runs, never a row per run cut off at the bottom;
- `PlainDisplay` (a log file, a Slurm job): one line per run start and end, and the overall line
  every `every` seconds.

The ETA assumes every run left takes the mean wall time of the runs that finished ``done`` in this
sweep (`eta_seconds`); before the first has, there is none.
"""

from __future__ import annotations

import heapq
import sys
import time
from dataclasses import dataclass

PENDING, RUNNING, DONE, FAILED, INTERRUPTED = "pending", "running", "done", "failed", "interrupted"


@dataclass
class RunProgress:
    """One run of the sweep as the display knows it."""

    total: int  # steps
    step: int = 0
    info: str = "pending"  # the last step's reward and entropy, or "evaluating"
    state: str = PENDING
    started: float | None = None  # the clock when its worker took it
    ended: float | None = None


def clock_text(seconds: float) -> str:
    """``0:07``, ``12:05``, ``1:02:05`` (h:mm:ss from an hour on)."""
    s = int(round(max(0.0, seconds)))
    h, m = divmod(s // 60, 60)
    return f"{h}:{m:02d}:{s % 60:02d}" if h else f"{m}:{s % 60:02d}"


def eta_seconds(mean_run_s: float, running_elapsed: list[float], pending: int, jobs: int) -> float:
    """Seconds until the last run ends if every run takes ``mean_run_s``: the running runs end after
    what is left of it (0 for one already past it), and each pending run takes the first of the
    ``jobs`` slots to free up. E.g. mean 60 s, two running for 10 s and 40 s, 3 pending, 2 jobs: the
    slots free at 20 and 50 s; pending runs end at 80, 110 and 140 s -> 140 s."""
    slots = [max(0.0, mean_run_s - e) for e in running_elapsed]
    slots += [0.0] * max(0, jobs - len(slots))
    heapq.heapify(slots)
    for _ in range(pending):
        heapq.heappush(slots, heapq.heappop(slots) + mean_run_s)
    return max(slots) if (pending or running_elapsed) else 0.0


class SweepProgress:
    """The runs of one sweep (added in launch order) and what happened to each."""

    def __init__(self, jobs: int = 1, clock=time.monotonic):
        self.jobs, self.clock = max(1, jobs), clock
        self.runs: dict[str, RunProgress] = {}
        self.t0 = clock()
        self.last_failure = ""

    def add(self, key: str, total: int) -> None:
        self.runs[key] = RunProgress(total)

    def started(self, key: str) -> None:
        r = self.runs[key]
        r.state, r.info, r.started = RUNNING, "starting", self.clock()

    def step(self, key: str, step: int, info: str) -> None:
        r = self.runs[key]
        r.step, r.info = step, info

    def finished(self, key: str, res: dict) -> None:
        r = self.runs[key]
        r.state, r.ended = res["status"], self.clock()
        if r.state == FAILED:
            self.last_failure = f"{key}: {res.get('error') or 'failed'}"

    def count(self, state: str) -> int:
        return sum(1 for r in self.runs.values() if r.state == state)

    def eta(self) -> float | None:
        """Seconds left (`eta_seconds`), or None before a run finished done."""
        took = [r.ended - r.started for r in self.runs.values()
                if r.state == DONE and r.started is not None and r.ended is not None]
        if not took:
            return None
        now = self.clock()
        running = [now - r.started for r in self.runs.values() if r.state == RUNNING and r.started is not None]
        return eta_seconds(sum(took) / len(took), running, self.count(PENDING), self.jobs)

    def overall(self, width: int = 0) -> list[str]:
        """``runs 12/72 done, 2 running, 0 failed, 58 pending; 4:31 elapsed, ETA 22:10``: one line, or
        two (split at the semicolon) where one is wider than ``width`` (0: no limit)."""
        counts = [f"runs {self.count(DONE)}/{len(self.runs)} done", f"{self.count(RUNNING)} running",
                  f"{self.count(FAILED)} failed", f"{self.count(PENDING)} pending"]
        if self.count(INTERRUPTED):
            counts.append(f"{self.count(INTERRUPTED)} interrupted")
        times = [f"{clock_text(self.clock() - self.t0)} elapsed"]
        if self.count(PENDING) + self.count(RUNNING):
            eta = self.eta()
            times.append(f"ETA {clock_text(eta)}" if eta is not None else "no ETA before a run ends")
        one = ", ".join(counts) + "; " + ", ".join(times)
        return [one] if not width or len(one) <= width else [", ".join(counts) + ";", ", ".join(times)]

    def running(self) -> list[tuple[str, RunProgress]]:
        return [(k, r) for k, r in self.runs.items() if r.state == RUNNING]

    def renderable(self, height: int, width: int = 80):
        """The overall line, the last failure (if any), and the running runs, one line each, in at
        most ``height`` lines of ``width`` columns: past that, the last line counts the running runs
        not shown."""
        from rich.console import Group
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        lines = [Text(x, style="bold", no_wrap=True, overflow="ellipsis") for x in self.overall(width)]
        if self.last_failure:
            lines.append(Text(f"last failure: {self.last_failure}", style="red", no_wrap=True, overflow="ellipsis"))
        running = self.running()
        room = max(0, height - len(lines))
        shown = running if len(running) <= room else running[:max(0, room - 1)]
        if shown:
            table = Table.grid(padding=(0, 1))
            table.add_column(no_wrap=True, overflow="ellipsis", max_width=34)
            table.add_column(width=16)
            table.add_column(no_wrap=True, justify="right")
            table.add_column(no_wrap=True, overflow="ellipsis", ratio=1)
            table.add_column(no_wrap=True, justify="right")
            now = self.clock()
            for key, r in shown:
                table.add_row(key, ProgressBar(total=max(1, r.total), completed=r.step, width=16),
                              f"{r.step}/{r.total}", r.info, clock_text(now - (r.started or now)))
            lines.append(table)
        if len(shown) < len(running):
            lines.append(Text(f"… and {len(running) - len(shown)} more running", no_wrap=True))
        return Group(*lines)


class RichDisplay:
    """The live display at a terminal (module docstring); ``enabled`` False shows nothing (--quiet)."""

    def __init__(self, jobs: int = 1, enabled: bool = True, console=None):
        from rich.console import Console

        self.progress = SweepProgress(jobs)
        self.enabled, self.live = enabled, None
        self.console = console or Console()

    def _render(self):
        size = self.console.size  # read at each refresh: a resized terminal gets its new height
        return self.progress.renderable(max(1, size.height - 1), size.width)  # the last row keeps the cursor

    def __enter__(self):
        if self.enabled:
            from rich.live import Live

            self.live = Live(get_renderable=self._render, console=self.console, refresh_per_second=4,
                             transient=False, redirect_stdout=False, redirect_stderr=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc):
        if self.live is not None:
            self.live.__exit__(*exc)

    def add(self, key, total):
        self.progress.add(key, total)

    def started(self, key):
        self.progress.started(key)

    def step(self, key, step, info):
        self.progress.step(key, step, info)

    def finished(self, key, res):
        self.progress.finished(key, res)

    def tick(self):
        pass


class PlainDisplay:
    """One plain line per run start and end, and the overall line with the running runs' steps every
    ``every`` seconds."""

    def __init__(self, every: float = 60.0, out=None, jobs: int = 1, clock=time.monotonic):
        self.every, self.out = every, out or sys.stdout
        self.progress = SweepProgress(jobs, clock)
        self.last = self.progress.t0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def _print(self, line: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {line}", file=self.out, flush=True)

    def add(self, key, total):
        self.progress.add(key, total)

    def started(self, key):
        self.progress.started(key)
        self._print(f"start {key}")

    def step(self, key, step, info):
        self.progress.step(key, step, info)

    def finished(self, key, res):
        self.progress.finished(key, res)
        mins = (self.progress.clock() - self.progress.t0) / 60
        extra = f": {res['error']}" if res.get("error") else ""
        self._print(f"{res['status']} {key}{extra} ({mins:.1f} min into the sweep)")

    def tick(self):
        now = self.progress.clock()
        if now - self.last < self.every:
            return
        self.last = now
        running = ", ".join(f"{k} step {r.step}/{r.total}" for k, r in self.progress.running())
        self._print(f"progress: {self.progress.overall()[0]}" + (f" ({running})" if running else ""))
