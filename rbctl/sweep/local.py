"""The local launcher of `rbctl ablate`: one process per run, `jobs` at a time.

A process per run (not a pool) so that one worker killed by the kernel (out of memory) fails only
its own run: it is reported with the signal that ended it and the others go on. Run processes are
forked from a fork server that has imported torch, transformers and the trainer once (`PRELOAD`; it
runs no computation, so no OpenMP thread pool is inherited): each run skips the ~5 s of imports a
fresh interpreter spends (python -m scripts.bench_main_job --compare). Each run takes the launcher's
environment and working directory as they are when it starts. The first Ctrl-C
(SIGINT) stops launching runs, interrupts the running ones (each ends its step in progress and writes
its checkpoint, `rbctl.train.interrupt`, so a rerun resumes it losing nothing) and returns; a second
one stops at once. When output is not a terminal (a log file, a Slurm job) plain
lines replace the Rich display: one per run start and end and a one-line progress every
`progress_every` seconds.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import time
from multiprocessing import get_context


# The launcher forwards a Ctrl-C within its poll period (0.2 s) of getting it; the terminal's copy
# reaches a worker at once. Generous, as a user's second Ctrl-C comes seconds later.
FORWARD_MERGE_S = 2.0


def _interrupt_once(signum, frame):  # pragma: no cover - runs in the worker
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches both us and the parent's forward
    raise KeyboardInterrupt


# Imported once by the fork server, before any run is forked from it.
PRELOAD = ["torch", "transformers", "rbctl.sweep.ablate", "rbctl.train.loop", "rbctl.eval.pipeline"]


def run_context():
    """The multiprocessing context of run processes: a preloaded fork server where the platform has
    one (Linux, macOS), else fresh interpreters (spawn)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return get_context("spawn")
    ctx = get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def _child(target, key: str, args: tuple, queue, env: dict, cwd: str) -> None:  # pragma: no cover - runs in the worker
    os.environ.clear()  # the fork server was started earlier: take the launcher's current environment
    os.environ.update(env)
    os.chdir(cwd)
    signal.signal(signal.SIGINT, _interrupt_once)
    from rbctl.train.interrupt import MERGE_S

    MERGE_S["s"] = FORWARD_MERGE_S  # during training: the first Ctrl-C saves the step, its forwarded copy is merged
    queue.put((key, "start", 0, {}))
    try:
        res = target(*args, queue)
    except KeyboardInterrupt:
        res = {"key": key, "status": "interrupted", "error": None}
    queue.put((key, "result", 0, res))


