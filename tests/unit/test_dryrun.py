"""`dry_run`: the paper recipes and the quickstart planned offline, with hand-computed token and
FLOP counts; a stand-in Hugging Face cache for the "model and data cached" path. The network is
off (HF_HUB_OFFLINE=1 and sockets that refuse to connect): a lookup that tried it fails at once."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from rbctl.config.train import TrainConfig, load_train_config
from rbctl.train.dry_run import dry_run, step_cost
from rbctl.train.plan_inputs import ASSUMED_PROMPT_TOKENS
from tests.conftest import tiny_llama

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def refuse(*args, **kwargs):
        raise AssertionError("dry_run tried to open a network connection")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)


@pytest.fixture
def empty_cache(tmp_path) -> Path:
    return tmp_path / "hf_cache"  # does not even exist: nothing is cached


# exact parameter counts of the shipped architectures, counted on the meta device (tests/unit/test_footprint.py)
QWEN3_8B, LLAMA32_3B = 8_190_735_360, 3_212_749_824


def test_qwen3_8b_recipe_plan_offline(empty_cache):
    cfg = load_train_config(CONFIGS / "paper_qwen3_8b.yaml")
    plan = dry_run(cfg, source="paper_qwen3_8b.yaml", cache_dir=empty_cache)
    # tokens = P·G·(prompt + max_new) = 32·8·(200 + 8192) = 2,148,352
    # rollout 2·N·T = 2·8.19e9·2148352 = 3.519e16; training 6·N·T = 1.056e17; no reference (log_kl off);
    # κ_eff every 10: 2·N·T/10 = 3.519e15; total 1.443e17 per step, ×200 = 2.886e19
    for text in ["Qwen/Qwen3-8B: not in the local Hugging Face cache",
                 "N ≈ 8.19e+09 parameters (the shipped config.json fields (rbctl.train.footprint), counted on the meta device)",
                 "engine vllm; P = 32 prompts × G = 8 rollouts; max_new_tokens 8192",
                 "32·8·(200 + 8192) = 2.15e+06", "2·N·tokens = 3.52e+16", "6·N·tokens·ppo_epochs = 1.06e+17",
                 "reference 0.00e+00 + κ_eff 3.52e+15", "1.44e+17 FLOPs per step, 2.89e+19 for 200 steps",
                 # LoRA on the bf16 base: (8,190,735,360 · 2 + 174,587,904 · 4) B = 15.9 GiB
                 "weights     15.9 GiB  frozen base 8.19e+09 × 2 B + LoRA adapters 1.75e+08 × 4 B",
                 "memory/GPU    an estimate (rbctl.train.footprint), 1 × H100-80GB",
                 "dataset 'agentica-org/DeepScaleR-Preview-Dataset' is not cached",
                 "downloads ≈ 16.4 GB of bf16 weights"]:
        assert text in plan, text
    c = step_cost(cfg, ASSUMED_PROMPT_TOKENS, QWEN3_8B)
    assert c.tokens == 2_148_352
    assert c.total_flops == pytest.approx(2 * QWEN3_8B * 2_148_352 * (1 + 3 + 0 + 0.1))


def test_llama32_3b_recipe_plan_offline(empty_cache):
    cfg = load_train_config(CONFIGS / "paper_llama32_3b.yaml")
    plan = dry_run(cfg, cache_dir=empty_cache)
    # tokens = 64·8·(200 + 2048) = 1,150,976; reference forward logged (log_kl): 2·N·T = 7.40e15
    assert "64·8·(200 + 2048) = 1.15e+06" in plan
    assert "reference 7.40e+15" in plan
    # fp32 master weights 3,212,749,824 · 4 B = 12.0 GiB; the bf16 reference · 2 B = 6.0 GiB
    assert "weights     12.0 GiB  3.21e+09 × 4 B (float32 master)" in plan
    assert "reference   6.0 GiB  3.21e+09 × 2 B" in plan
    assert "N ≈ 3.21e+09 parameters (the shipped config.json fields" in plan
    c = step_cost(cfg, 200, LLAMA32_3B)
    # 2NT·(1 rollout + 3 training + 1 reference + 1/5 κ_eff)
    assert c.total_flops == pytest.approx(2 * LLAMA32_3B * 1_150_976 * 5.2)


def test_quickstart_plan_measures_prompts_with_the_builtin_tokenizer(empty_cache, rbctl_cache):
    cfg = load_train_config(CONFIGS / "quickstart.yaml")
    plan = dry_run(cfg, cache_dir=empty_cache)
    assert "builtin: the built-in links policy" in plan and "(the links task's model config, counted on the meta device)" in plan
    assert "measured: builtin template and the tokenizer on 256 records" in plan
    assert "engine hf; P = 16 prompts × G = 8 rollouts; max_new_tokens 20" in plan
    assert "warnings" not in plan  # nothing to download


def _fake_hub_cache(root: Path, tokenizer=None) -> tuple[Path, float]:
    """A Hub cache laid out as huggingface_hub writes it: a tiny Llama 'org/tiny' (config and
    tokenizer) and a dataset 'org/data' with one JSONL file. Returns (cache dir, exact N)."""
    from rbctl.tasks.builtin import build_tokenizer
    from rbctl.tasks.links import TaskSpec

    tok = tokenizer or build_tokenizer(TaskSpec())
    model = tiny_llama(len(tok), tie_word_embeddings=False)
    cfg = model.config
    n = float(sum(p.numel() for p in model.parameters()))
    snap = root / "models--org--tiny" / "snapshots" / ("a" * 40)
    snap.mkdir(parents=True)
    (root / "models--org--tiny" / "refs").mkdir()
    (root / "models--org--tiny" / "refs" / "main").write_text("a" * 40)
    cfg.save_pretrained(snap)
    tok.save_pretrained(snap)
    dsnap = root / "datasets--org--data" / "snapshots" / ("b" * 40)
    dsnap.mkdir(parents=True)
    (root / "datasets--org--data" / "refs").mkdir()
    (root / "datasets--org--data" / "refs" / "main").write_text("b" * 40)
    rows = [{"question": "abc" * (i + 1), "final": str(i)} for i in range(10)]
    (dsnap / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root, n


def _cached_cfg(**data) -> TrainConfig:
    return TrainConfig.model_validate({
        "model": {"name": "org/tiny", "device": "cpu"},
        "data": {"source": "org/data", "problem_field": "question", "answer_field": "final",
                 "template": "plain", "instruction": "", **data},
        "rollout": {"prompts_per_step": 2, "group_size": 4, "max_new_tokens": 10},
        "algo": {"log_kl": False}, "kappa_eff_every": 0,
    })


def test_cached_model_and_data_give_exact_n_and_measured_prompts(tmp_path):
    from rbctl.tasks.builtin import build_tokenizer
    from rbctl.tasks.links import TaskSpec

    tok = build_tokenizer(TaskSpec())
    cache, n = _fake_hub_cache(tmp_path / "hub", tok)
    plan = dry_run(_cached_cfg(), cache_dir=cache)
    assert "org/tiny: in the local Hugging Face cache" in plan
    assert f"N ≈ {n:.2e} parameters (counted from the cached config)" in plan
    assert "Hub dataset org/data [train], in the local Hugging Face cache (1 data files)" in plan
    assert "measured: plain template and the tokenizer on 10 records" in plan
    # plain template: "<problem>\n" (empty instruction) + <s>: 3(i+1) + 1 + 1 tokens, mean over i = 0..9
    # = 3·5.5 + 2 = 18.5 → "18 tokens per prompt" (printed rounded), T = 2·4·(18.5 + 10) = 228
    prompts = [len(tok("abc" * (i + 1) + "\n")["input_ids"]) for i in range(10)]
    assert sum(prompts) / 10 == 18.5
    c = step_cost(_cached_cfg(), 18.5, n)
    assert c.tokens == 228 and c.total_flops == pytest.approx(8 * n * 228)  # (2 + 6)·N·T, no extras
    assert "warnings" not in plan


def test_cached_data_without_tokenizer_uses_four_chars_per_token_and_flags_fields(tmp_path):
    cache, _ = _fake_hub_cache(tmp_path / "hub")
    cfg = _cached_cfg()
    cfg.model.name = "org/unknown-model"  # neither cached nor in the table of sizes
    plan = dry_run(cfg, cache_dir=cache)
    # plain prompts "abc"·(i+1) + "\n": mean 3·5.5 + 1 = 17.5 characters / 4 = 4.4 tokens
    assert "4 tokens per prompt (≈ 4 characters per token over 10 cached records; no cached tokenizer" in plan
    assert "parameter count of 'org/unknown-model' unknown" in plan and "unknown (no parameter count)" in plan
    bad = _cached_cfg(answer_field="nope")
    assert "data records lack field(s) nope; they have: question, final" in dry_run(bad, cache_dir=cache)


def test_the_cli_prints_the_plan_and_reports_bad_configs(tmp_path, capsys, monkeypatch):
    from rbctl.cli import run

    from rbctl.tasks import benchmarks

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(benchmarks, "hub_reachable", lambda timeout_s=0: False)  # offline, without waiting on a probe
    data = tmp_path / "benchmarks"
    data.mkdir()
    for name in ("amc23", "aime24"):  # the recipe's evaluations find their data here, as its run would
        (data / f"{name}.jsonl").write_text('{"id": "1", "problem": "1+1?", "answer": "2"}\n')
    monkeypatch.setenv("RBCTL_DATA_DIR", str(data))
    assert run(["train", str(CONFIGS / "paper_llama32_3b.yaml"), "--dry-run", "--set", "rollout.group_size=16"]) == 0
    assert "G = 16 rollouts" in capsys.readouterr().out
    # without the data the plan is printed, then refused as the start would refuse it
    monkeypatch.delenv("RBCTL_DATA_DIR")
    assert run(["train", str(CONFIGS / "paper_llama32_3b.yaml"), "--dry-run"]) == 2
    out, err = capsys.readouterr()
    assert "G = 16 rollouts" not in out and "P = 64 prompts" in out
    assert err.startswith("error: eval.benchmarks: no data for benchmark 'amc23' (no data dir given; the Hub is "
                          "unreachable)") and "; eval.benchmarks: no data for benchmark 'aime24'" in err
    assert "HF_HUB_OFFLINE" not in os.environ  # the plan's offline setting does not outlive it (it leaked into later tests)
    bad = tmp_path / "bad.yaml"
    bad.write_text("rollout:\n  group_sise: 4\n")
    assert run(["train", str(bad), "--dry-run"]) == 2
    assert "unknown config key 'rollout.group_sise'" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["paper_qwen3_8b", "paper_llama32_3b"])
def test_paper_sweeps_cover_every_baseline_with_and_without_budget(name):
    from rbctl.sweep.ablate import arm_metadata, load_sweep

    sweep, configs = load_sweep(CONFIGS / f"{name}_sweep.yaml")
    arms = {(m["baseline"], m["variant"]) for m in map(arm_metadata, configs.values())}
    assert arms == {(b, v) for b in ("grpo", "dr_grpo", "rloo", "reinforce_pp") for v in ("base", "budget")}
    e = sweep.eval
    assert (e.benchmarks, e.n, e.temperature, e.top_p, e.limit) == (["amc23", "aime24", "aime25"], 16, 0.6, 0.95, None)
    for f in (f"{name}.yaml", f"{name}_sweep.yaml"):
        first = (CONFIGS / f).read_text().splitlines()[0]
        assert first.startswith(("# rbctl train configs/", "# rbctl ablate configs/")), f  # headed by its command


def test_fsdp_plan_says_the_training_state_is_divided_over_the_processes(empty_cache):
    cfg = load_train_config(CONFIGS / "paper_llama32_3b.yaml", ["model.fsdp=true", "rollout.engine=hf", "algo.tis_cap=null",
                                                               "hardware.gpus=4"])
    plan = dry_run(cfg, cache_dir=empty_cache)
    # 3,212,749,824 · 4 B / 4 = 3.0 GiB of float32 master weights per GPU
    assert "weights     3.0 GiB  3.21e+09 × 4 B (float32 master) / 4 (FSDP)" in plan
    assert "AdamW       6.0 GiB  two moments, 3.21e+09 × 8 B / 4 (FSDP)" in plan
