"""`submit_runs` through submitit's debug and local executors with trivial jobs (no training), the
Slurm options it writes (with a stand-in `srun` so that no cluster is needed), and throttling."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from rbctl.errors import UserError
from rbctl.config.launcher import LauncherCfg
from rbctl.sweep.launchers import NullQueue, make_executor, submit_runs

pytest.importorskip("submitit")


# Jobs are pickled by reference: module-level functions only.

def square(key, x):
    return {"key": key, "status": "done", "error": None, "value": x * x}


def boom(key):
    raise ValueError(f"bad input for {key}\nsecond line not shown")


def exit_hard(key):
    os._exit(3)  # the job process dies without a result (as when killed)


def not_a_result(key):
    return 42


def uses_queue(key, queue):
    queue.put((key, "step", 1, {}))  # as ablate._run_one does with its progress queue
    return {"key": key, "status": "done", "error": None}


def test_debug_collects_results_and_a_failure_does_not_stop_the_others(tmp_path):
    seen = []
    jobs = [("a/seed_0", square, ("a/seed_0", 3)), ("b/seed_0", boom, ("b/seed_0",)),
            ("c/seed_0", square, ("c/seed_0", 4)), ("d/seed_0", not_a_result, ("d/seed_0",)),
            ("e/seed_0", uses_queue, ("e/seed_0", NullQueue()))]
    res = submit_runs(jobs, {"cluster": "debug"}, folder=tmp_path, on_result=lambda k, r: seen.append(k), log=lambda *a: None)
    assert list(res) == [k for k, _, _ in jobs]  # in the order given
    assert res["a/seed_0"] == {"key": "a/seed_0", "status": "done", "error": None, "value": 9}
    assert res["c/seed_0"]["value"] == 16
    assert res["b/seed_0"] == {"key": "b/seed_0", "status": "failed", "error": "ValueError: bad input for b/seed_0"}
    assert res["d/seed_0"]["status"] == "failed" and "not a result dict" in res["d/seed_0"]["error"]
    assert res["e/seed_0"]["status"] == "done"
    assert sorted(seen) == sorted(res)  # every result reported as it arrived


@pytest.mark.slow
def test_local_subprocesses_collect_results_errors_and_dead_jobs(tmp_path, monkeypatch):
    from submitit.local.local import LocalJob

    monkeypatch.setattr(LocalJob, "_results_timeout_s", 0)  # submitit waits 15 s for a slow shared FS
    jobs = [("ok", square, ("ok", 5)), ("raises", boom, ("raises",)), ("dies", exit_hard, ("dies",))]
    cfg = LauncherCfg(cluster="local", gpus_per_node=0, cpus_per_task=1, timeout_min=2, poll_s=0.2)
    res = submit_runs(jobs, cfg, folder=tmp_path, log=lambda *a: None)
    assert res["ok"]["status"] == "done" and res["ok"]["value"] == 25
    assert res["raises"]["error"] == "ValueError: bad input for raises"
    assert res["dies"]["status"] == "failed"
    assert res["dies"]["error"].startswith("job ") and "died without a result" in res["dies"]["error"]
    assert str(tmp_path) in res["dies"]["error"]  # points at its logs


class _FakeJob:
    def __init__(self, log, key, fn, args, polls):
        self.log, self.key, self.fn, self.args, self.polls, self.job_id = log, key, fn, args, polls, key

    def done(self):
        self.polls -= 1
        return self.polls <= 0

    def result(self):
        self.log.append(("end", self.key))
        return self.fn(self.key, *self.args)


class _FakeExecutor:
    cluster = "local"

    def __init__(self):
        self.log = []

    def submit(self, guarded, key, fn, args):
        self.log.append(("start", key))
        return _FakeJob(self.log, key, fn, args, polls=2)


def test_max_parallel_throttles_local_submission(tmp_path, monkeypatch):
    ex = _FakeExecutor()
    monkeypatch.setattr("rbctl.sweep.launchers.make_executor", lambda cfg, folder: ex)
    jobs = [(f"r{i}", lambda key, x: square(key, x), (i,)) for i in range(5)]
    res = submit_runs(jobs, LauncherCfg(cluster="local", max_parallel=2, poll_s=0.001), folder=tmp_path)
    assert [r["value"] for r in res.values()] == [0, 1, 4, 9, 16]
    running = peak = 0
    for kind, _ in ex.log:
        running += 1 if kind == "start" else -1
        peak = max(peak, running)
    assert peak == 2


def test_slurm_options_reach_the_sbatch_script(tmp_path, monkeypatch):
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "srun").write_text("#!/bin/sh\nexit 1\n")
    (fake_bin / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake_bin}{os.pathsep}{os.environ['PATH']}")
    cfg = LauncherCfg(cluster="slurm", partition="gpu", account="lab", gpus_per_node=1, cpus_per_task=8,
                      mem_gb=64, timeout_min=720, max_parallel=4, setup=["source .venv/bin/activate"],
                      slurm_additional={"gres": "gpu:h100:1"})
    ex = make_executor(cfg, tmp_path / "submitit")
    script = ex._executor._make_submission_file_text("python -m job", "uid")
    for line in ["--partition=gpu", "--account=lab", "--gpus-per-node=1", "--cpus-per-task=8", "--mem=64GB",
                 "--time=720", "--gres=gpu:h100:1", "--job-name=rbctl"]:
        assert f"#SBATCH {line}" in script
    assert "source .venv/bin/activate" in script
    assert ex._executor.max_num_timeout == 3  # requeues after timeout/preemption
    assert ex._executor.parameters["array_parallelism"] == 4


def test_slurm_without_srun_is_a_user_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no srun anywhere
    with pytest.raises(UserError, match="launcher.cluster 'slurm'"):
        make_executor(LauncherCfg(cluster="slurm"), tmp_path)


def test_without_submitit_a_user_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "submitit", None)  # import submitit raises ImportError
    with pytest.raises(UserError, match="pip install submitit"):
        submit_runs([("a", square, ("a", 1))], {"cluster": "debug"}, folder=tmp_path)


def test_launcher_section_is_validated():
    with pytest.raises(Exception, match="partiton"):
        LauncherCfg.model_validate({"partiton": "gpu"})
    with pytest.raises(ValueError, match="unique"):
        submit_runs([("a", square, ("a", 1)), ("a", square, ("a", 2))], {"cluster": "debug"}, folder=Path("unused"))


def test_timeout_or_preemption_requeues_the_same_call_and_lets_systemexit_through():
    from rbctl.sweep.launchers import _Guarded

    g = _Guarded()
    again = g.checkpoint("k", square, ("k", 2))  # what submitit calls on USR2 before requeueing
    assert again.function is g and again.args == ("k", square, ("k", 2))
    assert again.result()["value"] == 4  # the requeued job runs the same (resuming) call
    with pytest.raises(SystemExit):  # submitit exits a requeued job this way: it must not become a result
        g("k", sys.exit, (1,))


# --- the local launcher (rbctl.sweep.local): workers kept across runs --------------------------

def pid_of(key, queue):
    queue.put((key, "step", 1, {"reward": 0.0, "entropy": 0.0}))
    return {"key": key, "status": "done", "error": None, "pid": os.getpid()}


def dies(key, queue):
    os._exit(3)  # the worker process dies mid-run (as when the kernel kills it)


class _Silent:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def add(self, key, total):
        pass

    def started(self, key):
        pass

    def step(self, key, step, info):
        pass

    def finished(self, key, res):
        pass

    def tick(self):
        pass


def test_local_workers_are_kept_across_runs_and_a_dead_one_fails_only_its_run():
    from rbctl.sweep.local import execute

    todo = [("a/seed_0", 1, (pid_of, "a/seed_0")), ("a/seed_1", 1, (pid_of, "a/seed_1")),
            ("b/seed_0", 1, (dies, "b/seed_0")), ("b/seed_1", 1, (pid_of, "b/seed_1"))]
    seen = {}
    execute(_call, [(k, s, a) for k, s, a in todo], 1, lambda k, r: seen.__setitem__(k, r), _Silent())
    assert list(seen) == [k for k, _, _ in todo]  # one worker: in order
    assert seen["a/seed_0"]["pid"] == seen["a/seed_1"]["pid"] != os.getpid()  # the second run reused the worker
    assert seen["b/seed_0"] == {"key": "b/seed_0", "status": "failed",
                                "error": "worker process exited with code 3 without a result"}
    assert seen["b/seed_1"]["status"] == "done"
    assert seen["b/seed_1"]["pid"] != seen["a/seed_0"]["pid"]  # a fresh worker after the dead one


def _call(fn, key, queue):
    return fn(key, queue)


def test_a_run_marked_alone_gets_a_worker_of_its_own():
    from rbctl.sweep.local import execute

    keys = ["a/seed_0", "g/seed_0", "a/seed_1"]
    seen = {}
    execute(_call, [(k, 1, (pid_of, k)) for k in keys], 1, lambda k, r: seen.__setitem__(k, r), _Silent(),
            alone={"g/seed_0"})
    assert all(seen[k]["status"] == "done" for k in keys)
    # the alone run did not reuse the first worker, and its own worker ended with it: the run after
    # it went back to the first worker
    pid = {k: seen[k]["pid"] for k in keys}
    assert pid["a/seed_0"] == pid["a/seed_1"] != pid["g/seed_0"]


def env_of(key, queue):
    """A run that holds its worker 1 s and reports the device environment it was given."""
    import time

    start = time.monotonic()
    time.sleep(1.0)
    env = {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "LOCAL_RANK", "RANK", "WORLD_SIZE", "MASTER_PORT")}
    return {"key": key, "status": "done", "error": None, "env": env, "span": (start, time.monotonic())}


def test_gpu_runs_of_a_local_sweep_get_one_gpu_each(monkeypatch):
    """`--jobs 3` with two visible GPUs: each GPU run's worker sees one GPU of its own as device 0 of
    a single process (vLLM's LOCAL_RANK 0, no inherited MASTER_PORT), and at most two run at once."""
    from rbctl.sweep.local import execute

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    monkeypatch.setenv("LOCAL_RANK", "1")  # a launcher started under torchrun or Slurm
    monkeypatch.setenv("MASTER_PORT", "29500")
    keys = ["g/seed_0", "g/seed_1", "g/seed_2"]
    seen = {}
    execute(_call, [(k, 1, (env_of, k)) for k in keys], 3, lambda k, r: seen.__setitem__(k, r), _Silent(),
            alone=set(keys))
    assert all(seen[k]["status"] == "done" for k in keys)
    gpus = [seen[k]["env"]["CUDA_VISIBLE_DEVICES"] for k in keys]
    assert sorted(gpus[:2]) == ["3", "5"] and gpus[2] in ("3", "5")
    for k in keys:
        assert seen[k]["env"] | {"CUDA_VISIBLE_DEVICES": None} == {
            "CUDA_VISIBLE_DEVICES": None, "LOCAL_RANK": "0", "RANK": "0", "WORLD_SIZE": "1", "MASTER_PORT": None}
    # the third run waited for a GPU: it started after one of the first two ended
    spans = {k: seen[k]["span"] for k in keys}
    assert spans["g/seed_2"][0] >= min(spans["g/seed_0"][1], spans["g/seed_1"][1])
