"""rbctl's `maxrl` against the MaxRL authors' own estimator, transcribed.

Source: github.com/tajwarfahim/maxrl, verl/trainer/ppo/core_algos.py @ c0698ebb439a81ae1c6b01a842df3f2541816b4d
(their newest commit, 2026-05-14), `compute_maxrl_outcome_advantage`, registered as
`AdvantageEstimator.MAXRL = "maxrl"` — the `adv_estimator=maxrl` that their maze/maze_17.sh asks for. The
function was named `compute_p_normalization_outcome_advantage` until commit 2493d22 ("rename
p_normalization to maxrl"), which changed its name only; its body is the same at 7db6bb9.
(Their `compute_misc_outcome_advantage` also has an `advantage_type == "maxrl"` branch,
((r − μ̂)/(σ + ε))/(μ̂ + ε); it is reached only through adv_estimator=misc, not the estimator checked here.)
"""

from __future__ import annotations

import itertools
from collections import defaultdict

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from rbctl.algo import compute_advantages


# --- the authors' function, transcribed line for line (their `str = True` annotation and the unused
# N, id2std and norm_adv_by_std_in_grpo kept as written) ------------------------------------------
def compute_maxrl_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: str = True,
):
    scores = token_level_rewards.sum(dim=-1)

    id2score = defaultdict(list)
    id2mean = {}
    id2std = {}

    with torch.no_grad():
        bsz = scores.shape[0]

        for i in range(bsz):
            id2score[index[i]].append(scores[i])

        N = len(id2score[index[0]])  # number of responses per prompt  # noqa: F841

        for idx in id2score:
            if len(id2score[idx]) == 1:
                id2mean[idx] = torch.tensor(0.0)
                id2std[idx] = torch.tensor(1.0)

            elif len(id2score[idx]) > 1:
                id2mean[idx] = torch.mean(torch.tensor(id2score[idx]))
                id2std[idx] = torch.std(torch.tensor([id2score[idx]]))

            else:
                raise ValueError(f"no score in prompt index: {idx}")

        for i in range(bsz):
            scores[i] = (scores[i] - id2mean[index[i]]) / (id2mean[index[i]] + epsilon)

        scores = scores.unsqueeze(-1) * response_mask

    return scores, scores


# --- verl's calling convention --------------------------------------------------------------------


def upstream(rewards: torch.Tensor, response_length: int = 3) -> torch.Tensor:
    """The authors' advantages for rewards [P, G], back as [P, G].

    verl hands the estimator one row per response, the outcome reward on the last valid token of
    token_level_rewards [P·G, T], and `index` the prompt's uid per row (rollout.n repeats each prompt
    G times in a row). Every valid token gets the same advantage, so column 0 is the response's."""
    p, g = rewards.shape
    token_level_rewards = torch.zeros(p * g, response_length, dtype=torch.float32)
    token_level_rewards[:, -1] = rewards.reshape(-1)
    response_mask = torch.ones(p * g, response_length, dtype=torch.float32)
    index = np.array([f"uid-{i}" for i in range(p) for _ in range(g)], dtype=object)
    advantages, returns = compute_maxrl_outcome_advantage(token_level_rewards, response_mask, index)
    assert torch.equal(advantages, returns)
    assert torch.equal(advantages, advantages[:, :1].expand_as(advantages))
    return advantages[:, 0].reshape(p, g)


def same(rewards: torch.Tensor) -> None:
    """rbctl's maxrl equals the authors' to 1e-6 (absolute, plus 1e-6 relative: at G = 128 and K = 1
    the correct rollout's advantage is ≈ 127, whose float32 spacing is 7.6e-6)."""
    assert_close(compute_advantages(rewards, "maxrl"), upstream(rewards), rtol=1e-6, atol=1e-6)


# --- probes ---------------------------------------------------------------------------------------


def test_the_transcription_gives_the_hand_computed_values() -> None:
    # [1,0,0,0]: μ̂ = 1/4 -> (3/4)/(1/4 + 1e-6) = 2.999988..., (−1/4)/(1/4 + 1e-6) = −0.999996...
    # all wrong: (0 − 0)/(0 + 1e-6) = 0; all right: (1 − 1)/(1 + 1e-6) = 0
    got = upstream(torch.tensor([[1.0, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]]))
    d = 0.25 + 1e-6
    want = torch.tensor([[0.75 / d, -0.25 / d, -0.25 / d, -0.25 / d], [0.0] * 4, [0.0] * 4])
    assert_close(got, want)
    assert torch.equal(got[1:], torch.zeros(2, 4))


@pytest.mark.parametrize("g", [2, 4, 8])
def test_maxrl_matches_the_authors_on_every_binary_group(g: int) -> None:
    # all 2^G patterns: mixed groups, the all-wrong row (0…0) and the all-right row (1…1)
    same(torch.tensor(list(itertools.product([0.0, 1.0], repeat=g))))


@pytest.mark.parametrize("g", [16, 32, 128])
def test_maxrl_matches_the_authors_at_every_correct_count_for_large_groups(g: int) -> None:
    # one group per K = 0…G, the correct rollouts at random places
    gen = torch.Generator().manual_seed(g)
    rows = torch.zeros(g + 1, g)
    for k in range(g + 1):
        rows[k, torch.randperm(g, generator=gen)[:k]] = 1.0
    same(rows)


def test_maxrl_matches_the_authors_on_non_binary_rewards() -> None:
    # their function takes any scores; rbctl's takes any r >= 0. Equal non-binary groups included.
    same(torch.tensor([[0.5, 0.0, 0.25, 1.0], [0.1, 0.1, 0.1, 0.1], [3.0, 0.0, 0.0, 0.0], [1e-3, 0, 0, 0]]))


def test_the_epsilon_is_what_tells_the_two_formulas_apart() -> None:
    # G = 128, K = 1: μ̂ = 1/128. The authors: (1 − 1/128)/(1/128 + 1e-6) = 127/(1 + 1.28e-4) = 126.98375…;
    # without the 1e-6, (r − μ̂)/μ̂ = 127 exactly: 0.016 apart, far outside the 1e-6 of `same`.
    r = torch.zeros(1, 128)
    r[0, 0] = 1.0
    theirs = upstream(r)[0, 0].item()
    assert theirs == pytest.approx(127 / (1 + 128e-6), rel=1e-6)
    assert abs(127.0 - theirs) > 0.016
    assert compute_advantages(r, "maxrl")[0, 0].item() == pytest.approx(theirs, rel=1e-6, abs=1e-6)
