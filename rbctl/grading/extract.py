"""Answer extraction and pre-checks: pure string functions, no subprocess, no sympy.

Extraction policy (docs/method.md, "Answer extraction"; `EXTRACTION_POLICY` is the same policy as
written into each evaluation's ``summary.json``), in this order:

1. ``boxed``: if the completion contains ``\\boxed`` or ``\\fbox``, its answer is the content of the
   LAST box (`extract_boxed`); earlier boxes are ignored, so an answer split over several boxes
   keeps only its last part. If that last box is never closed (a truncated generation) there is
   no answer, and neither an earlier box nor a phrase is used instead.
2. ``phrase``: a completion without any box is searched for a final-answer phrase
   (`extract_phrase`): the last "Final Answer: X" or "final answer ... is X" (such as "The final
   answer is $34$." or the Minerva "Final Answer: The final answer is $34$. I hope it is
   correct."), wherever it is; without one, "answer is X" as the last words of the completion.
3. ``number`` (only where a config asks for it: ``extraction: last_number``): a completion with
   neither a box nor a phrase gives its last number (`extract_last_number`), as
   lm-evaluation-harness's GSM8K "flexible-extract" filter does ("6 + 6 = 12." gives 12).
4. ``none``: no answer.

Before an answer (or a gold answer) is compared, `join_digit_groups` reads numbers written with
thousands separators (``12\\,345``, ``1 000``, ``1{,}000``) as one number. `precheck` rejects
answers that could not finish in sympy.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass


# Pre-check limits. Real final answers are short and shallow; these bounds are far above any
# answer in AIME/AMC/MATH/GSM8K yet far below what makes sympy hang.
MAX_ANSWER_CHARS = 1000
MAX_BRACE_DEPTH = 50
MAX_RESULT_DIGITS = 1e6  # 3^{10^6} (477k digits) grades in 0.15 s; 9^{9^9} (3.7e8 digits) hangs.
STATUSES = ("ok", "no_answer", "unevaluated", "timeout", "error")
EXTRACTIONS = ("boxed", "phrase", "number", "none")  # how an answer was found, in the order they are tried
EXTRACTION_MODES = ("final", "last_number")  # final: boxed, then phrase; last_number: then the last number


@dataclass(frozen=True)
class GradeResult:
    """Verdict of one grading call.

    status: ``ok`` (compared; ``correct`` is the verdict), ``no_answer`` (no answer, or an empty
    box), ``unevaluated`` (a number is asked and the answer is a computation left undone,
    `unevaluated_computation`), ``timeout`` (exceeded ``timeout_s`` or rejected by a pre-check),
    ``error`` (math-verify raised, the gold did not parse, or the worker died). Only ``ok`` can be
    correct.
    extracted: the answer as written in the completion (before `join_digit_groups`).
    extraction: how ``extracted`` was found: one of EXTRACTIONS (``none``: it is None), or ``task``
    where a benchmark's own extractor found it (rbctl.eval.pipeline, the built-in tasks).
    """

    correct: bool
    extracted: str | None
    status: str
    detail: str = ""
    extraction: str = "none"


# ---------------------------------------------------------------------------------------------
# Extraction (pure Python, linear time in the completion length)
# ---------------------------------------------------------------------------------------------

_BOX_COMMANDS = ("\\boxed", "\\fbox")


def _last_box_start(text: str) -> tuple[int, int] | None:
    """Position of the last ``\\boxed``/``\\fbox`` command that is not a prefix of a longer name.

    Returns (start of the command, index just after its name) or None.
    """
    best: tuple[int, int] | None = None
    for cmd in _BOX_COMMANDS:
        end = len(text)
        while True:
            i = text.rfind(cmd, 0, end)
            if i < 0:
                break
            j = i + len(cmd)
            # `\boxedx` is another command; only `{`, whitespace or end of text may follow.
            if j >= len(text) or text[j] == "{" or text[j].isspace():
                if best is None or i > best[0]:
                    best = (i, j)
                break
            end = i + len(cmd) - 1
    return best


def _braced_group(text: str, open_idx: int) -> str | None:
    """Content of the brace group opening at ``text[open_idx] == "{"``; None if unclosed.

    A backslash escapes the next character, so ``\\{`` and ``\\}`` (set braces) do not count and
    ``\\\\{`` (a LaTeX line break, then a group) does.
    """
    depth = 0
    i = open_idx
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[open_idx + 1 : i]
        i += 1
    return None


def extract_boxed(text: str) -> str | None:
    """Content of the LAST ``\\boxed{...}`` / ``\\fbox{...}`` / ``\\boxed X`` in ``text``.

    Nested braces are matched; the content is returned stripped. ``\\boxed 5$`` (no braces) yields
    the text up to the next ``$`` or newline. Returns None if there is no box or the last box is
    never closed.
    """
    found = _last_box_start(text)
    if found is None:
        return None
    _, j = found
    k = j
    while k < len(text) and text[k].isspace():
        k += 1
    if k < len(text) and text[k] == "{":
        content = _braced_group(text, k)
        return None if content is None else content.strip()
    if k == j:  # `\boxed` at the very end of the text
        return None
    # `\boxed 5` form (as in Qwen2.5-Math's extractor): up to `$` or end of line.
    m = re.match(r"[^$\n]*", text[k:])
    content = m.group(0).strip().rstrip(".")
    return content or None


# Final-answer phrases, for completions without a box. The forms follow lm-evaluation-harness's
# minerva_math task (its `get_unnormalized_answer` reads "Final Answer: The final answer is X. I hope
# it is correct.") and math-verify's LatexExtractionConfig anchors ("final answer.{0,100}?\s+is X",
# "answer: X"), restricted to what cannot be read out of a line of reasoning: a plain
# "answer is X" counts only as the last words of the completion.
_PHRASE = re.compile(r"(?i)\b(?:(?P<final>final\s+answer\b)|answer\s+is(?![\w'’]))")
_FINAL_COLON = re.compile(r"\**\s*:")  # "Final Answer:", "**Final Answer**:"
# "final answer ... is X": at most 100 characters between, within one sentence (no ". ", no newline)
_UP_TO_IS = re.compile(r"(?:[^\n.]|\.(?!\s)){0,100}?\s+is(?![\w'’])", re.IGNORECASE)
_MATH_SPANS = (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$"))
_PHRASE_LEAD = re.compile(r"[\s:*]*")  # spaces, a colon, Markdown bold before the value
_PHRASE_TAIL = re.compile(r"[\s.*$]*(?:I hope it is correct\.?[\s.*$]*)?", re.IGNORECASE)
_PLAIN_VALUE = re.compile(r"[^\n]*?(?=\*\*|\.\s|\n|$)")  # up to bold, a sentence end or the line end
_PHRASE_WINDOW = 2 * MAX_ANSWER_CHARS  # a value is read within this many characters of its phrase


def _phrase_value(text: str, i: int) -> tuple[str, int, bool] | None:
    """The value that follows a phrase ending at ``text[i]``: (value, index after it, is math).

    ``$X$``, ``$$X$$``, ``\\(X\\)``, ``\\[X\\]``: the math content (a backslash escapes the next
    character, so ``\\$`` does not close it); else the rest of the line up to ``**`` or a sentence
    end (a period followed by a space). Trailing periods and commas are dropped. None if empty or
    unclosed within _PHRASE_WINDOW characters.
    """
    i = _PHRASE_LEAD.match(text, i).end()
    end_limit = min(len(text), i + _PHRASE_WINDOW)
    for opener, closer in _MATH_SPANS:
        if text.startswith(opener, i):
            j = i + len(opener)
            while j < end_limit and not text.startswith(closer, j):
                j += 2 if text[j] == "\\" else 1
            if j >= end_limit:
                return None
            value = text[i + len(opener) : j].strip().rstrip(".,").strip()
            return (value, j + len(closer), True) if value else None
    m = _PLAIN_VALUE.match(text, i, end_limit)
    value = m.group(0).strip().rstrip(".,").strip()
    return (value, m.end(), False) if value else None


def _final_answer_value(text: str, i: int) -> tuple[str, int, bool] | None:
    """The value of a "final answer" phrase whose words end at ``text[i]``.

    "Final Answer: $X$" gives X. Otherwise, as math-verify does, an ``is`` within 100 characters of
    the same sentence starts the value ("Final Answer: The largest $n$ is 34." gives 34, and so does
    "The final answer is 34."); "Final Answer: X" without one gives X.
    """
    colon = _FINAL_COLON.match(text, i)
    got = _phrase_value(text, colon.end()) if colon else None
    if got is not None and got[2]:
        return got
    copula = _UP_TO_IS.match(text, colon.end() if colon else i)
    if copula is not None and (got is None or copula.end() <= got[1]):
        return _phrase_value(text, copula.end())
    return got


def extract_phrase(text: str) -> str | None:
    """The answer of a final-answer phrase in ``text``, or None (see the module docstring).

    The last "final answer" phrase with a value (`_final_answer_value`) wins wherever it is;
    without one, "answer is X" counts when nothing but punctuation, Markdown bold or "I hope it is
    correct." follows X. Values are read by `_phrase_value`: ``$34$``, ``**34**``, ``34.`` all give
    ``34``.
    """
    matches = list(_PHRASE.finditer(text))
    for m in reversed(matches):  # the last phrase with a value wins: stop at the first from the end
        if m.group("final") is not None:
            got = _final_answer_value(text, m.end())
            if got is not None:
                return got[0]
    for m in reversed(matches):
        if m.group("final") is None:
            got = _phrase_value(text, m.end())
            if got is not None:
                return got[0] if _PHRASE_TAIL.match(text, got[1]).end() == len(text) else None
    return None


# A number as lm-evaluation-harness's GSM8K flexible-extract reads one (its regex
# ``(-?[$0-9.,]{2,})|(-?[0-9]+)``, the last match), without the dollar sign and trailing punctuation.
_LAST_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def extract_last_number(text: str) -> str | None:
    """The last number in ``text`` ("6 + 6 = 12." -> "12", "It is -3.5." -> "-3.5"), or None."""
    found = None
    for found in _LAST_NUMBER.finditer(text):
        pass
    return found.group(0).rstrip(",") if found is not None else None


def extract_final_answer(text: str, mode: str = "final") -> tuple[str | None, str]:
    """``(answer, kind)`` of a completion by the extraction policy; kind is one of EXTRACTIONS.

    Any ``\\boxed``/``\\fbox`` makes it ``boxed`` (the last box; None if it is unclosed, with kind
    ``none``); only a completion without a box is searched for a phrase, and with ``mode``
    ``last_number`` one without a phrase gives its last number.
    """
    if _last_box_start(text) is not None:
        answer = extract_boxed(text)
        return answer, "boxed" if answer is not None else "none"
    answer = extract_phrase(text)
    if answer is not None:
        return answer, "phrase"
    if mode == "last_number":
        answer = extract_last_number(text)
        return answer, "number" if answer is not None else "none"
    return None, "none"


# Thousands separators. Only groups of exactly three digits after a first group of one to three
# digits are joined, so "1, 2", "(1, 2)", "2 \pi", "12 5" keep their meaning.
# - LaTeX spacing and the comma idioms of MATH solutions ("10{,}000", "10,\!000") and plain or thin
#   spaces (LaTeX ignores spaces in math mode: "1 000" is printed as 1000): always a separator.
#   math-verify reads `12\,345` as 12 + 345 and `1 000` as 1*0, which made `\boxed{1 000}` equal 0.
# - A plain comma ("1,000"): math-verify already reads an answer that is nothing but such a number
#   as one number, yet `x = 1,000` as the set {1, 0}. We join plain commas only when every comma of
#   the answer is inside such a number and the answer has no tuple, interval or set delimiter, so
#   "(1,500)" stays an interval and "1,000, 2" a list.
_SPACE_SEPARATOR = (
    r"(?:\s*(?:\\,|\\thinspace(?![A-Za-z])|\\:|\\;|\\ |\{,\}|,\\!)\s*"  # LaTeX spacing, {,} and ,\!
    "|[ \u00a0\u2009\u202f]+)"  # plain, no-break, thin and narrow no-break spaces
)
# Not preceded by a digit, a decimal point or a one-character exponent/subscript (x^2 000).
_GROUPED_NUMBER = re.compile(rf"(?<![\d.^_])\d{{1,3}}(?:{_SPACE_SEPARATOR}\d{{3}})+(?!\d)")
_COMMA_NUMBER = re.compile(r"(?<![\d.^_])\d{1,3}(?:,\d{3})+(?!\d)")
_TUPLE_DELIMITERS = re.compile(r"[()\[\]]|\\[{}]|\\langle|\\rangle")


def join_digit_groups(answer: str) -> str:
    """``answer`` with thousands separators removed from its numbers (see the rules above).

    ``12\\,345`` -> ``12345``, ``1 000.5`` -> ``1000.5``, ``1{,}000`` -> ``1000``,
    ``x = 1,000`` -> ``x = 1000``; ``1, 2``, ``(1,500)``, ``2 \\pi`` are returned unchanged.
    """
    answer = _GROUPED_NUMBER.sub(lambda m: re.sub(r"\D", "", m.group(0)), answer)
    if "," in answer and _TUPLE_DELIMITERS.search(answer) is None:
        numbers = list(_COMMA_NUMBER.finditer(answer))
        if sum(m.group(0).count(",") for m in numbers) == answer.count(","):
            answer = _COMMA_NUMBER.sub(lambda m: m.group(0).replace(",", ""), answer)
    return answer


# The policy as written into summary.json (`protocol.extraction`): what the functions above do.
EXTRACTION_POLICY = {
    "order": "boxed, then phrase: a phrase is looked for only in a completion without any box",
    "boxed": "content of the last \\boxed{...}, \\fbox{...} or \\boxed X; earlier boxes are ignored; "
             "an unclosed last box is no answer",
    "phrase": "the last 'Final Answer: X' or 'final answer ... is X' (at most 100 characters between, "
              "one sentence); without one, 'answer is X' ending the completion; X is $X$, $$X$$, "
              "\\(X\\), \\[X\\], **X** or the rest of the sentence",
    "numbers": "in prediction and gold, digit groups of three after a first group of 1-3 digits are "
               "joined across \\, \\: \\; \\thinspace '\\ ' {,} ,\\! and spaces (U+0020, U+00A0, U+2009, "
               "U+202F); across plain commas only when every comma of the answer is such a separator "
               "and the answer has no brackets",
    "computation": "where the gold is a plain number, an answer whose last side (after its last '=') joins two "
                   "numbers by +, -, *, ×, ·, ÷, \\times, \\cdot or \\div is wrong (status unevaluated), "
                   "never evaluated by math-verify; fractions and powers are values",
}




def extraction_kinds(mode: str = "final") -> tuple[str, ...]:
    """The `EXTRACTIONS` kinds extraction ``mode`` can give ("number" only under last_number)."""
    return tuple(k for k in EXTRACTIONS if k != "number" or mode == "last_number")


def extraction_policy(mode: str = "final") -> dict[str, str]:
    """`EXTRACTION_POLICY` for extraction ``mode`` (EXTRACTION_MODES): last_number adds its step."""
    if mode == "final":
        return EXTRACTION_POLICY
    return {**EXTRACTION_POLICY, "order": "boxed, then phrase, then number: each only where the one before found nothing",
            "number": "without a box or a phrase, the last number of the completion (as lm-evaluation-harness's "
                      "GSM8K flexible-extract filter reads one)"}


# ---------------------------------------------------------------------------------------------
# Pre-checks (pure Python): reject inputs that would hang sympy before they reach it
# ---------------------------------------------------------------------------------------------

_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_BIG_FACTORIAL = re.compile(r"(\d{6,})\s*!")


def _brace_depth(s: str) -> int:
    depth = best = 0
    for ch in s:
        if ch == "{":
            depth += 1
            best = max(best, depth)
        elif ch == "}":
            depth -= 1
    return best


def _log10_literal(number: str) -> float:
    """log10 of a decimal literal (0 for zero), without overflowing on 400-digit literals."""
    integer = number.split(".")[0].lstrip("0")
    if len(integer) > 300:
        return len(integer) - 1 + math.log10(float("0." + integer[:17]) * 10)
    value = float(number)
    return math.log10(value) if value > 0 else 0.0


def _tower_log10(s: str, i: int) -> tuple[float, int] | None:
    """log10 of the numeric power tower starting at ``s[i]`` (``9^{9^{9}}``, ``10^{100}``).

    Grammar: number [ ``^`` ( digit | ``{`` tower ``}`` ) ]. Uses log10(b^E) = E * log10(b), with
    E = 10^log10(E) capped to inf, so no big number is ever built. Returns (log10 value, end) or
    None when the text at ``i`` is not a number.
    """
    m = _NUMBER.match(s, i)
    if m is None:
        return None
    base_log = _log10_literal(m.group(0))
    j = m.end()
    while j < len(s) and s[j] == " ":
        j += 1
    if j >= len(s) or s[j] != "^":
        return base_log, m.end()
    j += 1
    while j < len(s) and s[j] == " ":
        j += 1
    if j < len(s) and s[j].isdigit():  # LaTeX `9^99` is 9^9 * 9: a single-digit exponent
        exp_log, end = math.log10(int(s[j])) if s[j] != "0" else -math.inf, j + 1
    elif j < len(s) and s[j] == "{":
        inner = _tower_log10(s, j + 1)
        if inner is None:
            return base_log, m.end()
        exp_log, k = inner
        while k < len(s) and s[k] == " ":
            k += 1
        if k >= len(s) or s[k] != "}":  # exponent is not purely numeric, e.g. `2^{n+1}`
            return base_log, m.end()
        end = k + 1
    else:
        return base_log, m.end()
    if base_log <= 0:  # base <= 1: the power does not grow
        return 0.0, end
    exponent = math.inf if exp_log > 300 else 10.0**exp_log
    return exponent * base_log, end


# A number as a gold answer: optionally signed, with an optional decimal part, optionally in $...$.
_PLAIN_NUMBER = re.compile(r"\$?\s*-?\d+(\.\d+)?\s*\$?")
# Two numbers joined by an arithmetic operator (a fraction's / and \frac, and a power, are values here).
_OPERATION = re.compile(r"\d\s*(?:[-+*×·÷]|\\times|\\cdot|\\div|\\ast)\s*[{(]?\s*-?\d")


def unevaluated_computation(pred: str, gold: str) -> str | None:
    """Why ``pred`` is no answer to ``gold``, or None: where the gold is a plain number, the answer
    must be a value, not a computation left for the grader to do. Its last side (after its last
    ``=``, so ``11 + 94 = 105`` answers 105) may not join two numbers by an arithmetic operator
    (+, -, *, ×, ·, ÷, \\times, \\cdot, \\div): math-verify would evaluate ``40 + 32`` to 72, and a
    policy rewarded for it learns to restate the question (docs/method.md, "Answer extraction").
    A fraction (``1/2``, ``\\frac{1}{2}``), a power (``2^{10}``, a closed form) and a leading minus
    are values. Both arguments are as given to math-verify (thousands separators joined)."""
    if not _PLAIN_NUMBER.fullmatch(gold.strip()):
        return None
    last = pred.rsplit("=", 1)[-1]
    m = _OPERATION.search(last)
    if m is None:
        return None
    return f"a number is asked and the answer is a computation: '{last.strip()}'"


def precheck(answer: str) -> str | None:
    """Why ``answer`` must not be handed to sympy, or None if it may be.

    Checks: length > MAX_ANSWER_CHARS; brace depth > MAX_BRACE_DEPTH; a numeric power tower or
    factorial with more than MAX_RESULT_DIGITS digits.
    """
    if len(answer) > MAX_ANSWER_CHARS:
        return f"answer has {len(answer)} characters (> {MAX_ANSWER_CHARS})"
    depth = _brace_depth(answer)
    if depth > MAX_BRACE_DEPTH:
        return f"braces nested {depth} deep (> {MAX_BRACE_DEPTH})"
    for m in _NUMBER.finditer(answer):
        tower = _tower_log10(answer, m.start())
        if tower is not None and tower[0] > MAX_RESULT_DIGITS:
            digits = "more than 10^300" if math.isinf(tower[0]) else f"~{tower[0]:.3g}"
            return f"power tower at {answer[m.start():m.start() + 20]!r} has {digits} digits"
    m = _BIG_FACTORIAL.search(answer)
    if m is not None and int(m.group(1)) > 100_000:
        return f"factorial of {m.group(1)}"
    return None


_CHOICE_GOLD = re.compile(r"^\(?([A-E])\)?$")
_CHOICE_PRED = re.compile(r"^\(([A-E])\)")
_TEXT_CMD = re.compile(r"\\(?:text|textbf|mathrm|mathbf)\s*\{([^{}]*)\}")


def _strip_text_commands(s: str) -> str:
    return _TEXT_CMD.sub(r"\1", s).replace("$", "").strip()


def choice_letter(gold: str) -> str | None:
    """The letter of a multiple-choice gold answer (``B``, ``(B)``, ``\\text{(B)}``), else None."""
    m = _CHOICE_GOLD.match(_strip_text_commands(gold))
    return m.group(1) if m else None
