"""Tests of rbctl.grading.metrics against hand-computed values and slow reference loops."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from rbctl.grading.metrics import (
    avg_at_n,
    bootstrap_ci,
    default_ks,
    maj_at_k,
    majority_cluster,
    pass_at_k,
    summarize,
)


def exact_eq(a: str, b: str) -> bool:
    return a == b


def pass_at_k_reference(n: int, c: int, k: int) -> float:
    """Fraction of all k-subsets of the n samples that hold at least one correct sample."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n", range(1, 9))
def test_pass_at_k_matches_subset_enumeration(n: int) -> None:
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(pass_at_k_reference(n, c, k))


def test_pass_at_k_hand_values() -> None:
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)  # 1 - C(3,2)/C(5,2) = 1 - 3/10
    assert pass_at_k(10, 1, 1) == pytest.approx(0.1)  # pass@1 = c/n
    assert pass_at_k(4, 0, 4) == 0.0
    assert pass_at_k(4, 1, 4) == 1.0  # n - c = 3 < k: every 4-subset holds the correct one


def test_pass_at_k_is_stable_for_large_n() -> None:
    # C(1000, 500) overflows float; the product form does not. Reference via log-gamma:
    # 1 - exp(lnC(800, 50) - lnC(1000, 50)).
    ln_c = lambda n, k: math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)  # noqa: E731
    expected = 1 - math.exp(ln_c(800, 50) - ln_c(1000, 50))
    assert pass_at_k(1000, 200, 50) == pytest.approx(expected)
    assert 0.0 <= pass_at_k(1000, 1, 500) <= 1.0


def test_pass_at_k_of_arrays_is_per_cell() -> None:
    n = np.array([[4, 4, 4], [8, 8, 8]])
    c = np.array([[0, 1, 4], [1, 2, 8]])
    # pass@2 with 1 of 4 correct: 1 − C(3,2)/C(4,2) = 1 − 3/6; with 2 of 8: 1 − C(6,2)/C(8,2) = 1 − 15/28
    assert pass_at_k(n, c, 2) == pytest.approx(np.array([[0.0, 0.5, 1.0], [0.25, 13 / 28, 1.0]]))
    assert pass_at_k(n, c, 1) == pytest.approx(c / n)
    assert isinstance(pass_at_k(4, 1, 2), float)
    with pytest.raises(ValueError):
        pass_at_k(n, c, 5)  # k > the smallest n


def test_pass_at_k_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError):
        pass_at_k(4, 2, 5)


def test_avg_at_n() -> None:
    # (2/4 + 4/4 + 0/4) / 3 = 0.5
    correct = np.array([[1, 0, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0]], dtype=bool)
    assert avg_at_n(correct) == pytest.approx(0.5)


def test_majority_cluster_ties_go_to_earliest_cluster() -> None:
    assert majority_cluster(["3", "4"], exact_eq) == [0]
    assert majority_cluster(["3", "4", "4", "3"], exact_eq) == [0, 3]
    assert majority_cluster([None, "4", None], exact_eq) == [1]
    assert majority_cluster([None, None], exact_eq) is None


def test_maj_at_k_hand_values() -> None:
    answers = [["3", "4", "4"], [None, None, "7"], [None, None, None], ["1", "2", "2"]]
    correct = [[False, True, True], [False, False, True], [False, False, False], [True, False, False]]
    # k=3: "4" wins (T), "7" is the only vote (T), nobody voted (F), "2" wins (F) -> 2/4
    assert maj_at_k(answers, correct, 3, exact_eq) == pytest.approx(0.5)
    # k=1: "3" (F), no vote (F), no vote (F), "1" (T) -> 1/4
    assert maj_at_k(answers, correct, 1, exact_eq) == pytest.approx(0.25)
    # k=2: tie "3"/"4" -> earliest "3" (F); no vote; no vote; tie "1"/"2" -> "1" (T) -> 1/4
    assert maj_at_k(answers, correct, 2, exact_eq) == pytest.approx(0.25)


def test_maj_at_k_equivalent_answers_vote_together() -> None:
    # With the math-verify grader, 0.5 and \frac{1}{2} form one cluster of 2 and beat 1/3 and 2/3.
    answers = [["1/3", "0.5", r"\frac{1}{2}", "2/3"]]
    correct = [[False, True, True, False]]
    assert maj_at_k(answers, correct, 4) == 1.0
    # Exact string matching splits them: four clusters of 1, tie -> "1/3" (wrong).
    assert maj_at_k(answers, correct, 4, exact_eq) == 0.0


def test_bootstrap_ci_contains_estimate_and_narrows() -> None:
    rng = np.random.default_rng(1)
    small = rng.random(20) < 0.5
    large = rng.random(2000) < 0.5
    lo_s, hi_s = bootstrap_ci(small)
    lo_l, hi_l = bootstrap_ci(large)
    assert lo_s <= small.mean() <= hi_s
    assert lo_l <= large.mean() <= hi_l
    # Seeded (data and resamples), so the widths are pinned to the values measured: 0.4 for P=20 and
    # 0.0440125 for P=2000, against the normal approximation 2 * 1.96 * sqrt(p(1-p)/P) = 0.429 and
    # 0.0438 (p = the sample means 0.6 and 0.501).
    assert hi_s - lo_s == pytest.approx(0.4, abs=1e-9)
    assert hi_l - lo_l == pytest.approx(0.0440125, abs=1e-9)
    for values, width in ((small, hi_s - lo_s), (large, hi_l - lo_l)):
        p = values.mean()
        assert width == pytest.approx(2 * 1.96 * (p * (1 - p) / values.size) ** 0.5, rel=0.1)


def test_bootstrap_ci_of_constant_values_is_a_point() -> None:
    assert bootstrap_ci(np.full(10, 0.3)) == pytest.approx((0.3, 0.3))


def test_bootstrap_ci_is_reproducible_with_seed() -> None:
    values = np.arange(10) / 10
    assert bootstrap_ci(values, seed=3) == bootstrap_ci(values, seed=3)


def test_default_ks() -> None:
    assert default_ks(1) == [1]
    assert default_ks(6) == [1, 2, 4, 6]
    assert default_ks(8) == [1, 2, 4, 8]


def test_summarize_hand_values() -> None:
    correct = np.array([[1, 0, 1, 1], [0, 0, 0, 0]], dtype=bool)
    answers = [["7", "3", "7", "7"], ["1", "2", "2", None]]
    out = summarize(correct, answers, equivalent=exact_eq, n_boot=200)
    assert set(out) == {"avg@4", "pass@1", "pass@2", "pass@4", "maj@1", "maj@2", "maj@4"}
    values = {key: v["value"] for key, v in out.items()}
    assert values["avg@4"] == pytest.approx(0.375)  # (3/4 + 0/4) / 2
    assert values["pass@1"] == pytest.approx(0.375)  # pass@1 = avg@n
    assert values["pass@2"] == pytest.approx(0.5)  # (1 - C(1,2)/C(4,2) = 1) and 0, mean 0.5
    assert values["pass@4"] == pytest.approx(0.5)
    assert values["maj@1"] == pytest.approx(0.5)  # "7" right, "1" wrong
    assert values["maj@2"] == pytest.approx(0.5)  # tie "7"/"3" -> "7"; tie "1"/"2" -> "1"
    assert values["maj@4"] == pytest.approx(0.5)  # "7" x3 right; "2" x2 wrong
    for v in out.values():
        assert v["ci_low"] <= v["value"] <= v["ci_high"]
