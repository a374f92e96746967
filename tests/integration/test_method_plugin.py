"""A method added in a module of its own (tests/plugins/first_tokens.py, named in RBCTL_METHODS) is
trained, labelled, validated and documented without any other edit. Run in a fresh interpreter,
since the schema is built from the registry when rbctl.config is first imported."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import REPO, run_with_methods

SCRIPT = r'''
import copy, json, sys
from pathlib import Path
from rbctl.config.base import apply_overrides
from rbctl.config.sweep import arm_variant
from rbctl.config.train import TrainConfig, load_train_config
from rbctl.errors import UserError
from rbctl.train.loop import train
from scripts.config_doc import reference_markdown
from scripts.metrics_doc import reference_markdown as metrics_markdown
from tests.conftest import TINY_TRAIN

out = {}
try:
    load_train_config(None, ["algo.first_tokens.n=0"])
except UserError as e:
    out["refused"] = str(e)
cfg = TrainConfig.model_validate(apply_overrides(copy.deepcopy(TINY_TRAIN), ["steps=2", "algo.first_tokens.n=3",
                                                                              "eval.every=0"]))
out["variant"] = arm_variant(cfg.algo.model_dump(), cfg.rollout.model_dump())
run = Path(sys.argv[1])
train(cfg, run, progress=False, log=lambda *a, **k: None)
out["lines"] = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
out["config_doc"] = "algo.first_tokens.n" in reference_markdown()
out["metrics_doc"] = "tokens/frac_first_tokens" in metrics_markdown()
print(json.dumps(out))
'''


def test_a_method_in_its_own_module_is_trained_labelled_validated_and_documented(tmp_path):
    out = run_with_methods("tests.plugins.first_tokens", SCRIPT, str(tmp_path / "run"))
    assert "algo.first_tokens.n" in out["refused"] and "greater than or equal to 1" in out["refused"]
    assert out["variant"] == "first_tokens"
    fracs = [line["tokens/frac_first_tokens"] for line in out["lines"]]
    assert len(fracs) == 2
    # 3 of each response's tokens are kept (fewer for a shorter response): a fraction in (0, 1]
    assert all(0.0 < f <= 1.0 for f in fracs)
    assert out["config_doc"] and out["metrics_doc"]


def test_without_the_module_the_method_is_unknown():
    env = {k: v for k, v in os.environ.items() if k != "RBCTL_METHODS"}
    code = ("from rbctl.config.train import load_train_config\n"
            "try:\n    load_train_config(None, ['algo.first_tokens.n=2'])\nexcept Exception as e:\n    print(e)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env={**env, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=120)
    assert "unknown config key 'algo.first_tokens'" in proc.stdout
