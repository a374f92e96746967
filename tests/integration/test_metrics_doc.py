"""The metrics reference is one table in code (rbctl/train/metric_names.py): docs/metrics.md is
generated from it and current, every key a run logs (metrics.jsonl and the periodic eval.jsonl) is
in it, and every function it names exists."""

from __future__ import annotations

import importlib
import json

import pytest

from rbctl.train.metric_names import EVAL_METRICS, STEP_METRICS, Metric
from tests.conftest import REPO

ROOT = REPO


def documented(key: str, table) -> bool:
    return any(m.matches(key) for m in table)


def test_docs_metrics_md_is_current():
    from scripts.metrics_doc import reference_markdown

    assert (ROOT / "docs" / "metrics.md").read_text() == reference_markdown(), \
        "regenerate it: python scripts/metrics_doc.py > docs/metrics.md"


def test_every_function_the_table_names_exists():
    missing = []
    for m in STEP_METRICS + EVAL_METRICS:
        parts = m.source.split(".")
        for i in range(len(parts) - 1, 0, -1):  # the longest importable module, then attributes
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                continue
            try:
                for attr in parts[i:]:
                    obj = getattr(obj, attr)
            except AttributeError:
                missing.append(f"{m.key}: {m.source}")
            else:
                assert callable(obj), m.source
            break
        else:
            missing.append(f"{m.key}: {m.source} (no module)")
    assert not missing, "functions named in rbctl/train/metric_names.py that do not exist:\n" + "\n".join(missing)


def test_keys_are_unique_and_patterns_match_one_segment():
    for table in (STEP_METRICS, EVAL_METRICS):
        keys = [m.key for m in table]
        assert len(keys) == len(set(keys))
    label = Metric("label/<name>/<value>", "", "x")
    assert label.matches("label/strategy/walk") and not label.matches("label/strategy") \
        and not label.matches("label/a/b/c")
    passk = Metric("pass@<k>", "", "x")
    assert passk.matches("pass@16") and not passk.matches("pass@") and not passk.matches("maj@4")
    assert Metric("avg@n", "", "x").matches("avg@n") and not Metric("avg@n", "", "x").matches("avg@8")


def test_every_key_a_quickstart_run_logs_is_documented(rbctl_cache, tmp_path):
    from rbctl.config.presets import preset
    from rbctl.config.train import load_train_config
    from rbctl.train.loop import train
    from tests.conftest import TINY_TRAIN

    # configs/quickstart.yaml on the tests' small task (its warm start is shared with the other
    # tests), 2 steps with a periodic evaluation at steps 0, 1 and 2
    small = [f"data.builtin.{k}={v}" for k, v in TINY_TRAIN["data"]["builtin"].items()]
    cfg = load_train_config(preset("quickstart.yaml"), small + [
        "steps=2", "rollout.prompts_per_step=4", "rollout.group_size=4", "eval.every=1", "eval.limit=4", "eval.n=2"])
    train(cfg, tmp_path / "run", progress=False, log=lambda *a: None)
    steps = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    evals = [json.loads(x) for x in (tmp_path / "run" / "eval.jsonl").read_text().splitlines()]
    assert len(steps) == 2 and [e["step"] for e in evals] == [0, 1, 2]
    logged = {k for r in steps for k in r}
    assert {"rollout/generated", "rollout/logprob_diff", "time/eval_s"} <= logged  # those the old page left out
    assert [k for k in sorted(logged) if not documented(k, STEP_METRICS)] == []
    assert [k for k in sorted({k for r in evals for k in r}) if not documented(k, EVAL_METRICS)] == []


def test_lr_is_the_rate_of_the_steps_own_update(tiny_config, tmp_path):
    from rbctl.train.loop import train

    # warm-up over 4 steps: step s (from 1) updates with lr·s/4 (rbctl.train.optim.lr_factor(s − 1));
    # the schedule steps after the update, so reading lr afterwards would log the next step's rate
    out = train(tiny_config(steps=3, optim__warmup_steps=4, optim__lr=1e-3), tmp_path / "run", progress=False,
                log=lambda *a: None)
    assert [m["lr"] for m in out] == [pytest.approx(2.5e-4), pytest.approx(5e-4), pytest.approx(7.5e-4)]
