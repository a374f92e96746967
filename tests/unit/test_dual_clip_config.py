"""`algo.clip_ratio_c`, the dual clip of the PPO loss (docs/method.md, "Setting"): its default and
its bounds."""

from __future__ import annotations

import pytest

from rbctl.config.methods import method_params
from rbctl.config.train import load_train_config
from rbctl.errors import UserError


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
