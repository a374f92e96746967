"""Tests of rbctl.grading.verify: verdict table, extraction, pre-checks, and the hard time limit."""

from __future__ import annotations

import random
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rbctl.grading import verify as grading
from rbctl.grading.verify import (
    GradeResult,
    answers_equivalent,
    extract_boxed,
    grade,
    grade_detailed,
    grade_many,
    precheck,
    warm_up,
)

# Grace for process kill + select wake-up on a loaded 2-core machine; worker start-up is excluded
# from the budget by calling warm_up() before each timed call.
SLACK_S = 0.5

# (completion, gold, expected verdict)
VERDICTS = [
    # fractions vs decimals, \dfrac
    (r"\boxed{0.5}", r"\frac{1}{2}", True),
    (r"\boxed{\frac12}", "0.5", True),
    (r"\boxed{0.6}", r"\frac{1}{2}", False),
    (r"\boxed{\dfrac{3}{4}}", "0.75", True),
    (r"\boxed{\dfrac{3}{4}}", r"\frac{4}{3}", False),
    (r"\boxed{1/2}", r"\frac{1}{2}", True),
    # leading zeros (AIME gold answers keep them)
    (r"\boxed{25}", "025", True),
    (r"\boxed{025}", "25", True),
    (r"\boxed{52}", "025", False),
    # degrees (aime25-19 gold is 336^\circ)
    (r"\boxed{336}", r"336^\circ", True),
    (r"\boxed{336^\circ}", "336", True),
    (r"\boxed{335}", r"336^\circ", False),
    # assignments
    (r"\boxed{x = 5}", "5", True),
    (r"\boxed{5}", "x=5", True),
    (r"\boxed{x=-5}", "5", False),
    # thousands separators
    (r"\boxed{1,080}", "1080", True),
    (r"\boxed{1080}", "1,080", True),
    (r"\boxed{1,800}", "1080", False),
    # intervals
    (r"\boxed{[1, 2)}", "[1,2)", True),
    (r"\boxed{(1,2]}", "[1,2)", False),
    (r"\boxed{(-\infty, 3]}", r"(-\infty,3]", True),
    # multiple-choice letters
    (r"\boxed{\text{(B)}}", "B", True),
    (r"\boxed{B}", r"\text{(B)}", True),
    (r"\boxed{\textbf{(B) }12}", "B", True),
    (r"\boxed{\text{(C)}}", "B", False),
    (r"\boxed{(D) 7}", "B", False),
    # negatives
    (r"\boxed{-3}", "-3", True),
    (r"\boxed{3}", "-3", False),
    (r"\boxed{-\frac{1}{2}}", "-0.5", True),
    # square roots
    (r"\boxed{2\sqrt{2}}", r"\sqrt{8}", True),
    (r"\boxed{\frac{\sqrt{3}}{2}}", r"\frac{1}{2}\sqrt{3}", True),
    (r"\boxed{\sqrt{2}}", "2", False),
    # pi
    (r"\boxed{2\pi}", r"2\pi", True),
    (r"\boxed{\pi/2}", r"\frac{\pi}{2}", True),
    (r"\boxed{3.14}", r"\pi", False),
    # sets, percent, units, polynomials, powers
    (r"\boxed{\{1,2\}}", r"\{2,1\}", True),
    (r"\boxed{50\%}", "50", True),
    (r"\boxed{18 \text{ dollars}}", "18", True),
    (r"\boxed{(x+1)^2}", "x^2+2x+1", True),
    (r"\boxed{(x-1)^2}", "x^2+2x+1", False),
    (r"\boxed{2^{10}}", "1024", True),
    # extraction: the LAST box counts, nesting, \fbox, brace-less \boxed
    (r"first \boxed{3}, finally \boxed{5}.", "5", True),
    (r"first \boxed{5}, finally \boxed{3}.", "5", False),
    (r"$\boxed{\frac{1}{\sqrt{4}}}$", "0.5", True),
    (r"\fbox{7}", "7", True),
    (r"so the answer is $\boxed 7$.", "7", True),
    (r"The answer is 5.", "5", True),  # no box: the final-answer phrase (tests/unit/test_grading_forms.py)
    (r"The answer is 5 if n is odd, else 6.", "5", False),  # no box, and "answer is 5" does not end it
    (r"\boxed{5} and then \boxed{6", "5", False),  # last box unclosed: no answer
    (r"\boxed{}", "5", False),
]


