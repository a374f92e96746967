"""The local launcher of `rbctl ablate`: `jobs` worker processes, each running one run after another.

A worker is kept from run to run, so that a run after a worker's first skips what every run
would repeat: the imports of the trainer's lazily loaded libraries (transformers' model code,
torch._dynamo, sympy, scipy: ~1,500 modules, ~2 s of CPU time per run on the main job in the
reward-budgeting study's performance journal, studies/reward_budgeting/docs/performance.md) and the
other first-call costs (`python -m scripts.bench_main_job --split` prints them). A run's results
do not depend on the worker it ran in: every run seeds its own random streams, and the main job's
metrics, samples, evaluations and weights are byte-identical either way (docs/performance.md, "The
knobs").
A worker killed by the kernel (out of memory) fails only the run it was running: that run is
reported with the signal that ended it, a fresh worker takes the next run and the others go on.
A run on a GPU (or with vLLM) gets a worker of its own, as before (`execute`'s `alone`), and, where
GPUs are visible, a GPU of its own: its worker sees only that one (`CUDA_VISIBLE_DEVICES`) as a
single process (`RANK`, `LOCAL_RANK` 0, `WORLD_SIZE` 1, its own `MASTER_PORT`: vLLM's in-process
world binds one), and such runs start only while a GPU is free (`gpu_worker_env`).
Workers are forked from a fork server that has imported torch, transformers and the trainer once
(`PRELOAD`; it runs no computation, so no OpenMP thread pool is inherited). Each run takes the
launcher's environment and working directory as they are when it starts. The first Ctrl-C
(SIGINT) stops launching runs, interrupts the running ones (each ends its step in progress and writes
its checkpoint, `rbctl.train.interrupt`, so a rerun resumes it losing nothing) and returns; a second
one stops at once. What it shows is `rbctl.sweep.display`'s: a live display at a terminal, plain lines
otherwise.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
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


def visible_gpus() -> list[str]:
    """The GPUs this launcher may hand out, as `CUDA_VISIBLE_DEVICES` names them (indices, or UUIDs
    / MIG names), else every device torch sees; [] without CUDA."""
    named = os.environ.get("CUDA_VISIBLE_DEVICES")
    if named is not None:
        return [d.strip() for d in named.split(",") if d.strip() and d.strip() != "-1"]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


# what a single-process run's worker must not inherit from a launcher started under torchrun or Slurm
_DIST_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_PORT")


def gpu_worker_env(env: dict, gpu: str | None) -> dict:
    """The environment of a worker running one GPU (or vLLM) run: `env` with that one GPU visible
    (None: no GPU to hand out, CUDA left as it is) as device 0 of a single process. Without it every
    worker of `--jobs N` took GPU 0 (torch's and vLLM's default device, vLLM's `LOCAL_RANK` 0), and
    two vLLM engines would share one `MASTER_PORT`."""
    out = {k: v for k, v in env.items() if k not in _DIST_VARS}
    out.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
    if gpu is not None:
        out["CUDA_VISIBLE_DEVICES"] = gpu
    return out


class GpuPool:
    """The visible GPUs, each held by at most one run at a time."""

    def __init__(self, gpus: list[str]):
        self.free, self.held = list(gpus), {}

    def env_for(self, key: str, env: dict) -> dict | None:
        """`gpu_worker_env` for run `key`, a free GPU now held for it; None while every GPU is held
        (with no GPU at all: the environment without one)."""
        if self.held and not self.free:
            return None
        if self.free:
            self.held[key] = self.free.pop(0)
        return gpu_worker_env(env, self.held.get(key))

    def release(self, key: str) -> None:
        if key in self.held:
            self.free.append(self.held.pop(key))


LAUNCHER_POLL_S = 2.0  # how often a worker checks that its launcher is alive


def _watch_launcher(launcher: int) -> None:  # pragma: no cover - runs in the worker
    """End the worker's run as a Ctrl-C ends it (the step saved, then stop) once the launcher process
    ``launcher`` is gone: killed outright (SIGKILL, an out-of-memory kill), it forwards nothing, and a
    worker left running would train on into run directories a new start may be using."""
    import _thread
    import threading

    def watch():
        while True:
            time.sleep(LAUNCHER_POLL_S)
            try:
                os.kill(launcher, 0)
            except ProcessLookupError:
                _thread.interrupt_main()
                return
            except PermissionError:  # alive, another user's pid reused: not ours to judge
                continue

    threading.Thread(target=watch, name="rbctl-launcher-watch", daemon=True).start()


def _worker(conn, queue, launcher: int | None = None) -> None:  # pragma: no cover - runs in the worker
    """A worker's loop: run each (target, key, args, env, cwd) the launcher sends, until it sends
    None. An interrupted run (Ctrl-C, or the launcher gone: `_watch_launcher`) ends the worker: the
    launcher starts nothing more."""
    signal.signal(signal.SIGINT, _interrupt_once)
    if launcher is not None:
        _watch_launcher(launcher)
    from rbctl.train.interrupt import MERGE_S

    MERGE_S["s"] = FORWARD_MERGE_S  # during training: the first Ctrl-C saves the step, its forwarded copy is merged
    try:
        while True:
            task = conn.recv()
            if task is None:
                return
            target, key, args, env, cwd = task
            os.environ.clear()  # the fork server was started earlier: take the launcher's current environment
            os.environ.update(env)
            os.chdir(cwd)
            queue.put((key, "start", 0, {}))
            try:
                res = target(*args, queue)
            except KeyboardInterrupt:
                queue.put((key, "result", 0, {"key": key, "status": "interrupted", "error": None}))
                return
            queue.put((key, "result", 0, res))
    except (KeyboardInterrupt, EOFError):  # Ctrl-C while idle, or the launcher is gone
        return


class _Worker:
    """A worker process and the end of its task pipe the launcher writes to."""

    def __init__(self, ctx, queue, task=None):
        recv, self.conn = ctx.Pipe(duplex=False)
        self.process = ctx.Process(target=_worker, args=(recv, queue, os.getpid()), daemon=False)
        self.process.start()
        recv.close()
        if task is not None:
            self.send(task)

    def send(self, task) -> None:
        self.conn.send(task)

    def close(self) -> None:
        """Tell an idle worker to exit (it is gone already if the pipe is broken)."""
        try:
            self.conn.send(None)
            self.conn.close()
        except (BrokenPipeError, OSError):
            pass


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


def execute(target, todo: list[tuple[str, int, tuple]], jobs: int, record, display, alone=frozenset()) -> None:
    """Run `target(*args, queue)` for each (key, steps, args) of `todo` in at most `jobs` worker
    processes kept across runs (module docstring); `record(key, result)` is called as each ends.
    The runs of `alone` (keys) each get a worker of their own, started for it and ended after it
    (a GPU run: vLLM is built once per process, and a process keeps the GPU memory it cached), and
    one of the visible GPUs to itself (`gpu_worker_env`): at most as many run at once as there are
    GPUs. Raises Interrupted after a Ctrl-C."""
    launch = _Launch(target, todo, jobs, record, display, alone)
    old = signal.signal(signal.SIGINT, launch.on_signal)
    old_term = signal.signal(signal.SIGTERM, launch.on_signal)  # `kill`, Slurm's preemption: stop as a Ctrl-C stops
    try:
        launch.run()
    except BaseException:
        launch.stop_running()  # nothing is left running behind us
        raise
    finally:
        launch.retire_idle()
        signal.signal(signal.SIGINT, old)
        signal.signal(signal.SIGTERM, old_term)
        launch.manager.shutdown()
    if launch.stops:
        raise Interrupted


class _Launch:
    """One `execute`: its workers, the runs waiting, running and ended, and the Ctrl-Cs received."""

    def __init__(self, target, todo, jobs: int, record, display, alone):
        self.target, self.todo, self.jobs, self.record, self.display, self.alone = target, todo, jobs, record, display, alone
        self.ctx = run_context()
        self.gpus = GpuPool(visible_gpus() if alone else [])
        self.manager = self.ctx.Manager()  # its server process ignores SIGINT
        self.queue = self.manager.Queue()
        self.waiting, self.running, self.idle, self.results = list(todo), {}, [], {}
        self.stops, self.forwarded = 0, False

    def on_signal(self, signum, frame) -> None:
        """The first Ctrl-C (or SIGTERM) stops the sweep at the runs' next step; a second one at once."""
        self.stops += 1
        if self.stops > 1:
            raise KeyboardInterrupt

    def run(self) -> None:
        with self.display:
            for key, steps, _ in self.todo:
                self.display.add(key, steps)
            while self.waiting or self.running:
                if self.stops and not self.forwarded:
                    self.waiting.clear()  # launch nothing more; the running runs stop at their next step
                    for w in self.running.values():
                        _signal(w.process, signal.SIGINT)
                    self.forwarded = True
                self._launch()
                _drain(self.queue, self.display, self.results)
                for key, w in list(self.running.items()):
                    self._collect(key, w)
                self.display.tick()
                if self.running or self.waiting:
                    time.sleep(0.2)

    def _launch(self) -> None:
        """Start waiting runs while fewer than `jobs` run (an alone run only while a GPU is free)."""
        while self.waiting and len(self.running) < self.jobs:
            key, _, args = self.waiting[0]
            env = self.gpus.env_for(key, dict(os.environ)) if key in self.alone else dict(os.environ)
            if env is None:
                return  # every GPU is held: wait for one
            self.waiting.pop(0)
            task = (self.target, key, args, env, os.getcwd())
            self.running[key] = (_Worker(self.ctx, self.queue, task) if key in self.alone
                                 else _hand(self.idle, self.ctx, self.queue, task))

    def _collect(self, key: str, w: _Worker) -> None:
        """Record run `key` if it ended: with its result, or as failed (interrupted) where its worker
        died without one."""
        if key in self.results:  # the run ended; its worker waits for the next one
            if self.stops or key in self.alone:
                _retire(w)
            else:
                self.idle.append(w)  # before `record`, which may raise (a full disk): `retire_idle` ends it
            self._finish(key, self.results.pop(key))
            return
        if w.process.is_alive():
            return
        w.process.join()
        _drain(self.queue, self.display, self.results)
        res = self.results.pop(key, None) or (
            {"key": key, "status": "interrupted", "error": None} if self.stops  # Ctrl-C before it was ready
            else {"key": key, "status": "failed", "error": died(w.process.exitcode)})
        w.conn.close()
        self._finish(key, res)

    def _finish(self, key: str, res: dict) -> None:
        del self.running[key]
        self.gpus.release(key)
        self.record(key, res)
        self.display.finished(key, res)

    def stop_running(self) -> None:
        """Interrupt every running run, and kill a worker that has not ended within 30 s."""
        for w in self.running.values():
            _signal(w.process, signal.SIGINT)
        for w in self.running.values():
            w.process.join(30)
            if w.process.is_alive():
                w.process.kill()
                w.process.join()

    def retire_idle(self) -> None:
        for w in self.idle:
            _retire(w)


def _hand(idle: list, ctx, queue, task) -> _Worker:
    """Send `task` to an idle worker that is still alive, else to a new one; returns the worker."""
    while idle:
        w = idle.pop()
        if w.process.is_alive():
            try:
                w.send(task)
                return w
            except (BrokenPipeError, OSError):
                pass
        _retire(w)
    return _Worker(ctx, queue, task)


def _retire(w: _Worker) -> None:
    """End an idle worker: ask it to exit, and kill it if it has not within 30 s."""
    w.close()
    w.process.join(30)
    if w.process.is_alive():
        w.process.kill()
        w.process.join()


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
