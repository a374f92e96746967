"""The progress display of `rbctl train`, a callback of the loop (`rbctl.train.callbacks`)."""

from __future__ import annotations

import sys
import time

from rbctl.train.callbacks import Callback, Run, StepRecord

PLAIN_EVERY_S = 30.0  # when output is not a terminal: a plain progress line at most this often (and at the end)


class ProgressDisplay(Callback):
    """A Rich progress bar with live reward, entropy and κ_eff; when output is not a terminal (a log
    file, a Slurm job), plain lines instead: one every `every` seconds and one at the last step,
    each flushed. Shown from the loop's start (after the step-0 evaluation) to its end."""

    def __init__(self, total: int, start: int, enabled: bool = True, plain: bool | None = None,
                 every: float = PLAIN_EVERY_S, out=None):
        self.enabled = enabled
        self.total, self.start = total, start
        self.last_keff = None
        self.out = out or sys.stdout
        self.plain = (not self.out.isatty()) if plain is None else plain
        self.every = every
        self.t0 = self.last = time.monotonic()  # from __enter__ on: the steps' time
        self.progress = None

    def on_start(self, run: Run) -> None:
        self.__enter__()

    def on_progress(self, run: Run, step: StepRecord) -> None:
        self.update(step.step, step.metrics)

    def on_end(self, run: Run) -> None:
        self.__exit__(*sys.exc_info())

    def __enter__(self):
        self.t0 = self.last = time.monotonic()
        if self.enabled and not self.plain:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

            self.progress = Progress(TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(),
                                     TextColumn("{task.fields[info]}"), TimeElapsedColumn(), TimeRemainingColumn())
            self.progress.__enter__()
            self.task = self.progress.add_task("train", total=self.total, completed=self.start, info="")
        return self

    def update(self, step: int, m: dict) -> None:
        if not self.enabled:
            return
        if m.get("kappa_eff") is not None:
            self.last_keff = m["kappa_eff"]
        keff = f"{self.last_keff:.3g}" if self.last_keff is not None else "–"
        info = f"reward {m['reward/mean']:.3f}  entropy {m['entropy']:.3f}  κ_eff {keff}"
        if not self.plain:
            self.progress.update(self.task, completed=step, info=info)
            return
        now = time.monotonic()
        if now - self.last >= self.every or step == self.total:
            self.last = now
            print(f"[{time.strftime('%H:%M:%S')}] train step {step}/{self.total}  {info}  "
                  f"({(now - self.t0) / 60:.1f} min)", file=self.out, flush=True)

    def __exit__(self, *exc):
        if self.progress is not None:
            self.progress.__exit__(*exc)
            self.progress = None