@pytest.fixture(scope="module", autouse=True)
def _worker_ready():
    warm_up()


@pytest.mark.parametrize(("completion", "gold", "expected"), VERDICTS)
def test_verdict_table(completion: str, gold: str, expected: bool) -> None:
    result = grade_detailed(completion, gold)
    assert result.correct is expected, result
    assert grade(completion, gold) is expected
    assert result.status in grading.STATUSES


def test_statuses_are_reported() -> None:
    assert grade_detailed("no box here", "5") == GradeResult(False, None, "no_answer")
    assert grade_detailed(r"\boxed{}", "5").status == "no_answer"
    ok = grade_detailed(r"\boxed{6}", "5")
    assert (ok.correct, ok.extracted, ok.status, ok.extraction) == (False, "6", "ok", "boxed")
    unclosed = grade_detailed(r"The final answer is 5. \boxed{5", "5")  # a box decides: no phrase fallback
    assert (unclosed.correct, unclosed.status, unclosed.extraction) == (False, "no_answer", "none")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"\boxed{\frac{a}{b}}", r"\frac{a}{b}"),
        (r"\boxed{\{1,2\}}", r"\{1,2\}"),  # escaped set braces do not close the box
        (r"a \boxed{1} b \fbox{2} c", "2"),
        (r"a \fbox{2} b \boxed{ 3 } c", "3"),
        (r"\boxed 42$ end", "42"),
        (r"\boxed{5}}}}", "5"),
        (r"\boxed{5", None),
        (r"\boxed", None),
        (r"\boxedx{5}", None),  # another command, not a box
        ("nothing", None),
    ],
)
def test_extract_boxed(text: str, expected: str | None) -> None:
    assert extract_boxed(text) == expected


# Balanced brace strings: text leaves, grouped `{...}` and concatenated.
BALANCED = st.recursive(
    st.text(alphabet="0123456789x+-=,. ", max_size=5),
    lambda inner: st.one_of(st.builds("{{{}}}".format, inner), st.builds(str.__add__, inner, inner)),
    max_leaves=10,
)


@settings(max_examples=60, deadline=None)
@given(BALANCED)
def test_extract_boxed_returns_balanced_content(content: str) -> None:
    assert extract_boxed("We get " + r"\boxed{" + content + "} as the answer.") == content.strip()


def test_precheck_rejects_pathological_and_keeps_real_answers() -> None:
    assert precheck("9^{9^{9^{9^{9}}}}") is not None
    assert precheck("9^{9^{9}}") is not None  # 9^387420489: ~3.7e8 digits
    assert precheck("10^{10^{10}}") is not None
    assert precheck("2^{100000000}") is not None  # 3.0e7 digits
    assert precheck("1000000!") is not None
    assert precheck("x" * 1001) is not None
    assert precheck("{" * 51 + "1" + "}" * 51) is not None
    for fine in ["2^{2^{n}}", "10^{100}", "3^{1000}", "2^{2^{20}}", r"\frac{9^{9}}{2}", "1,000,000", "100!", "9" * 400]:
        assert precheck(fine) is None, fine


ADVERSARIAL = [
    pytest.param(r"\boxed{9^{9^{9^{9^{9}}}}}", "1", id="power-tower"),
    pytest.param(r"\boxed{9^{9^{9}}}", "1", id="tower-of-3"),
    pytest.param(r"\boxed{" + "{" * 500 + "1" + "}" * 500 + "}", "1", id="500-nested-braces"),
    pytest.param(r"\boxed{" + "1+" * 50_000 + "1}", "1", id="100k-char-answer"),
    pytest.param("x" * 100_000 + r"\boxed{5}", "5", id="100k-char-completion"),
    pytest.param(r"\boxed{" * 14_000, "1", id="100k-unclosed-boxes"),
    pytest.param("}" * 50_000 + r"\boxed{{{1}" + "{" * 50_000, "1", id="unbalanced-braces"),
    pytest.param(r"\boxed{(x+1)^{3000}}", "1", id="slow-sympy-expand"),  # > 10 s in sympy
]


@pytest.mark.parametrize(("completion", "gold"), ADVERSARIAL)
def test_adversarial_inputs_return_within_time_limit(completion: str, gold: str) -> None:
    timeout_s = 1.0
    warm_up()
    start = time.monotonic()
    result = grade_detailed(completion, gold, timeout_s=timeout_s)
    elapsed = time.monotonic() - start
    assert elapsed < timeout_s + SLACK_S, (elapsed, result)
    assert result.correct == (gold == "5")  # only the 100k-char completion holds a right answer


