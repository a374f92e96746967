"""Shared test helpers: the shared benchmark folder, a tiny random Llama, an isolated cache for the
built-in policy's warm start, and a tiny training config.

The tests are laid out by kind:
- `tests/unit/`: pure functions and single components (estimators, losses, metrics, statistics,
  the grader, the task generators, the planner, the sampling loop); fast;
- `tests/integration/`: the trainer, sweeps, evaluation and reports on the built-in tasks, the CLI,
  the integrations and the vLLM stand-in;
- `tests/system/`: process kills and faults, packaging, the real model (SmolLM2).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]  # the repository root

# The benchmark files shared beside the checkout (../shared/benchmarks); tests that need them skip
# with this reason where they are absent.
SHARED_BENCHMARKS = Path(os.environ.get("RBCTL_SHARED_BENCHMARKS", Path(__file__).resolve().parents[2] / "shared" / "benchmarks"))
SHARED_MISSING = f"shared benchmark files not found in {SHARED_BENCHMARKS} (set RBCTL_SHARED_BENCHMARKS)"


def tiny_llama(vocab_size: int, *, layers: int = 2, seed: int | None = 0, **config):
    """A random Llama small enough for any test: hidden 16, 2 heads, `layers` layers. `config`
    overrides or adds LlamaConfig fields (token ids, initializer_range, tie_word_embeddings...).
    The weights are drawn after `torch.manual_seed(seed)` (seed None: the current RNG state)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(**{"vocab_size": vocab_size, "hidden_size": 16, "intermediate_size": 32,
                         "num_hidden_layers": layers, "num_attention_heads": 2, "num_key_value_heads": 2,
                         "max_position_embeddings": 64, **config})
    if seed is not None:
        torch.manual_seed(seed)
    return LlamaForCausalLM(cfg)


@pytest.fixture(scope="session")
def rbctl_cache(tmp_path_factory) -> Path:
    """Warm starts built by tests go to a temporary cache, never the user's."""
    path = tmp_path_factory.mktemp("rbctl_cache")
    old = os.environ.get("RBCTL_CACHE")
    os.environ["RBCTL_CACHE"] = str(path)
    yield path
    if old is None:
        os.environ.pop("RBCTL_CACHE", None)
    else:
        os.environ["RBCTL_CACHE"] = old


# A small task and a short warm start (~10 s on 2 cores): 1–2 hops over 4 letters, so the
# briefly trained policy is right often enough that groups are mixed and advantages nonzero.
TINY_TRAIN = {
    "seed": 0,
    "steps": 4,
    "threads": 1,
    "kappa_eff_every": 1,
    "save_every": 2,
    "sample_every": 1,
    "model": {"name": "builtin", "device": "cpu"},
    "data": {"source": "builtin", "builtin": {"num_keys": 4, "min_hops": 1, "max_hops": 2, "train_size": 256,
                                              "test_size": 32, "warm_start_steps": 300}},
    "rollout": {"prompts_per_step": 4, "group_size": 4, "max_new_tokens": 10},
    "algo": {"estimator": "grpo", "log_kl": True},
    "optim": {"lr": 1e-3},
    "eval": {"every": 0},
}


@pytest.fixture
def benchmark_data(tmp_path, monkeypatch) -> Path:
    """A data dir (RBCTL_DATA_DIR) holding a one-problem file of every registered competition benchmark,
    so that a config evaluating on them (the paper recipes) passes the start's data check offline."""
    from rbctl.tasks.benchmarks import BENCHMARKS

    folder = tmp_path / "benchmark_data"
    folder.mkdir()
    for bench in BENCHMARKS.values():
        if bench.local_file:
            (folder / bench.local_file).write_text('{"id": "1", "problem": "1 + 1?", "answer": "2"}\n')
    monkeypatch.setenv("RBCTL_DATA_DIR", str(folder))
    return folder


@pytest.fixture
def tiny_config(rbctl_cache):
    import copy

    from rbctl.config.train import TrainConfig

    def make(**overrides):
        from rbctl.config.base import apply_overrides

        data = apply_overrides(copy.deepcopy(TINY_TRAIN), [f"{k.replace('__', '.')}={v}" for k, v in overrides.items()])
        return TrainConfig.model_validate(data)

    return make


@pytest.fixture
def trainers(monkeypatch):
    """Every Trainer that `rbctl.train.loop.train` builds, in order."""
    from rbctl.train import loop
    from rbctl.train.trainer import Trainer

    made: list = []

    class Recording(Trainer):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            made.append(self)

    monkeypatch.setattr(loop, "Trainer", Recording)
    return made


def cli_options() -> dict[str, set[str]]:
    """Every rbctl command and the option names it takes."""
    import typer

    from rbctl.cli import app

    group = typer.main.get_command(app)
    return {name: {o for p in cmd.params for o in p.opts if o.startswith("-")} for name, cmd in group.commands.items()}


def run_with_methods(module: str, script: str, *args: str) -> dict:
    """Run ``python -c script *args`` in a fresh interpreter that registers the test plug-in ``module``
    (RBCTL_METHODS), and return the JSON object its last line prints."""
    env = {**os.environ, "RBCTL_METHODS": module, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", script, *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


class StopAt:
    """Wraps `HFEngine.generate_calls`: Ctrl-C before generation call `k` (0-based, counted over every
    call it wraps; a merged run of calls is stopped at call k's result) is graded."""

    def __init__(self, monkeypatch, k: int):
        from rbctl.rollout import hf

        self.calls, real = 0, hf.HFEngine.generate_calls

        def generate_calls(engine, calls, progress=None):
            for out in real(engine, calls, progress):
                if self.calls == k:
                    raise KeyboardInterrupt
                self.calls += 1
                yield out

        monkeypatch.setattr(hf.HFEngine, "generate_calls", generate_calls)
