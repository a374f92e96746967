"""The merge of a step's metric namespaces into one metrics.jsonl line (rbctl.train.step_metrics.merge)."""

from __future__ import annotations

import pytest

from rbctl.train.step_metrics import LINE_ORDER, merge
from rbctl.train.metric_names import STEP_METRICS


def test_merge_lays_the_namespaces_out_in_the_line_order_and_the_losses_statistics_last():
    rollouts = {"reward/mean": 0.5, "grader/failures": 0, "rollout/generated": 8}
    update = {"policy_loss/frac_cov_clipped": 0.1, "entropy": 0.2, "clip/frac_low": 0.0, "policy_loss/frac_cov_quota": 0.3,
              "rollout/logprob_diff": 1e-8}
    own = {"lr": 1e-3, "kappa_eff": None}
    line = merge(rollouts, update, own)
    assert list(line) == ["reward/mean", "rollout/generated", "entropy", "kappa_eff", "clip/frac_low",
                          "grader/failures", "lr", "rollout/logprob_diff",
                          "policy_loss/frac_cov_clipped", "policy_loss/frac_cov_quota"]
    assert line["kappa_eff"] is None and line["policy_loss/frac_cov_quota"] == 0.3


def test_a_key_in_two_namespaces_is_an_error():
    with pytest.raises(ValueError, match="entropy"):
        merge({"entropy": 0.1}, {"entropy": 0.2})


def test_every_key_of_the_line_order_is_a_documented_metric():
    documented = {m.key for m in STEP_METRICS}
    assert set(LINE_ORDER) <= documented
    assert len(set(LINE_ORDER)) == len(LINE_ORDER)