def test_hard_timeout_kills_worker_and_next_call_works() -> None:
    warm_up()
    start = time.monotonic()
    result = grade_detailed(r"\boxed{(x+1)^{3000}}", "1", timeout_s=0.5)
    elapsed = time.monotonic() - start
    assert (result.correct, result.status) == (False, "timeout")
    assert 0.5 <= elapsed < 0.5 + SLACK_S
    assert grade_detailed(r"\boxed{\frac{1}{2}}", "0.5") == GradeResult(True, r"\frac{1}{2}", "ok", extraction="boxed")


def test_timeout_from_non_main_thread() -> None:
    warm_up()
    out: dict[str, object] = {}

    def run() -> None:
        start = time.monotonic()
        out["result"] = grade_detailed(r"\boxed{(x+1)^{3000}}", "1", timeout_s=0.5)
        out["elapsed"] = time.monotonic() - start

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert out["result"].status == "timeout"
    assert out["elapsed"] < 0.5 + SLACK_S


def test_concurrent_threads_each_get_their_own_verdict() -> None:
    cases = [(rf"\boxed{{{i}}}", f"{i:03d}", True) for i in range(6)] + [
        (rf"\boxed{{{i + 1}}}", str(i), False) for i in range(6)
    ]
    results = grade_many([c for c, _, _ in cases], [g for _, g, _ in cases], workers=3)
    assert [r.correct for r in results] == [e for _, _, e in cases]


def test_worker_death_is_an_error_not_a_verdict() -> None:
    worker = grading._POOL.acquire()
    worker.proc.kill()  # dies from outside, e.g. the OOM killer
    worker.proc.wait()
    status, correct, detail = worker.request("grade", "1", "1", 1.0)
    assert (status, correct) == ("error", False)
    assert "died" in detail
    grading._POOL.release(worker)  # replaced by a fresh worker
    assert grade(r"\boxed{1}", "1")


def test_unparseable_gold_is_an_error() -> None:
    result = grade_detailed(r"\boxed{5}", "")
    assert (result.correct, result.status) == (False, "error")


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("0.5", r"\frac{1}{2}", True),
        (r"\frac{1}{2}", "0.5", True),
        ("5", "x=5", True),
        ("x=5", "5", True),  # symmetric although math-verify's verify is not
        ("025", "25", True),
        ("3", "4", False),
        ("7", "7", True),
        (None, "7", False),
        ("9^{9^{9}}", "1", False),  # pre-check: not equivalent, no hang
    ],
)
def test_answers_equivalent(a: str | None, b: str | None, expected: bool) -> None:
    assert answers_equivalent(a, b) is expected


