"""The population calculation of the plateau task's first design (studies/reward_budgeting/docs/first_design.md, "Why plain GRPO locks
in"): the exact expected first-token gradient of one logit shared by the walk and the shortcut, per estimator,
enumerating every outcome of a group of G = 8 rollouts.

A rollout walks with probability w (the walk share); a walk at depth d is right with probability
acc(d) = (1 − e)^d + (1 − (1 − e)^d)·a (hop error e, a lucky guess a), a shortcut is right only at
depth 1 (0.95). The advantages are rbctl's own (`rbctl.algo.compute_advantages`; formulas in
docs/method.md, "Advantage estimators" and "Reward budgeting"). The first token's weight is
1/length under seq-mean-token-mean (GRPO and GRPO + budget) and 1 where every token weighs alike
(Dr.GRPO, RLOO). Printed per setting: the expected gradient of each estimator (negative = away from
walking) and, as walk-all, the pass@1 of always walking.

    python -m studies.reward_budgeting.fixpoint_population
"""

from __future__ import annotations

from dataclasses import dataclass
from math import comb
from typing import Callable

import torch


from rbctl.algo import compute_advantages

G = 8
SHORTCUT_ACC = 0.95  # the shortcut's accuracy at depth 1 (it is never right deeper)
SHORTCUT_LEN = 3  # tokens of a shortcut answer
DEPTHS = range(2, 7)  # the deep problems' depths, equally likely


@dataclass(frozen=True)
class Arm:
    """An estimator as the calculation uses it: rbctl's estimator and budget, and whether the first
    token of a sequence weighs 1/length (seq-mean-token-mean) or 1."""

    estimator: str
    budget: float | None
    per_length: bool


ARMS = {
    "grpo": Arm("grpo", None, True),
    "budget": Arm("grpo", 1.0, True),
    "dr": Arm("dr_grpo", None, False),
    "rloo": Arm("rloo", None, False),
}


def outcomes(w: float, walk_acc: float, shortcut_acc: float) -> tuple[list[float], torch.Tensor, list[int]]:
    """Every outcome of a group: (its probability, rewards [N, G], its number of walks k). The first k
    rollouts walk (j of them right), the other G − k take the shortcut (m right)."""
    probs, rows, walks = [], [], []
    for k in range(G + 1):
        pk = comb(G, k) * w**k * (1 - w) ** (G - k)
        for j in range(k + 1):
            pj = comb(k, j) * walk_acc**j * (1 - walk_acc) ** (k - j)
            for m in range(G - k + 1):
                pm = comb(G - k, m) * shortcut_acc**m * (1 - shortcut_acc) ** (G - k - m)
                probs.append(pk * pj * pm)
                rows.append([1] * j + [0] * (k - j) + [1] * m + [0] * (G - k - m))
                walks.append(k)
    return probs, torch.tensor(rows, dtype=torch.float32), walks


def expected_gradient(w: float, walk_acc: float, shortcut_acc: float, arm: Arm, walk_len: int) -> float:
    """E[(1/G) Σ_i A_i · ∂ log π(first token of i) / ∂ logit] over every outcome of a group, for the
    logit of walking (probability w): the score is 1 − w for a walk and −w for a shortcut, each
    divided by its length under per-length weights."""
    probs, rewards, walks = outcomes(w, walk_acc, shortcut_acc)
    adv = compute_advantages(rewards, arm.estimator, budget=arm.budget).tolist()
    walk_score = (1 - w) / walk_len if arm.per_length else 1 - w
    short_score = -w / SHORTCUT_LEN if arm.per_length else -w
    total = 0.0
    for p, a, k in zip(probs, adv, walks):
        scores = [walk_score] * k + [short_score] * (G - k)
        total += p * sum(x * y for x, y in zip(a, scores))
    return total / G


def walk_accuracy(e: float, a: float) -> Callable[[int], float]:
    """acc(d): a walk of depth d is right when no hop errs, or by a lucky guess a after an error."""
    return lambda d: (1 - e) ** d + (1 - (1 - e) ** d) * a


def mixed_gradient(q: float, w: float, acc: Callable[[int], float], arm: Arm) -> float:
    """The expected gradient over a problem mix with a share q of depth-1 problems."""
    g1 = expected_gradient(w, acc(1) * SHORTCUT_ACC, SHORTCUT_ACC, arm, 6)
    deep = sum(expected_gradient(w, acc(d), 0, arm, 2 * d + 4) for d in DEPTHS) / len(DEPTHS)
    return q * g1 + (1 - q) * deep


def main() -> None:
    acc = walk_accuracy(0.3, 0.3)
    for q in [0.4, 0.5, 0.6]:
        for w in [0.15, 0.4]:
            print(q, w, [f"{name} {mixed_gradient(q, w, acc, ARMS[name]):+.4f}" for name in ("grpo", "budget", "dr")])
    print("---")
    for e, a in [(0.3, 0.3), (0.35, 0.2), (0.4, 0.2)]:
        acc = walk_accuracy(e, a)
        for q in [0.6, 0.7, 0.75]:
            w = 0.15
            out = [f"{name} {mixed_gradient(q, w, acc, arm):+.4f}" for name, arm in ARMS.items()]
            walk_all = q * acc(1) + (1 - q) * sum(acc(d) for d in DEPTHS) / len(DEPTHS)
            print(e, a, q, w, out, "walk-all", round(walk_all, 2))


if __name__ == "__main__":
    raise SystemExit(main())
