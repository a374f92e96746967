"""A method that needs more than its kind's arguments (tests/plugins/entropy_ref_loss.py: a policy loss
needing the per-token entropy and the reference's log-probs, declared in its record's `needs`) is
trained, labelled, validated and documented with no package edit: the trainer computes what it needs
(a reference kept although `algo.log_kl` is false; the entropy of every epoch) and hands it over in
one context. Run in a fresh interpreter, since the schema is built from the registry when
rbctl.config is first imported."""

from __future__ import annotations

from tests.conftest import run_with_methods

SCRIPT = r'''
import copy, dataclasses, functools, importlib, json, sys
from pathlib import Path
from rbctl.algo import registry
from rbctl.config.base import apply_overrides
from rbctl.config.sweep import arm_variant
from rbctl.config.train import TrainConfig, load_train_config
from rbctl.errors import UserError
from rbctl.train.loop import train
from rbctl.train.objective import keeps_reference
from tests.conftest import TINY_TRAIN


def generator(name):  # the doc generators (docs/config.md, docs/metrics.md)
    return importlib.import_module(f"scripts.{name}").reference_markdown


seen = []  # what each call of the loss received
record = registry.METHODS["entropy_ref"]
inner = record.fn


@functools.wraps(inner)  # the same signature: the same settings and needs
def spy(*a, entropy, ref_logp, **k):
    seen.append((entropy is not None and not entropy.requires_grad, ref_logp is not None,
                 tuple(entropy.shape) == tuple(a[0].shape) == tuple(ref_logp.shape)))
    return inner(*a, entropy=entropy, ref_logp=ref_logp, **k)


registry.METHODS["entropy_ref"] = registry.POLICY_LOSSES["entropy_ref"] = dataclasses.replace(record, function=spy)

out = {}
try:
    load_train_config(None, ["algo.policy_loss=entropy_ref", "algo.entropy_ref.max_drift=0"])
except UserError as e:
    out["refused"] = str(e)
cfg = TrainConfig.model_validate(apply_overrides(copy.deepcopy(TINY_TRAIN), [
    "steps=2", "algo.policy_loss=entropy_ref", "algo.entropy_ref.coef=0.05", "algo.log_kl=false", "algo.kl_coef=0",
    "algo.ppo_epochs=2", "eval.every=0"]))
out["keeps_reference"] = keeps_reference(cfg.algo)
out["variant"] = arm_variant(cfg.algo.model_dump(), cfg.rollout.model_dump())
run = Path(sys.argv[1])
train(cfg, run, progress=False, log=lambda *a, **k: None)
out["lines"] = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
out["seen"] = seen
out["config_doc"] = "algo.entropy_ref.max_drift" in generator("config_doc")()
out["metrics_doc"] = "policy_loss/frac_near_ref" in generator("metrics_doc")()
print(json.dumps(out))
'''


def test_a_method_that_needs_entropy_and_reference_logprobs_trains_with_no_package_edit(tmp_path):
    out = run_with_methods("tests.plugins.entropy_ref_loss", SCRIPT, str(tmp_path / "run"))
    assert "algo.entropy_ref.max_drift" in out["refused"] and "greater than 0" in out["refused"]
    assert out["keeps_reference"]  # the loss needs the reference: kept with log_kl false
    assert out["variant"] == "entropy_ref"
    # every micro-batch of both epochs got a no-gradient entropy and the reference's log-probs, of its shape
    assert out["seen"] and all(all(call) for call in out["seen"])
    lines = out["lines"]
    assert [line["step"] for line in lines] == [1, 2]
    for line in lines:
        assert 0.0 < line["policy_loss/frac_near_ref"] <= 1.0
        assert line["kl"] is not None  # the reference kept for the loss also gives the logged KL
        assert line["nonfinite/skipped"] == 0
    assert out["config_doc"] and out["metrics_doc"]