def died(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"worker process killed by {name}"
    return f"worker process exited with code {code} without a result"


class Interrupted(Exception):
    """The sweep was stopped by Ctrl-C; the state of every run is recorded."""


def execute(target, todo: list[tuple[str, int, tuple]], jobs: int, record, display) -> None:
    """Run `target(*args, queue)` for each (key, steps, args) of `todo`, `jobs` at a time;
    `record(key, result)` is called as each ends. Raises Interrupted after a Ctrl-C."""
    ctx = run_context()
    manager = ctx.Manager()  # its server process ignores SIGINT
    queue = manager.Queue()
    waiting, running, results = list(todo), {}, {}
    stop = {"n": 0, "forwarded": False}

    def on_sigint(signum, frame):
        stop["n"] += 1
        if stop["n"] > 1:
            raise KeyboardInterrupt

    old = signal.signal(signal.SIGINT, on_sigint)
    try:
        with display:
            for key, steps, _ in todo:
                display.add(key, steps)
            while waiting or running:
                if stop["n"] and not stop["forwarded"]:
                    waiting.clear()  # launch nothing more; the running runs stop at their next step
                    for p in running.values():
                        _signal(p, signal.SIGINT)
                    stop["forwarded"] = True
                while waiting and len(running) < jobs:
                    key, _, args = waiting.pop(0)
                    p = ctx.Process(target=_child, args=(target, key, args, queue, dict(os.environ), os.getcwd()),
                                    daemon=False)
                    p.start()
                    running[key] = p
                _drain(queue, display, results)
                for key, p in list(running.items()):
                    if p.is_alive():
                        continue
                    p.join()
                    _drain(queue, display, results)
                    res = results.pop(key, None) or (
                        {"key": key, "status": "interrupted", "error": None} if stop["n"]  # Ctrl-C before it was ready
                        else {"key": key, "status": "failed", "error": died(p.exitcode)})
                    del running[key]
                    record(key, res)
                    display.finished(key, res)
                display.tick()
                if running or waiting:
                    time.sleep(0.2)
    except BaseException:
        for p in running.values():  # nothing is left running behind us
            _signal(p, signal.SIGINT)
        for p in running.values():
            p.join(30)
            if p.is_alive():
                p.kill()
                p.join()
        raise
    finally:
        signal.signal(signal.SIGINT, old)
        manager.shutdown()
    if stop["n"]:
        raise Interrupted


def _signal(p, sig) -> None:
    try:
        os.kill(p.pid, sig)
    except (ProcessLookupError, TypeError):
        pass


def _drain(queue, display, results: dict) -> None:
    while True:
        try:
            key, kind, step, m = queue.get_nowait()
        except Exception:
            return
        if kind == "result":
            results[key] = m
        elif kind == "start":
            display.started(key)
        elif kind == "step":
            display.step(key, step, f"reward {m['reward']:.3f}  entropy {m['entropy']:.3f}")
        else:
            display.step(key, step, "evaluating")


class RichDisplay:
    def __init__(self, enabled: bool = True):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.prog = Progress(TextColumn("{task.description:<28}"), BarColumn(), MofNCompleteColumn(),
                             TextColumn("{task.fields[info]}"), TimeElapsedColumn(), disable=not enabled)
        self.tasks = {}

    def __enter__(self):
        self.prog.__enter__()
        return self

    def __exit__(self, *exc):
        self.prog.__exit__(*exc)

    def add(self, key, total):
        self.tasks[key] = self.prog.add_task(key, total=total, info="pending")

    def started(self, key):
        self.prog.update(self.tasks[key], info="starting")

    def step(self, key, step, info):
        self.prog.update(self.tasks[key], completed=step, info=info)

    def finished(self, key, res):
        info = "[green]done" if res["status"] == "done" else (
            "[yellow]interrupted" if res["status"] == "interrupted" else f"[red]failed: {(res['error'] or '')[:60]}")
        self.prog.update(self.tasks[key], info=info)

    def tick(self):
        pass


class PlainDisplay:
    """One plain line per run start and end, and a one-line progress every `every` seconds."""

    def __init__(self, every: float = 60.0, out=None):
        self.every, self.out = every, out or sys.stdout
        self.steps, self.state, self.t0 = {}, {}, time.monotonic()
        self.last = self.t0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def _print(self, line: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {line}", file=self.out, flush=True)

    def add(self, key, total):
        self.steps[key], self.state[key] = (0, total), "pending"

    def started(self, key):
        self.state[key] = "running"
        self._print(f"start {key}")

    def step(self, key, step, info):
        self.steps[key] = (step, self.steps[key][1])

    def finished(self, key, res):
        self.state[key] = res["status"]
        mins = (time.monotonic() - self.t0) / 60
        extra = f": {res['error']}" if res.get("error") else ""
        self._print(f"{res['status']} {key}{extra} ({mins:.1f} min into the sweep)")

    def tick(self):
        now = time.monotonic()
        if now - self.last < self.every:
            return
        self.last = now
        count = {s: sum(1 for v in self.state.values() if v == s) for s in ("done", "failed", "running", "pending")}
        running = ", ".join(f"{k} step {self.steps[k][0]}/{self.steps[k][1]}" for k, v in self.state.items() if v == "running")
        self._print(f"progress: {count['done']}/{len(self.state)} done, {count['failed']} failed, {count['running']} "
                    f"running{' (' + running + ')' if running else ''}, {count['pending']} pending")