def _mixed_cases(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """n distinct (completion, gold) pairs over the answer kinds of the verdict table."""
    rng = random.Random(seed)
    makers = [
        lambda k: (rf"The answer is \boxed{{{k}}}.", str(k)),
        lambda k: (rf"\boxed{{{k}}}", f"{k + 1:03d}"),
        lambda k: (rf"\boxed{{\frac{{{k}}}{{{k + 1}}}}}", rf"\frac{{{k}}}{{{k + 1}}}"),
        lambda k: (rf"\boxed{{{k / 4}}}", rf"\dfrac{{{k}}}{{4}}"),
        lambda k: (rf"\boxed{{{k}\sqrt{{2}}}}", rf"\sqrt{{{2 * k * k}}}"),
        lambda k: (rf"\boxed{{x = {k}}}", str(k)),
        lambda k: (rf"\boxed{{{k}^\circ}}", rf"{k}^\circ"),
        lambda k: (rf"\boxed{{{k % 9}, {k % 9 + 1}}}", f"{k % 9 + 1},{k % 9}"),
    ]
    ks = rng.sample(range(1, 100_000), n)
    return [makers[i % len(makers)](k) for i, k in enumerate(ks)]


@pytest.mark.slow
def test_throughput_200_mixed_cases() -> None:
    """Grader speed; run with `pytest -m slow -s tests/unit/test_grading.py -k throughput`."""
    cases = _mixed_cases(200)
    warm_up()
    start = time.perf_counter()
    results = [grade_detailed(c, g) for c, g in cases]
    rate = len(cases) / (time.perf_counter() - start)
    other = _mixed_cases(200, seed=1)
    grade_many([r"\boxed{1}"] * 8, ["1"] * 8)  # start one worker per core before timing
    start = time.perf_counter()
    many = grade_many([c for c, _ in other], [g for _, g in other])
    rate_many = len(many) / (time.perf_counter() - start)
    print(f"\ngrader: {rate:.0f} problems/s sequential, {rate_many:.0f}/s with grade_many")
    # every 2nd maker of 8 (the off-by-one) is wrong: 200 - 25 = 175 correct
    assert sum(r.correct for r in results) == 175
    assert all(r.status == "ok" for r in results)


def test_a_worker_over_its_memory_limit_is_a_grader_error_and_the_parent_is_untouched() -> None:
    """RLIMIT_AS is applied in the worker; a job that would take more memory gets a MemoryError there,
    reported as status "error" at once (no waiting for the time limit), and the worker is replaced."""
    import resource

    worker = grading._POOL.acquire()
    limits = open(f"/proc/{worker.proc.pid}/limits").read()
    grading._POOL.release(worker)
    line = next(x for x in limits.splitlines() if x.startswith("Max address space"))
    assert line.split()[3] == str(grading.WORKER_MEMORY_LIMIT_BYTES), line  # checked before allocating
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.perf_counter()
    status, correct, detail = grading._run("allocate", str(2 * grading.WORKER_MEMORY_LIMIT_BYTES), "", 30.0)
    assert time.perf_counter() - t < 5.0
    assert (status, correct) == ("error", False) and detail.startswith(grading.OUT_OF_MEMORY), detail
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0 < 50 * 1024  # kB: the parent did not grow
    assert grading._run("allocate", str(1 << 20), "", 30.0)[0] == "ok"  # under the limit it works
    assert grade_detailed("\\boxed{1/2}", "0.5").correct  # the replacement worker grades


@pytest.mark.parametrize("pred, gold, status, correct", [
    ("40 + 32", "72", "unevaluated", False),           # the question restated: math-verify alone says 72
    ("x = 40+32", "72", "unevaluated", False),
    ("6 \\times 12", "72", "unevaluated", False),
    ("2^{10}", "1024", "ok", True),                    # a power is a closed form, as math-verify reads it
    ("3-1", "2", "unevaluated", False),
    ("11 + 94 = 105", "105", "ok", True),              # the last side is the value
    ("-5", "-5", "ok", True),                          # a leading minus is a sign
    ("1/2", "0.5", "ok", True),                        # fractions are values
    ("\\frac{1}{2}", "0.5", "ok", True),
    ("30^\\circ", "30", "ok", True),
    ("1\\,000", "1000", "ok", True),
    ("\\sqrt{2}+1", "1+\\sqrt{2}", "ok", True),        # a gold that is no plain number: math-verify decides
    ("40 + 33", "72", "unevaluated", False),
])
def test_a_number_asked_is_not_answered_by_a_computation_left_undone(pred, gold, status, correct) -> None:
    r = grading.grade_answer(pred, gold)
    assert (r.status, r.correct) == (status, correct), r
    if status == "unevaluated":
        assert r.detail == f"a number is asked and the answer is a computation: '{pred.rsplit('=', 1)[-1].strip()}'"


def test_a_policy_that_restates_the_question_in_a_final_answer_phrase_earns_no_reward() -> None:
    # SmolLM2 after 300 GRPO steps on two-digit sums, graded with the last-number extraction
    completion = "40 + 32 = 72\nYour final answer is 40 + 32\n#### 40 + 32 = 74\n#### 40 + 32 = 76"
    r = grade_detailed(completion, "72", extraction="last_number")
    assert (r.extracted, r.extraction, r.status, r.correct) == ("40 + 32", "phrase", "unevaluated", False)


def test_the_training_reward_counts_answers_that_restate_the_question_apart_from_grader_failures() -> None:
    from types import SimpleNamespace

    from rbctl.train.training_data import reward_function

    fn = reward_function(SimpleNamespace(data=SimpleNamespace(source="sums.jsonl", extraction="last_number")))
    completions = ["40 + 32 = 72.", "Your final answer is 40 + 32", "The final answer is $6 \\times 12$.", "71"]
    flags, failures, unevaluated = fn(completions, [SimpleNamespace(answer="72")] * 4)
    assert (flags, failures, unevaluated) == ([True, False, False, False], 0, 2)
