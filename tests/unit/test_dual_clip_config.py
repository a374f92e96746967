"""`algo.clip_ratio_c`, the dual clip of the PPO loss (docs/method.md, "Setting"): its default, its
bounds, and how a run directory of a release without it reads (as trained: no dual clip)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rbctl.config.methods import method_params
from rbctl.config.train import load_train_config, read_run_config
from rbctl.errors import UserError
from rbctl.store.rundir import CONFIG, METRICS
from rbctl.train.rundir import check_run_dir

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_the_dual_clip_is_verls_3_by_default_null_turns_it_off_and_c_must_exceed_1():
    assert load_train_config(None).algo.clip_ratio_c == 3.0
    a = load_train_config(None, ["algo.clip_ratio_c=null"]).algo
    assert a.clip_ratio_c is None and method_params(a, "clip")["clip_ratio_c"] is None
    for bad in ("1.0", "0.5"):
        with pytest.raises(UserError) as e:
            load_train_config(None, [f"algo.clip_ratio_c={bad}"])
        assert "algo.clip_ratio_c" in str(e.value) and "\n" not in str(e.value)
    # only the PPO clip takes it (verl's clip_cov, kl_cov and gspo have no dual clip)
    for loss in ("clip_cov", "kl_cov", "gspo"):
        assert "clip_ratio_c" not in method_params(load_train_config(None, [f"algo.policy_loss={loss}"]).algo, loss)


def _old_run(tmp_path: Path, name: str) -> Path:
    """A run directory of a release without the dual clip: config.yaml dumps every field but
    algo.clip_ratio_c, and one metrics line (the run got somewhere)."""
    d = load_train_config(CONFIGS / "quickstart.yaml").model_dump(mode="json")
    d["algo"].pop("clip_ratio_c")
    run = tmp_path / name
    run.mkdir()
    (run / CONFIG).write_text(yaml.safe_dump(d))
    (run / METRICS).write_text('{"step": 1}\n')
    return run


def test_a_run_of_a_release_without_the_dual_clip_reads_as_trained_and_resumes_only_without_it(tmp_path):
    run = _old_run(tmp_path, "old")
    assert read_run_config(run / CONFIG).algo.clip_ratio_c is None  # it trained without one, not at today's 3
    off = load_train_config(CONFIGS / "quickstart.yaml", ["algo.clip_ratio_c=null"])
    assert check_run_dir(off, run, force=False).algo.clip_ratio_c is None
    # today's default would change the loss of the steps still to run: refused as a config change
    with pytest.raises(UserError, match=r"different config \(algo.clip_ratio_c"):
        check_run_dir(load_train_config(CONFIGS / "quickstart.yaml"), run, force=False)
    # a config written by this release keeps its value
    new = load_train_config(CONFIGS / "quickstart.yaml", ["algo.clip_ratio_c=2.5"])
    (run / CONFIG).write_text(yaml.safe_dump(new.model_dump(mode="json")))
    assert read_run_config(run / CONFIG).algo.clip_ratio_c == 2.5
