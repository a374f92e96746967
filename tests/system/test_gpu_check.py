"""scripts/gpu_check.py in its CPU mode (`--device cpu --tiny`): the check that waits for a GPU runs
here end to end, so it cannot rot."""

from __future__ import annotations

import pytest
import json

import torch

from rbctl.tools import gpu_check


@pytest.mark.slow
def test_the_gpu_check_runs_on_cpu_at_toy_sizes(tmp_path, capsys, rbctl_cache):
    assert gpu_check.main(["--device", "cpu", "--tiny", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    result = json.loads((tmp_path / "gpu_check.json").read_text())
    assert all(result["checks"].values()), result["checks"]
    assert result["resume_differences"] == [] and result["rerun_differences"] is None  # bit for bit, no rerun
    t = result["throughput"]
    # 2 prompts × 4 rollouts of 8 tokens (a random model never emits EOS among 512 ids... rarely)
    assert 0 < t["generated_tokens"] <= 64 and t["rollout_tokens_per_s"] > 0 and t["update_tokens_per_s"] > 0
    assert 0 < t["update_mfu"] < 1 and 0 < t["rollout_mfu"] < 1
    for what in ("rollout:", "update:", "peak memory", "resume: exact", "periodic evaluation: steps [0, 2, 3]"):
        assert what in out, what
    assert not torch.are_deterministic_algorithms_enabled()  # the caller's setting is restored


def test_the_peak_table_matches_device_names_in_order():
    def peak(name):
        return next(t for key, t in gpu_check.BF16_PEAK_TFLOPS if key in name)

    assert peak("NVIDIA H200") == peak("NVIDIA H100 80GB HBM3") == 989.0
    assert peak("NVIDIA H100 PCIe") == 756.0 and peak("NVIDIA A100-SXM4-80GB") == 312.0
    # Qwen3-0.6B's published sizes: 596M parameters with tied embeddings
    from transformers import Qwen3Config, Qwen3ForCausalLM

    with torch.device("meta"):
        model = Qwen3ForCausalLM(Qwen3Config(**gpu_check.QWEN3_0_6B))
    assert round(sum(p.numel() for p in model.parameters()) / 1e6) == 596
