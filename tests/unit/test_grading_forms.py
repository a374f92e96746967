"""Answer forms the grader must score right: thousands separators, final-answer phrases, several
boxes, and agreement with math-verify's own test cases (docs/method.md, "Answer extraction")."""

from __future__ import annotations

import pytest

from rbctl.grading.extract import extract_final_answer, extract_phrase, join_digit_groups
from rbctl.grading.verify import answers_equivalent, grade_detailed, warm_up


@pytest.fixture(scope="module", autouse=True)
def _worker_ready():
    warm_up()


# ---------------------------------------------------------------------------------------------
# Thousands separators
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("answer", "joined"),
    [
        (r"12\,345", "12345"),
        ("1 000", "1000"),
        ("1{,}000", "1000"),
        ("1,000", "1000"),
        (r"10,\!000", "10000"),  # the MATH solutions' idiom
        (r"32,\! 349", "32349"),
        ("1\u2009000", "1000"),  # thin space
        ("1\u202f000", "1000"),  # narrow no-break space
        ("1\u00a0000", "1000"),  # no-break space
        (r"1\thinspace 000", "1000"),
        (r"1\thinspace000", "1000"),
        (r"1\:000", "1000"),
        (r"1\;000", "1000"),
        (r"1\ 000", "1000"),
        (r"1\,000\,000", "1000000"),
        ("1 000 000", "1000000"),
        (r"12\,345.5", "12345.5"),  # the decimal part is kept
        ("12,345.67", "12345.67"),
        ("-1 000", "-1000"),
        ("x = 1 000", "x = 1000"),
        ("x = 1,000", "x = 1000"),  # math-verify alone reads this as x = {0, 1}
        (r"1,000\%", r"1000\%"),
        (r"\$1,000", r"\$1000"),
        (r"\frac{1 000}{3}", r"\frac{1000}{3}"),
        (r"(1{,}000, 2\,000)", "(1000, 2000)"),  # unambiguous separators are joined inside tuples too
        # unchanged: not groups of exactly three digits after a first group of one to three
        ("1, 2", "1, 2"),
        ("(1, 2)", "(1, 2)"),
        (r"2 \pi", r"2 \pi"),
        ("1,2", "1,2"),
        ("1,23", "1,23"),
        ("3, 000", "3, 000"),
        ("32, 349", "32, 349"),
        ("12 34", "12 34"),
        ("1 0000", "1 0000"),
        ("1234 567", "1234 567"),
        ("12,34,567", "12,34,567"),
        ("0.123 456", "0.123 456"),  # digits after a decimal point are not a first group
        ("x^2 000", "x^2 000"),
        # plain commas: only when every comma is a separator and there is no bracket
        ("(1,500)", "(1,500)"),  # an interval
        ("[1,000, 2]", "[1,000, 2]"),
        (r"\{1,000\}", r"\{1,000\}"),
        ("1,000, 2", "1,000, 2"),  # a list: one comma is not a separator
        ("x=1,y=234", "x=1,y=234"),
    ],
)
def test_join_digit_groups(answer: str, joined: str) -> None:
    assert join_digit_groups(answer) == joined


SEPARATOR_VERDICTS = [
    (r"\boxed{12\,345}", "12345", True),
    (r"\boxed{12\,345}", "357", False),  # math-verify alone reads 12\,345 as 12 + 345
    (r"\boxed{1 000}", "1000", True),
    (r"\boxed{1 000}", "0", False),  # math-verify alone reads 1 000 as 1*0: it was graded equal to 0
    (r"\boxed{1{,}000}", "1000", True),
    (r"\boxed{1,000}", "1000", True),
    ("\\boxed{1\u2009000}", "1000", True),
    ("\\boxed{1\u202f000}", "1000", True),
    (r"\boxed{1\thinspace 000}", "1000", True),
    (r"\boxed{1\;000}", "1000", True),
    (r"\boxed{x = 1,000}", "1000", True),
    (r"\boxed{\$12\,345.50}", "12345.5", True),
    (r"\boxed{12345}", r"12\,345", True),  # the gold is read the same way
    (r"\boxed{1\,000\,000}", "10^6", True),
    # no false positives for tuples, intervals, lists, products
    (r"\boxed{1, 2}", "12", False),
    (r"\boxed{1, 2}", r"\{1,2\}", True),
    (r"\boxed{(1, 2)}", "12", False),
    (r"\boxed{(1,500)}", "1500", False),
    (r"\boxed{(1,500)}", "(1,500)", True),
    (r"\boxed{[1, 2)}", "[1,2)", True),
    (r"\boxed{2 \pi}", r"2\pi", True),
    (r"\boxed{2 \pi}", "2", False),
    (r"\boxed{32, 349}", "32349", False),
    (r"\boxed{1,000, 2}", "1000", False),
]


