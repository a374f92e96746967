"""Evaluation metrics: avg@n, unbiased pass@k, maj@k, and percentile-bootstrap intervals.

Definitions (docs/method.md, "Evaluation metrics"), for P problems with n samples each, c_i correct:
- avg@n   = (1/P) Σ_i c_i / n                       ("pass@1 from n samples")
- pass@k  = (1/P) Σ_i [1 − C(n−c_i, k) / C(n, k)]   (unbiased; Chen et al. 2021, Codex paper)
- maj@k   = (1/P) Σ_i 1[the most voted answer among the first k samples of problem i is correct]
- every figure carries a 95% percentile-bootstrap interval over problems (`bootstrap_ci`; across
  seeds, `rbctl.report` takes over: docs/method.md, "Comparing arms").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np


def pass_at_k(n, c, k: int):
    """Unbiased pass@k: 1 − C(n−c, k) / C(n, k) for a problem with ``n`` samples, ``c`` correct.

    Product form (Codex paper, Fig. 3), free of huge binomials:
        C(n−c, k) / C(n, k) = Π_{i=n−c+1}^{n} (1 − k / i)
    and the estimate is exactly 1 when n − c < k (every k-subset holds a correct sample).
    ``n`` and ``c`` are ints (a float is returned) or arrays of one shape (an array of pass@k per
    cell, e.g. ``[seeds, problems]``); every cell needs 0 ≤ c ≤ n and 1 ≤ k ≤ n.
    """
    n_a, c_a = np.asarray(n, dtype=int), np.asarray(c, dtype=int)
    if n_a.shape != c_a.shape:
        raise ValueError(f"n and c have shapes {n_a.shape} and {c_a.shape}")
    if ((c_a < 0) | (c_a > n_a)).any():
        raise ValueError(f"need 0 <= c <= n, got c={c}, n={n}")
    if n_a.size and not 1 <= k <= int(n_a.min()):
        raise ValueError(f"need 1 <= k <= n, got k={k}, n={int(n_a.min())}")
    out = np.ones(n_a.shape, dtype=float)
    flat_n, flat_c, flat_out = n_a.ravel(), c_a.ravel(), out.reshape(-1)
    for i, (ni, ci) in enumerate(zip(flat_n, flat_c)):
        if ni - ci >= k:
            flat_out[i] = 1.0 - float(np.prod(1.0 - k / np.arange(ni - ci + 1, ni + 1)))
    return float(out) if out.ndim == 0 else out


def avg_at_n(correct: np.ndarray) -> float:
    """avg@n = mean over problems of (correct samples / n); ``correct`` is bool ``[P, n]``."""
    correct = np.asarray(correct, dtype=float)
    if correct.ndim != 2 or correct.size == 0:
        raise ValueError(f"correct must be a non-empty [problems, n] array, got shape {correct.shape}")
    return float(correct.mean())


def majority_cluster(
    answers: Sequence[str | None], equivalent: Callable[[str, str], bool]
) -> list[int] | None:
    """Indices of the winning cluster of equivalent answers, or None if no answer votes.

    Answers are clustered greedily in order: each answer joins the first existing cluster whose
    first member it is ``equivalent`` to (identical strings join without calling it), else it opens
    a new cluster. None answers do not vote. The largest cluster wins; a tie goes to the cluster
    whose first member appears earliest (clusters are created in order, and ``max`` keeps the first
    maximum).
    """
    clusters: list[list[int]] = []
    for i, a in enumerate(answers):
        if a is None:
            continue
        for cluster in clusters:
            rep = answers[cluster[0]]
            if a == rep or equivalent(rep, a):
                cluster.append(i)
                break
        else:
            clusters.append([i])
    if not clusters:
        return None
    return max(clusters, key=len)


def maj_at_k(
    answers: Sequence[Sequence[str | None]],
    correct: Sequence[Sequence[bool]],
    k: int,
    equivalent: Callable[[str, str], bool] | None = None,
) -> float:
    """maj@k: fraction of problems whose majority answer among the FIRST k samples is correct.

    ``answers[i][j]`` is the extracted answer of sample j of problem i (None: no answer) and
    ``correct[i][j]`` its grade. A problem counts as correct if the winning cluster's first member
    is correct (members of a cluster are equivalent, so they share the verdict). A problem where no
    sample answered counts as wrong. ``equivalent`` defaults to ``rbctl.grading.verify.answers_equivalent``
    (math-verify); clustering is described in ``majority_cluster``.
    """
    if equivalent is None:
        from rbctl.grading.verify import answers_equivalent as equivalent
    if len(answers) != len(correct) or not answers:
        raise ValueError("answers and correct must be non-empty and list the same problems")
    hits = 0
    for ans, cor in zip(answers, correct):
        if not 1 <= k <= len(ans) or len(ans) != len(cor):
            raise ValueError(f"k={k} with {len(ans)} answers and {len(cor)} grades for one problem")
        winner = majority_cluster(ans[:k], equivalent)
        hits += winner is not None and bool(cor[winner[0]])
    return hits / len(answers)


def bootstrap_ci(
    per_problem_values: np.ndarray, n_boot: int = 2000, alpha: float = 0.05, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean over problems.

    Draw ``n_boot`` resamples of the P problems with replacement; the interval is the
    (alpha/2, 1 − alpha/2) quantiles of the resampled means.
    """
    values = np.asarray(per_problem_values, dtype=float)
    if values.ndim != 1 or values.size == 0:
        raise ValueError(f"need a non-empty 1-D array of per-problem values, got shape {values.shape}")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, values.size, size=(n_boot, values.size))  # [n_boot, P]
    means = values[idx].mean(axis=1)
    lo, hi = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return float(lo), float(hi)


