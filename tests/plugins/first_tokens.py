"""A method that exists only for the tests: a token mask that keeps the policy-gradient loss on the
first `n` response tokens of each sequence. This module is all it takes to add it: run with
RBCTL_METHODS=tests.plugins.first_tokens and it is trained, labelled, validated and documented
(tests/integration/test_method_plugin.py)."""

from __future__ import annotations

import torch

from rbctl.algo.registry import Method, MetricDoc, register, setting


def first_tokens_mask(entropy: torch.Tensor, mask: torch.Tensor, *, n: int) -> torch.Tensor:
    """Keep valid tokens at positions < n of each row (mask [N, T] -> bool [N, T])."""
    position = torch.cumsum(mask.long(), dim=1) - 1
    return mask.bool() & (position < n)


register(Method(
    "first_tokens", "token_mask", first_tokens_mask, "First-tokens mask: policy-gradient loss only on the first n tokens",
    settings={"n": setting(2, "Tokens kept at the start of each response.", ge=1)},
    metrics=(MetricDoc("tokens/frac_first_tokens", "fraction of valid tokens the first-tokens mask kept"),)))