@pytest.mark.parametrize(("completion", "gold", "expected"), SEPARATOR_VERDICTS)
def test_thousands_separators_are_graded_as_one_number(completion: str, gold: str, expected: bool) -> None:
    result = grade_detailed(completion, gold)
    assert (result.correct, result.status, result.extraction) == (expected, "ok", "boxed"), result


def test_separated_numbers_vote_together() -> None:
    assert answers_equivalent(r"12\,345", "12345")
    assert answers_equivalent("1 000", "1{,}000")
    assert not answers_equivalent("1 000", "0")
    assert not answers_equivalent("1, 2", "12")


# ---------------------------------------------------------------------------------------------
# Final-answer phrases (only without a box) and several boxes
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("... so 2 + 32 = 34. The final answer is $34$.", ("34", "phrase")),
        ("The final answer is 34", ("34", "phrase")),
        ("The final answer is **34**.", ("34", "phrase")),
        ("The final answer is 3.5.", ("3.5", "phrase")),  # a decimal point is not a sentence end
        ("Final Answer: The final answer is $[2,5)$. I hope it is correct.", ("[2,5)", "phrase")),  # Minerva
        ("Final Answer: 34", ("34", "phrase")),
        ("Final Answer: 34.\nThat is all.", ("34", "phrase")),
        ("**Final Answer:** $\\frac{1}{2}$", ("\\frac{1}{2}", "phrase")),
        ("**Final Answer**: 34.", ("34", "phrase")),
        ("Final Answer: The largest $n$ is 34.", ("34", "phrase")),  # math-verify's "final answer ... is"
        ("the final answer, after simplification, is $5$", ("5", "phrase")),
        ("The final answer is $$ 1 000 $$.", ("1 000", "phrase")),
        ("The final answer is \\(7\\).", ("7", "phrase")),
        ("The final answer is \\[ 8 \\]", ("8", "phrase")),
        ("The final answer is $\\$10$.", ("\\$10", "phrase")),  # an escaped $ does not close the math
        ("So the answer is 34.", ("34", "phrase")),
        ("So the answer is: $34$.\n\nI hope it is correct.", ("34", "phrase")),
        ("The final answer is 34. I hope it is correct. Note: the answer is wrong", ("34", "phrase")),
        ("the answer is 5 but then the answer is 6.", ("6", "phrase")),  # the last phrase wins
        # no phrase
        ("The answer is 34 if n is odd. Otherwise it is 35.", (None, "none")),  # "answer is" not at the end
        ("Let's find the final answer. It is 5.", (None, "none")),  # "is" in another sentence
        ("My answer isn't 5.", (None, "none")),
        ("The final answer is $5", (None, "none")),  # unclosed math
        ("The final answer is", (None, "none")),
        ("answer: 5", (None, "none")),
        ("no answer here", (None, "none")),
        # a box decides, wherever the phrase is
        ("The final answer is 4, I mean \\boxed{3}.", ("3", "boxed")),
        ("\\boxed{3}. Final Answer: The final answer is $4$.", ("3", "boxed")),
        ("The final answer is $4$. \\boxed{4", (None, "none")),  # unclosed last box: no answer
        # several boxes: the last one (an answer split over boxes keeps only its last part)
        ("The integers are \\boxed{-2} and \\boxed{1}.", ("1", "boxed")),
    ],
)
def test_extract_final_answer(completion: str, expected: tuple[str | None, str]) -> None:
    assert extract_final_answer(completion) == expected


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("6 + 6 = 12.", ("12", "number")),  # the last number, its sentence's period dropped
        ("The sum of 7 and 8 is 15, and 15 is odd", ("15", "number")),
        ("It is -3.5.", ("-3.5", "number")),
        ("That makes 1,000,", ("1,000", "number")),  # thousands commas kept (join_digit_groups reads them)
        ("The answer is 34 if n is odd. Otherwise it is 35.", ("35", "number")),  # no phrase: the last number
        ("The answer is 12.", ("12", "phrase")),  # a phrase before the last number
        ("3 + 4 = \\boxed{7}. Check: 7 - 4 = 3", ("7", "boxed")),  # a box before either
        ("3 + 4 = \\boxed{7", (None, "none")),  # an unclosed last box is still no answer
        ("no digits here", (None, "none")),
    ],
)
def test_last_number_extraction(completion: str, expected: tuple[str | None, str]) -> None:
    assert extract_final_answer(completion, "last_number") == expected
    if expected[1] == "number":  # the default extraction never reads a bare number
        assert extract_final_answer(completion) == (None, "none")


