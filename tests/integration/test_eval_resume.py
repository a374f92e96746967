"""An evaluation keeps what it computed: samples appended as they are graded, an interrupted
evaluation resumed to the result of an uninterrupted one, the output folder checked before the
first sample, and a failed write explained by its cause (permissions or space)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rbctl.config.eval import build_config
from rbctl.errors import UserError
from rbctl.eval.pipeline import evaluate_policy
from rbctl.rollout.models import LoadedPolicy
from tests.conftest import StopAt

TIMING = ("time_s", "tokens_per_s")


@pytest.fixture(scope="module")
def tiny() -> LoadedPolicy:
    from tests.integration.test_evaluate import tiny_model_and_tokenizer

    model, tok = tiny_model_and_tokenizer()
    return LoadedPolicy(model=model, tokenizer=tok, source="tiny", builtin="links")


def _cfg():  # 12 problems, 3 samples each, 2 prompts per call (6 sequences): 6 calls, each seeded seed + c
    return build_config(benchmarks=["builtin"], n=3, limit=12, temperature=1.0, max_new_tokens=6, batch_size=6, seed=5)


def _same(summary: dict) -> dict:
    """A summary but what differs between two uninterrupted evaluations alike: the timings, and the
    default hf batch bound, which follows the memory free at the time (it bounds calls, whose
    prompts per call are the same here)."""
    out = {k: v for k, v in summary.items() if k not in TIMING}
    out["protocol"] = {k: v for k, v in summary["protocol"].items() if k != "max_batch_tokens"}
    return out


def _summary(path: Path) -> dict:
    return _same(json.loads(path.read_text()))


def test_an_interrupted_evaluation_resumes_to_the_uninterrupted_result(tiny, tmp_path, monkeypatch):
    straight = evaluate_policy(tiny, _cfg(), tmp_path / "straight")["builtin"]
    stop = StopAt(monkeypatch, 4)
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        evaluate_policy(tiny, _cfg(), out, resume=True)
    bench = out / "builtin"
    kept = [json.loads(x) for x in (bench / "samples.jsonl").read_text().splitlines()]
    assert len(kept) == 4 * 2 * 3 and not (bench / "summary.json").exists()  # 4 calls × 2 prompts × n=3, graded
    assert (bench / "partial.json").is_file()
    # a torn line of the 5th call, as a kill mid-append leaves it
    with open(bench / "samples.jsonl", "a") as f:
        f.write('{"id": "x", "sam')
    monkeypatch.undo()
    stop.calls = 0
    log: list[str] = []
    resumed = evaluate_policy(tiny, _cfg(), out, resume=True, log=log.append)["builtin"]
    assert log == [f"builtin: resuming in {bench}: 8 of 12 problems already graded"]
    assert _same(resumed) == _same(straight)
    assert (bench / "samples.jsonl").read_bytes() == (tmp_path / "straight" / "builtin" / "samples.jsonl").read_bytes()
    assert _summary(bench / "summary.json") == _summary(tmp_path / "straight" / "builtin" / "summary.json")
    assert not (bench / "partial.json").exists()
    # complete with this protocol: a rerun keeps it, another protocol evaluates it again
    log.clear()
    again = evaluate_policy(tiny, _cfg(), out, resume=True, log=log.append)["builtin"]
    assert again == resumed and log == [f"builtin: already evaluated in {bench} with this protocol; kept"]


def test_a_partial_evaluation_of_another_protocol_starts_over_with_a_notice(tiny, tmp_path, monkeypatch):
    StopAt(monkeypatch, 2)
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        evaluate_policy(tiny, _cfg(), out, resume=True)
    monkeypatch.undo()
    log: list[str] = []
    other = _cfg().model_copy(update={"temperature": 0.5})
    got = evaluate_policy(tiny, other, out, resume=True, log=log.append)["builtin"]
    assert log == [f"notice: the partial evaluation in {out / 'builtin'} was made with another protocol.temperature; "
                   "evaluating builtin from the start"]
    fresh = evaluate_policy(tiny, other, tmp_path / "fresh")["builtin"]
    assert _same(got) == _same(fresh)


def test_without_resume_an_evaluation_starts_over(tiny, tmp_path, monkeypatch):
    """Evaluation during training (resume False) never reuses samples of an earlier attempt."""
    StopAt(monkeypatch, 2)
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        evaluate_policy(tiny, _cfg(), out)
    monkeypatch.undo()
    log: list[str] = []
    evaluate_policy(tiny, _cfg(), out, log=log.append)
    assert log == [] and len((out / "builtin" / "samples.jsonl").read_text().splitlines()) == 12 * 3


def test_the_output_folder_is_refused_before_anything_when_it_lacks_space(tmp_path, monkeypatch):
    from rbctl.store import atomic

    monkeypatch.setattr(atomic.shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10 << 20, 9 << 20, 1 << 20))
    with pytest.raises(UserError) as e:
        atomic.check_writable(tmp_path / "ev", need_bytes=3 << 20)
    assert str(e.value) == (f"output directory {tmp_path / 'ev'} has 1.0 MiB free and needs about 3.0 MiB: "
                            "free space or write elsewhere")
    atomic.check_writable(tmp_path / "ev", need_bytes=1 << 20)  # enough: no error, nothing left behind
    assert list((tmp_path / "ev").iterdir()) == []


@pytest.mark.parametrize("code, advice", [
    # a path the user chose that cannot be written: bad input (exit 2), nothing to rerun as it is
    (errno.EACCES, "(EACCES); fix the permissions of that path or write elsewhere"),
    (errno.EPERM, "(EPERM); fix the permissions of that path or write elsewhere"),
    (errno.ENOSPC, "(ENOSPC); free space, then rerun the same command to resume"),
    (errno.EIO, "(EIO); check the disk, then rerun the same command to resume"),
])
def test_a_failed_write_is_explained_by_its_cause(code, advice, tmp_path, monkeypatch, capsys):
    from rbctl.cli import run
    import rbctl.report.render.report

    def fail(*a, **k):
        raise OSError(code, os.strerror(code), str(tmp_path / "report.md"))

    monkeypatch.setattr(rbctl.report.render.report, "build_report", fail)  # what rbctl report calls
    assert run(["report", str(tmp_path)]) == (2 if code in (errno.EACCES, errno.EPERM) else 1)
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {tmp_path / 'report.md'}: {os.strerror(code)} {advice}"]


# --- processes: Ctrl-C and a read-only output folder ----------------------------------------------


def _interruptible():
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a background shell's child inherits SIGINT ignored


@pytest.fixture
def run_dir(tmp_path) -> Path:
    """A run directory whose one checkpoint (step 7) holds a tiny random built-in policy."""
    from tests.integration.test_evaluate import _run_dir_with_checkpoint

    return _run_dir_with_checkpoint(tmp_path / "r", config=None)


def _eval_cmd(run_dir: Path, out: Path) -> list[str]:
    # 24 test problems × 64 samples, one prompt per call: 24 calls, the samples of each appended as it is
    # graded. --max-batch-tokens below one call's 64 × (prompt + 24) keeps each call its own batch (a tiny
    # model's calls otherwise sample as one, and all 24 are appended within milliseconds of the first)
    return [sys.executable, "-m", "rbctl", "eval", str(run_dir), "-b", "builtin", "--limit", "24", "--n", "64",
            "--temperature", "2.0", "--max-new-tokens", "24", "--batch-size", "64", "--max-batch-tokens", "1536",
            "--threads", "1", "--device", "cpu", "-o", str(out)]


@pytest.mark.slow
def test_sigint_to_eval_keeps_the_graded_samples_and_the_same_command_resumes_to_the_uninterrupted_result(
        run_dir, rbctl_cache, tmp_path):
    env = {**os.environ, "RBCTL_CACHE": str(rbctl_cache)}
    out, straight = tmp_path / "ev", tmp_path / "straight"
    cmd = _eval_cmd(run_dir, out)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_interruptible)
    samples = out / "builtin" / "samples.jsonl"
    deadline = time.time() + 240
    while not (samples.is_file() and samples.stat().st_size > 0):
        assert proc.poll() is None, proc.communicate()
        assert time.time() < deadline, "timed out"
        time.sleep(0.005)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    lines = [x for x in err.splitlines() if x.startswith("interrupted")]
    kept = len(samples.read_text().splitlines()) // 64
    assert 1 <= kept < 24 and not (out / "builtin" / "summary.json").exists()
    protocol = "n=64, temperature 2.0, top-p 0.95, at most 24 new tokens, seed 0, engine hf, first 24 problems"
    assert lines == [f"interrupted: kept {kept} of 24 builtin problems graded under {protocol} in {out}; resume with: "
                     "rbctl eval " + " ".join(cmd[4:])], err
    resumed = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    assert f"builtin: resuming in {out / 'builtin'}: {kept} of 24 problems already graded" in " ".join(resumed.stdout.split())
    done = subprocess.run(_eval_cmd(run_dir, straight), env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert _summary(out / "builtin" / "summary.json") == _summary(straight / "builtin" / "summary.json")
    assert samples.read_bytes() == (straight / "builtin" / "samples.jsonl").read_bytes()


def _read_only(path: Path) -> None:
    """Writes into `path` fail: chattr +i as root (EPERM: root ignores the mode bits), else mode 0o555 (EACCES)."""
    if os.geteuid() == 0:
        if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(path)]).returncode != 0:
            pytest.skip("running as root on a filesystem without chattr +i: no folder is read-only here")
    else:
        path.chmod(0o555)


def _writable(path: Path) -> None:
    if os.geteuid() == 0:
        subprocess.run(["chattr", "-i", str(path)], check=False)
    else:
        path.chmod(0o755)


@pytest.mark.slow
def test_a_read_only_output_folder_is_one_line_naming_it_before_the_first_sample(run_dir, rbctl_cache, tmp_path):
    out = tmp_path / "ro"
    out.mkdir()
    _read_only(out)
    try:
        env = {**os.environ, "RBCTL_CACHE": str(rbctl_cache)}
        res = subprocess.run(_eval_cmd(run_dir, out), env=env, capture_output=True, text=True, timeout=300)
    finally:
        _writable(out)
    code = "EPERM" if os.geteuid() == 0 else "EACCES"
    err = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(err) == 1, res.stderr
    assert err[0].startswith(f"error: output directory {out} is not writable: ") and f"({code})" in err[0], err
    assert err[0].endswith("fix the permissions of that path or write elsewhere"), err
    assert "avg@n" not in res.stdout and list(out.iterdir()) == []