def default_ks(n: int) -> list[int]:
    """1, 2, 4, … up to n, plus n itself: ``default_ks(6) == [1, 2, 4, 6]``."""
    ks = [1 << i for i in range(n.bit_length()) if 1 << i <= n]
    return ks if ks[-1] == n else ks + [n]


def _memoized(equivalent: Callable[[str, str], bool]) -> Callable[[str, str], bool]:
    cache: dict[tuple[str, str], bool] = {}

    def eq(a: str, b: str) -> bool:
        if (a, b) not in cache:
            cache[(a, b)] = equivalent(a, b)
        return cache[(a, b)]

    return eq


def _with_ci(per_problem: np.ndarray, n_boot: int, seed: int) -> dict[str, float]:
    lo, hi = bootstrap_ci(per_problem, n_boot=n_boot, seed=seed)
    return {"value": float(per_problem.mean()), "ci_low": lo, "ci_high": hi}


def summarize(
    correct: np.ndarray,
    answers: Sequence[Sequence[str | None]],
    ks: Sequence[int] | None = None,
    equivalent: Callable[[str, str], bool] | None = None,
    n_boot: int = 2000,
    seed: int = 0,
) -> dict[str, dict[str, float]]:
    """avg@n, pass@k and maj@k for k in ``ks`` (default ``default_ks(n)``), each with a 95% CI.

    ``correct`` is bool ``[P, n]``, ``answers[i][j]`` the extracted answer of sample j of problem
    i. Returns e.g. ``{"avg@8": {"value", "ci_low", "ci_high"}, "pass@1": …, "maj@8": …}``; the
    intervals bootstrap the per-problem values over problems.
    """
    correct = np.asarray(correct, dtype=bool)
    if correct.ndim != 2 or correct.size == 0:
        raise ValueError(f"correct must be a non-empty [problems, n] array, got shape {correct.shape}")
    n_problems, n = correct.shape
    if len(answers) != n_problems:
        raise ValueError(f"{len(answers)} answer lists for {n_problems} problems")
    ks = list(ks) if ks is not None else default_ks(n)
    if equivalent is None:
        from rbctl.grading.verify import answers_equivalent as equivalent
    equivalent = _memoized(equivalent)  # maj@k for several k re-compares the same pairs
    c = correct.sum(axis=1)
    out = {f"avg@{n}": _with_ci(correct.mean(axis=1), n_boot, seed)}
    for k in ks:
        out[f"pass@{k}"] = _with_ci(np.array([pass_at_k(n, int(ci), k) for ci in c]), n_boot, seed)
    for k in ks:
        per_problem = np.array(
            [maj_at_k([answers[i]], [correct[i].tolist()], k, equivalent) for i in range(n_problems)]
        )
        out[f"maj@{k}"] = _with_ci(per_problem, n_boot, seed)
    return out
