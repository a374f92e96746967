"""scripts/gpu_check.py where no GPU is: `--dry-run` lists every check; on a CPU machine every check that
needs CUDA is skipped, never passed; and each check's own code runs on the CPU (gloo for the two-rank
ones, vLLM's weight sync against the stand-in), so that the first GPU run is not its first run."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest

from scripts import gpu_check
from scripts.gpu_checks import multi, single, vllm
from tests.conftest import REPO


def test_the_dry_run_lists_every_check_and_what_it_needs():
    out = subprocess.run([sys.executable, "-m", "scripts.gpu_check", "--dry-run"], cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    for i, c in enumerate(gpu_check.CHECKS, 1):
        assert f"{i:2d}. {c.name} [needs {c.needs}]: {c.covers}" in out.stdout


def test_on_a_cpu_machine_the_gpu_checks_are_skipped_never_passed(tmp_path, capsys):
    report = gpu_check.run_checks(tmp_path, cuda=False, gpus=0, budget_s=600)
    status = {c["check"]: c["status"] for c in report["checks"]}
    assert status.pop("versions") == "pass"  # the one check that needs nothing
    assert set(status.values()) == {"skipped: no CUDA"} and len(status) == len(gpu_check.CHECKS) - 1
    assert json.loads((tmp_path / "gpu_check.json").read_text())["checks"] == report["checks"]
    assert "kill and resume ............................ skipped: no CUDA" in capsys.readouterr().out


def test_what_a_check_is_skipped_for():
    by_name = {c.name: c for c in gpu_check.CHECKS}
    assert gpu_check.skip_reason(by_name["vLLM LoRA run"], cuda=True, gpus=1, has_vllm=False) == "vLLM not installed"
    assert gpu_check.skip_reason(by_name["FSDP2"], cuda=True, gpus=1, has_vllm=True) == "one GPU"
    assert gpu_check.skip_reason(by_name["FSDP2"], cuda=True, gpus=2, has_vllm=False) is None
    assert gpu_check.skip_reason(by_name["memory estimate"], cuda=False, gpus=0, has_vllm=True) == "no CUDA"


def test_out_of_time_skips_the_rest(tmp_path):
    report = gpu_check.run_checks(tmp_path, cuda=False, gpus=0, budget_s=-1.0)
    assert report["checks"][0]["status"].startswith("skipped: out of time")


# --- the vLLM weight-sync check against the stand-in -----------------------------------------------


def _standin_engine(monkeypatch, llm_cls):
    from rbctl.rollout import vllm as vllm_mod
    from rbctl.rollout.vllm import VLLMEngine
    from scripts.gpu_checks.models import TINY, build_model, tokenizer
    from tests.vllm_standin import StandInSamplingParams

    monkeypatch.setattr(vllm_mod, "_sampling_params_cls", lambda: StandInSamplingParams)
    model = build_model("qwen3", {**TINY, "tie_word_embeddings": True})
    engine = VLLMEngine(model, tokenizer(TINY["vocab_size"]), model_name_or_path="unused",
                        llm=llm_cls(copy.deepcopy(model)))
    return engine, model


def test_the_weight_sync_check_passes_when_vllm_takes_the_weights(monkeypatch):
    from tests.vllm_standin import StandInLLM

    engine, model = _standin_engine(monkeypatch, StandInLLM)
    ok, detail, figures = vllm.sync_rounds(engine, model, [[5, 6, 7], [8, 9]])
    assert ok, detail
    assert [sorted({t for toks in r for t in toks}) <= [10 + 2 * i, 11 + 2 * i] for i, r in enumerate(figures["tokens"])]


def test_the_weight_sync_check_fails_when_vllm_keeps_its_old_weights(monkeypatch):
    from tests.vllm_standin import StandInLLM

    class Deaf(StandInLLM):  # a weight sync that reaches nothing
        def _reload_weights(self, weights_iterator=None):
            list(weights_iterator)

    engine, model = _standin_engine(monkeypatch, Deaf)
    ok, detail, _ = vllm.sync_rounds(engine, model, [[5, 6, 7]])
    assert not ok and detail.startswith("sync 1: vLLM decoded") and "not the planted 10/11" in detail


# --- each check's code on the CPU -------------------------------------------------------------------


def _ctx(tmp_path, **env):
    import os

    return single.Context("cpu", tmp_path, env={**os.environ, **env})


@pytest.mark.slow
def test_lora_checkpointing_and_maze_dtype_checks_on_the_cpu(tmp_path):
    ok, detail, _ = single.lora_checkpointing(_ctx(tmp_path))
    assert ok and "largest relative gradient difference 0.0e+00" in detail  # float32: recomputation is exact
    assert single.maze_dtype(_ctx(tmp_path))[0]


@pytest.mark.slow
def test_the_kill_and_resume_check_on_the_cpu(tmp_path):
    ok, detail, figures = single.kill_and_resume(_ctx(tmp_path))
    assert ok, (detail, figures)
    assert figures == {"rerun_differences": [], "resume_differences": []}


@pytest.mark.slow
def test_the_memory_check_runs_its_run_on_the_cpu(tmp_path):
    ok, detail, figures = single.memory_estimate(_ctx(tmp_path))
    assert ok and detail.startswith("CPU: nothing measured") and figures["estimated_bytes"] > 0


@pytest.mark.slow
def test_the_two_rank_checks_on_gloo(tmp_path):
    for name, check in (("wait", multi.nccl_wait), ("ddp", multi.ddp_resume), ("fsdp", multi.fsdp)):
        (tmp_path / name).mkdir()
        ok, detail, _ = check(_ctx(tmp_path / name))
        assert ok, (name, detail)


@pytest.mark.slow
def test_the_sweep_check_hands_each_run_its_own_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")  # the launcher's GPUs (none is touched: the runs only report)
    ok, detail, _ = multi.sweep_gpus(_ctx(tmp_path))
    assert ok and "CUDA_VISIBLE_DEVICES 3" in detail and "CUDA_VISIBLE_DEVICES 5" in detail