PHRASE_VERDICTS = [
    ("... The final answer is $34$.", "34", True),
    ("Final Answer: The final answer is $34$. I hope it is correct.", "34", True),
    ("Final Answer: The final answer is $\\frac{1}{2}$. I hope it is correct.", "0.5", True),
    ("**Final Answer:** $33$", "34", False),
    ("The final answer is **12\\,345**.", "12345", True),  # the separators apply to phrases too
    ("So the answer is 34.", "34", True),
    ("The answer is 34 if n is odd. Otherwise it is 35.", "34", False),
]


@pytest.mark.parametrize(("completion", "gold", "expected"), PHRASE_VERDICTS)
def test_final_answer_phrases_are_graded(completion: str, gold: str, expected: bool) -> None:
    result = grade_detailed(completion, gold)
    assert result.correct is expected, result
    assert result.extraction == ("phrase" if result.extracted is not None else "none")


def test_several_boxes_grade_the_last_one() -> None:
    """An answer split over several boxes keeps only its last box: right for AMC/AIME (one answer),
    wrong for a two-part answer written as two boxes (math-verify would join them)."""
    split = r"The integers are \boxed{-2} and \boxed{1}."
    assert grade_detailed(split, "1").correct
    assert not grade_detailed(split, "1,-2").correct
    assert grade_detailed(r"\boxed{1,-2}", "1,-2").correct  # one box with both parts is right


@pytest.mark.slow
def test_phrase_extraction_is_linear_on_long_inputs() -> None:
    """Extraction time grows linearly with the input: 8x the text takes about 8x the time (a
    quadratic scan would take 64x). The ratio of two measurements of this process's CPU time, each
    the fastest of five, so other work on a loaded machine neither counts nor fails a time limit."""
    import time

    def fastest(text: str) -> float:
        times = []
        for _ in range(5):
            start = time.process_time()
            extract_phrase(text)
            times.append(time.process_time() - start)
        return min(times)

    for unit, n in [("The final answer is ", 8000), ("answer is $", 8000), ("Final Answer: $", 8000),
                    ("final answer ", 1000), ("answer is 5 ", 8000)]:
        ratio = fastest(unit * (8 * n)) / max(fastest(unit * n), 1e-6)
        assert ratio < 32.0, (unit, ratio)  # linear: ~8-15 (caches); quadratic: ~64


# ---------------------------------------------------------------------------------------------
# Agreement with math-verify's own test cases
# ---------------------------------------------------------------------------------------------

