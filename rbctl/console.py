"""Console hygiene shared by the CLI, the sweep workers and the developer scripts."""

from __future__ import annotations

# The width of rbctl's tables where output is not a terminal (a pipe, a file), when COLUMNS does not
# say: wide enough that a table keeps its own width, as at a wide terminal, instead of wrapping every
# cell at Rich's default of 80 columns. A table is as wide as its content, never padded to this.
PIPED_WIDTH = 240


def table_console(file=None):
    """The Rich console rbctl prints its tables on (`rbctl report`, `rbctl eval`): a terminal's own
    width at a terminal; piped or redirected, COLUMNS if set, else `PIPED_WIDTH`."""
    import os
    import sys

    from rich.console import Console

    out = file or sys.stdout
    if out.isatty():
        return Console(file=file)
    columns = os.environ.get("COLUMNS", "")
    return Console(file=file, width=int(columns) if columns.isdigit() and int(columns) > 0 else PIPED_WIDTH)


def quiet_libraries() -> None:
    """Progress bars and advice from transformers/datasets would drown rbctl's own display."""
    import os
    import warnings

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    warnings.filterwarnings("ignore", category=UserWarning)
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    except ImportError:
        pass


class PlainProgress:
    """Plain progress lines in place of a Rich progress display, for output that is not a terminal
    (a log file, a Slurm job): the part of `rich.progress.Progress` that rbctl's evaluation uses
    (`add_task`, `advance`, `update`), printing each task's state at most every `every` seconds and
    once when it completes, each line flushed:
    ``[12:00:00] builtin: generating 37% (96/256 samples)``."""

    def __init__(self, every: float = 30.0, out=None):
        import sys
        import time

        self.every, self.out = every, out or sys.stdout
        self.tasks: dict[int, dict] = {}
        self._clock = time.monotonic
        self.last = self._clock()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def add_task(self, description: str, total: float | None = None, completed: float = 0, **fields) -> int:
        tid = len(self.tasks)
        self.tasks[tid] = {"description": description, "total": total, "completed": completed, "fields": fields,
                           "ended": False}
        return tid

    def advance(self, task: int, advance: float = 1) -> None:
        self.tasks[task]["completed"] += advance
        self._report(task, end=False)

    def update(self, task: int, completed: float | None = None, **fields) -> None:
        t = self.tasks[task]
        if completed is not None:
            t["completed"] = completed
        t["fields"].update(fields)
        self._report(task, end=True)

    def line(self, task: int) -> str:
        t = self.tasks[task]
        share = f" {t['completed'] / t['total']:.0%}" if t["total"] else ""
        detail = t["fields"].get("detail")
        return f"{t['description']}{share}" + (f" ({detail})" if detail else "")

    def _report(self, task: int, end: bool) -> None:
        """A line when the period has passed; the line of a completed task once, at the `update`
        that follows its last advance (its detail, such as a sample count, is then up to date)."""
        import time

        t = self.tasks[task]
        done = t["total"] is not None and t["completed"] >= t["total"]
        if t["ended"]:
            return
        now = self._clock()
        if (done and end) or now - self.last >= self.every:
            self.last = now
            t["ended"] = done and end
            print(f"[{time.strftime('%H:%M:%S')}] {self.line(task)}", file=self.out, flush=True)
