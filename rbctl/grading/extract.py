"""Answer extraction and pre-checks: pure string functions, no subprocess, no sympy.

The answer of a completion is the content of its LAST ``\\boxed{...}`` (see `rbctl.grading.verify`
for the whole grading contract). `precheck` rejects answers that could not finish in sympy anyway.
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
STATUSES = ("ok", "no_answer", "timeout", "error")


@dataclass(frozen=True)
class GradeResult:
    """Verdict of one grading call.

    status: ``ok`` (compared; ``correct`` is the verdict), ``no_answer`` (no boxed answer),
    ``timeout`` (exceeded ``timeout_s`` or rejected by a pre-check), ``error`` (math-verify raised,
    the gold did not parse, or the worker died). Only ``ok`` can be correct.
    """

    correct: bool
    extracted: str | None
    status: str
    detail: str = ""


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
