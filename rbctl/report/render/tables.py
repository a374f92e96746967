"""Writing tables: one result as CSV (numbers), Markdown and LaTeX (the same numbers, formatted).

Nothing here computes a statistic; the formatting helpers only turn fractions into percent.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from rbctl.report.stats import finite
from rbctl.store.atomic import write_atomic


def slug(name: str) -> str:
    """A file-name-safe form of a benchmark or metric name."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "x"


def plural(count: int, word: str) -> str:
    """``1 seed``, ``3 seeds``."""
    return f"{count} {word}{'s' * (count != 1)}"


def yes_no(held) -> str:
    """A criterion's outcome: yes, no, or not evaluated (None)."""
    return "not evaluated" if held is None else ("yes" if held else "no")


def criterion_cell(value, held, digits: int = 1) -> str:
    """A plateau criterion's measured value and whether it held ("0.96 ✓"); "–" when not measured."""
    return "–" if not finite(value) else f"{num(value, digits)} {'✓' if held else '✗'}"


def pct(v) -> str:
    """A fraction in percent, one decimal; "–" when not a finite number."""
    return f"{100 * float(v):.1f}" if finite(v) else "–"


def with_ci(v, lo, hi) -> str:
    """``52.3 [48.1, 56.0]`` (percent); the interval is left out where it is not finite."""
    if not finite(v):
        return "–"
    if not (finite(lo) and finite(hi)):
        return f"{100 * float(v):.1f} [n/a]"
    return f"{100 * float(v):.1f} [{100 * float(lo):.1f}, {100 * float(hi):.1f}]"


def delta(v, lo, hi) -> str:
    """A signed difference of fractions in points with its interval: ``+3.1 [-0.4, +6.6]``."""
    if not finite(v):
        return "–"
    if not (finite(lo) and finite(hi)):
        return f"{100 * float(v):+.1f} [n/a]"
    return f"{100 * float(v):+.1f} [{100 * float(lo):+.1f}, {100 * float(hi):+.1f}]"


def num(v, digits: int = 3) -> str:
    """A plain number with ``digits`` decimals; "–" when not finite."""
    return f"{float(v):.{digits}f}" if finite(v) else "–"


P_FLOOR = 0.001


def pval(p, missing: str = "–") -> str:
    """A p-value as every table, figure and headline prints it: three decimals, ``< 0.001`` below
    0.001 (never ``0.000``: no test gives certainty), ``missing`` when there is none (NaN: no test,
    e.g. `rbctl.report.stats.NOT_TESTABLE`)."""
    if not finite(p):
        return missing
    return f"< {P_FLOOR:g}" if float(p) < P_FLOOR else f"{float(p):.3f}"


def points_list(values) -> str:
    """Per-unit differences of fractions in points: ``+2.0, -1.5, +4.0``."""
    return ", ".join(f"{100 * float(v):+.1f}" for v in values)


def markdown_table(df: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table of ``df`` (no index); cells are str() of the values."""

    def cell(v) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    header = [cell(c) for c in df.columns]
    rows = [[cell(v) for v in row] for row in df.itertuples(index=False)]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


# Characters used in our headers and cells that pdflatex does not take as text.
_LATEX_SYMBOLS = {"χ²": r"$\chi^2$", "κ\\_eff": r"$\kappa_{\mathrm{eff}}$", "κ": r"$\kappa$", "Δ": r"$\Delta$", "×": r"$\times$",
                  "ρ": r"$\rho$", "–": "--", "−": "-", "≥": r"$\geq$", "<": r"$<$", "α": r"$\alpha$", "≈": r"$\approx$", "¾": "3/4",
                  "√": r"$\surd$", "·": r"$\cdot$", "τ": r"$\tau$", "σ²": r"$\sigma^2$", "σ": r"$\sigma$", "²": r"$^2$", "≤": r"$\leq$", "±": r"$\pm$", "∞": r"$\infty$"}


_LATEX_MORE = {">": r"$>$", "—": "---", "…": r"\ldots{}", "≠": r"$\neq$", "’": "'", "“": "``", "”": "''", "→": r"$\to$"}


def latex_table(df: pd.DataFrame) -> str:
    """A booktabs ``tabular`` of ``df``, ASCII only (symbols written as math)."""
    import unicodedata

    text = df.to_latex(index=False, escape=True)
    for k, v in {**_LATEX_SYMBOLS, **_LATEX_MORE}.items():
        text = text.replace(k, v)
    return unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")


_LATEX_SPECIALS = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
                   "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def latex_text(text: str) -> str:
    """Running text (a caption) for pdflatex, ASCII only: the report's inline Markdown (**bold**,
    `code`) dropped, LaTeX's special characters escaped, symbols written as math; any other non-ASCII
    character reduced to its ASCII letters (NFKD) or dropped."""
    import unicodedata

    text = re.sub(r"`([^`]+)`", r"\1", text.replace("**", ""))
    out = "".join(_LATEX_SPECIALS.get(ch, ch) for ch in text)
    for k, v in {**_LATEX_SYMBOLS, **_LATEX_MORE}.items():
        out = out.replace(k, v)
    return unicodedata.normalize("NFKD", out).encode("ascii", "ignore").decode("ascii")


def write_table(numbers: pd.DataFrame, shown: pd.DataFrame, tables_dir: Path, name: str) -> pd.DataFrame:
    """Write ``name.csv`` (``numbers``), ``name.md`` and ``name.tex`` (``shown``). Returns ``shown``."""
    write_atomic(Path(tables_dir) / f"{name}.csv", numbers.to_csv(index=False), kind="report")
    write_atomic(Path(tables_dir) / f"{name}.md", markdown_table(shown), kind="report")
    write_atomic(Path(tables_dir) / f"{name}.tex", latex_table(shown), kind="report")
    return shown


def write_csv(df: pd.DataFrame, path: Path) -> None:
    """One data file (the numbers behind a figure)."""
    write_atomic(Path(path), df.to_csv(index=False), kind="report")


def unequal_cells(rows: pd.DataFrame) -> list[str]:
    """Each row's compute keys that differ between its arms ("" for none; older rows have no column)."""
    col = rows["unequal_compute"] if "unequal_compute" in rows else pd.Series([""] * len(rows), index=rows.index)
    return [u if isinstance(u, str) else "" for u in col]


def call_cell(call_: str, unequal: str) -> str:
    """A comparison's call, and where its arms' runs differ in compute, that it does: the two arms did
    not get the same steps or batches, so Δ is not the methods' difference alone."""
    return f"{call_} (unequal compute: {unequal})" if unequal else str(call_)