# A representative subset of huggingface/Math-Verify tests/test_all.py (commit cf14bc4) whose
# prediction is boxed, plus the no-box cases that rbctl's phrases cover: (completion, gold,
# math-verify's verdict). Long predictions are cut to the sentence that holds the answer, and golds
# are written the way rbctl's benchmarks carry them (bare, without `$...$`).
MATH_VERIFY_CASES = [
    (r"If $2-x=p$, then $x=2-p$. Thus $x-p=\boxed{2-2p}$.", "2-2p", True),
    ("\\boxed{\n\\begin{pmatrix} 0 & 3 \\\\ 0 & -1 \\end{pmatrix}\n}.\n\\end{align*}",
     r"\begin{pmatrix} 0 & 3 \\ 0 & -1 \end{pmatrix}", True),
    (r"Therefore, the polar coordinates are $\boxed{\left( 3, \frac{\pi}{2} \right)}.$", r"(3, \frac{\pi}{2})", True),
    (r"Therefore, $\boxed{\text{Evelyn}}$ is our answer.", r"\text{Evelyn}", True),
    (r"Hence, the angle between the lines is $\boxed{90^\circ}.$", r"90^\circ", True),
    (r"\sqrt{117} = \boxed{3\sqrt{13}}. \end{align*}", r"3\sqrt{13}", True),
    (r"\[p(8) = \frac{q(8) + 8}{8^2 - 1} = \boxed{\frac{3}{56}}.\]", r"\frac{3}{56}", True),
    (r"$$\frac{1}{2}\times 3 \times 10 = \boxed{15\mbox{ cm}^2}.$$", r"15\mbox{ cm}^2", True),
    (r"Checking, we find that the only integer roots are $\boxed{-2,1}.$", "-2,1", True),
    (r"Then, $129^{34}+96^{38} \equiv \boxed{9} \pmod{11}.$", "9", True),
    (r"for a quotient of $\boxed{204_5}$.", "204_5", True),
    (r"we find $(p,q,r) = \boxed{(6,31,-1)}.$", "(6,31,-1)", True),
    (r"By the quadratic formula, $x = \boxed{1 \pm \sqrt{19}}.$", r"1 \pm \sqrt{19}", True),
    (r"so the answer is $\boxed{\{1\pm\sqrt{5},-2\}}.$", r"\{1\pm\sqrt{5},-2\}", True),
    (r"Hence, $\boxed{f(2) < f(1) < f(4)}.$", "f(2) < f(1) < f(4)", True),
    ("By sum-to-product,\n\\[\\sin (a + b) - \\sin (a - b) = \\boxed{2 \\sin b \\cos a}.\\]", r"2 \sin b \cos a", True),
    (r"The answer is $\boxed{\frac{\pi r}{h+r}}$.", r"\frac{\pi r}{h+r}", True),
    (r"The solution set is $\boxed{[-1, -\tfrac12) \cup (-\tfrac12, 0) \cup (0, 1) \cup (1, \infty)}.$",
     r"[-1, -\frac{1}{2}) \cup (-\frac{1}{2}, 0) \cup (0, 1) \cup (1, \infty)", True),
    (r"The answer is $\boxed{\sqrt 2+\sqrt 5}$", r"\sqrt{2}+\sqrt{5}", True),
    (r"Therefore $\boxed{\frac94\pi}$.", r"\frac{9}{4}\pi", True),
    (r"x \in \boxed{\{-1\} \cup [0,7)}.$", r"\{-1\} \cup [0,7)", True),
    (r"$\boxed{28 percent}", r"28\%", True),
    (r"Therefore, $\boxed{14{,}916}$ is our answer.", "14916", True),
    (r"Paula's investment is worth $\boxed{\$16,\!386.20}$ at the end of the 5-year period.", "16386.20", True),
    (r"Paula's investment is worth $\boxed{\$16386.17}$ after 5 years. I hope it is correct.", "16386.17", True),
    (r"$$\frac{1 }{5 }=\boxed{20 \%}. $$ Final Answer: The final answer is $20 \%$.", "20", True),
    (r"which is $\boxed{[-3, 2]}$. I apologize for the mistake. The domain is $\boxed{(-\infty, -3] \cup [2, \infty)}$.",
     "[-3,2]", False),
    (r"the line intersects $\overline{CD}$ is $\boxed{(0, 0)}$. Final Answer: The final answer is $(0, 0)$.",
     r"(\tfrac{27}{8},\tfrac{15}{8})", False),
    (r"Thus, $(t,u) = \boxed{\left( \frac{4}{3}, -\frac{1}{3} \right)}.$", r"\left( \frac{4}{3}, -\frac{1}{3} \right)", True),
    (r"$1 \times 5! \times 5! = 120 \times 120 = \boxed{14400}$. Final Answer: The final answer is 14400.", "14400", True),
    (r"$$-1(x-1)+2(y-1)+1(z-1)=0\Rightarrow\boxed{x-2y+z-1=0}.$$", "x-2y+z-1=0", True),
    (r"Thus, the values of \( k \) are: \[ \boxed{[-4, 0]} \]", "[-4,0]", True),
    (r"the product is \(\boxed{1112122_3}\).", "1112112_3", False),
    (r"$\boxed{\text{(C)}}.$", r"\text{C}", True),
    (r"is $\boxed{11,\! 111,\! 111,\! 100}$", "11111111100", True),
    (r"is $\boxed{32,\! 349}$", "32349", True),
    (r"is $\boxed{32, 349}$", "32349", False),
    (r"Thus, the answer is $x \in \boxed{(2,12) \cup (12,102)}$", r"(2, 12) \cup (12, 102)", True),
    (r"Thus, the area of the trapezoid is \(\boxed{189}\) square centimeters.", "189", True),
    # no box: final-answer phrases
    (r"Final Answer: The final answer is \((-6, 10)\). I hope it is correct.", "(-6, 10)", True),
    (r"Final Answer: The largest $n$ is 34.", "34", True),
    (r"Final Answer: The volume of $ABCDEFGH$ is 120. I hope it is correct.", "120", True),
    (r"The answer is $\frac{1}{3}.$", r"\frac{1}{3}", True),
    (r"The answer is $1/3.$", "1", False),
    (r"the domain is the interval $(0, 1)$. Final Answer: The final answer is $(0, 1)$. I hope it is correct.", "[0,1)", False),
    (r"Final Answer: The final answer is 12,000,023. I hope it is correct. <|im_start|>user", "12000023", True),
    (r"Final Answer: The final answer is $14{,}916$. I hope it is correct.", "14916", True),
    (r"Anna pays approximately $7.78 for her fudge. Final Answer: The final answer is 7.78.", "7.78", True),
]


@pytest.mark.parametrize(("completion", "gold", "expected"), MATH_VERIFY_CASES)
def test_agrees_with_math_verify_test_suite(completion: str, gold: str, expected: bool) -> None:
    result = grade_detailed(completion, gold)
    assert (result.correct, result.status) == (expected, "ok"), result


# Where rbctl's policy differs from math-verify's extraction, by design (math-verify's verdict: True).
POLICY_DIFFERENCES = [
    # math-verify joins the boxes of "\boxed{-2} and \boxed{1}"; rbctl grades the last box only
    pytest.param(r"The integers are \boxed{-2} \quad \text{and} \quad \boxed{1}.", r"1,-2", id="several-boxes"),
    # math-verify prefers a "final answer" phrase to a box; in rbctl a box always decides
    pytest.param(r"$0.05 \cdot 10,200 = \boxed{255}$ So he has $10,455. Final Answer: The final answer is $10,455$.",
                 "10455", id="box-before-phrase"),
]


@pytest.mark.parametrize(("completion", "gold"), POLICY_DIFFERENCES)
def test_documented_differences_from_math_verify(completion: str, gold: str) -> None:
    result = grade_detailed(completion, gold)
    assert (result.correct, result.status, result.extraction) == (False, "ok", "boxed"), result
