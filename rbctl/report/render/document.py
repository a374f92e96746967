"""The report as a list of blocks (headings, paragraphs, bullet lists, tables, figures, footnotes),
rendered twice in the same order: ``report.md`` (relative links to the figure files) and
``report.html`` (one self-contained file: tables as HTML, figures inline as base64 PNG, no external
assets). In the HTML, every section after `Doc.fold` keeps its heading and figures in view and folds
its text and tables into one ``<details>`` element, so the page reads as the answer and its figures.

Inline markup in text: ``code`` in backticks, **bold**, [links](target) and footnote marks [^n];
nothing else is interpreted.
"""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from rbctl.report.render.tables import markdown_table

_CODE = re.compile(r"`([^`]+)`")
_BOLD = re.compile(r"\*\*(.+?)\*\*")
_LINK = re.compile(r"\[([^\]^]+)\]\(([^)\s]+)\)")
_NOTE = re.compile(r"\[\^(\w+)\]")

CSS = """body{font-family:system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;max-width:1100px;margin:1em auto;
padding:0 1em;line-height:1.4;color:#222}h1{font-size:1.6em;margin:0.3em 0}h2{font-size:1.3em;margin:0.8em 0 0.3em}
p{margin:0.4em 0}ul{margin:0.3em 0}figure.lead img{max-height:380px;width:auto}
table{border-collapse:collapse;margin:0.6em 0 1.2em;font-size:0.9em}th,td{border:1px solid #ccc;padding:3px 7px;
text-align:left;vertical-align:top}th{background:#f2f2f2}tr:nth-child(even) td{background:#fafafa}
img{max-width:100%;height:auto;border:1px solid #eee}code{background:#f4f4f4;padding:0 3px}h1,h2,h3{line-height:1.2}
details{margin:0.3em 0 0.8em}summary{cursor:pointer;color:#555}ol.notes{font-size:0.85em;color:#444}
figure{margin:0.6em 0}"""


def _inline_html(text: str) -> str:
    out = html.escape(text, quote=False)
    out = _CODE.sub(lambda m: f"<code>{m.group(1)}</code>", out)
    out = _LINK.sub(lambda m: f'<a href="{m.group(2)}">{m.group(1)}</a>', out)
    out = _NOTE.sub(lambda m: f'<sup><a href="#note-{m.group(1)}" id="ref-{m.group(1)}">{m.group(1)}</a></sup>', out)
    return _BOLD.sub(lambda m: f"<strong>{m.group(1)}</strong>", out)


@dataclass
class Doc:
    """Blocks in reading order; ``root`` is the report folder (figure paths are relative to it)."""

    root: Path
    blocks: list[tuple] = field(default_factory=list)

    def heading(self, level: int, text: str) -> None:
        self.blocks.append(("h", level, text))

    def para(self, text: str) -> None:
        self.blocks.append(("p", text))

    def bullets(self, items: list[str]) -> None:
        if items:
            self.blocks.append(("ul", list(items)))

    def table(self, shown: pd.DataFrame) -> None:
        self.blocks.append(("table", shown))

    def figure(self, png: Path, alt: str, css: str = "") -> None:
        """A figure; ``css``: a class of its HTML ``<figure>`` (``lead``: the first screen's, kept short)."""
        self.blocks.append(("fig", Path(png), alt, css))

    def notes(self, items: list[tuple[str, str]]) -> None:
        """Footnotes ``(mark, text)``, referred to in the text as ``[^mark]``."""
        if items:
            self.blocks.append(("notes", list(items)))

    def fold(self) -> None:
        """From here on, each section's text and tables fold into ``<details>`` in the HTML."""
        self.blocks.append(("fold",))

    def markdown(self) -> str:
        out = []
        for b in self.blocks:
            if b[0] == "h":
                out += ["#" * b[1] + " " + b[2], ""]
            elif b[0] == "p":
                out += [b[1], ""]
            elif b[0] == "ul":
                out += [f"- {x}" for x in b[1]] + [""]
            elif b[0] == "table":
                out += [markdown_table(b[1])]
            elif b[0] == "notes":
                out += [f"[^{mark}]: {text}" for mark, text in b[1]] + [""]
            elif b[0] == "fig":
                out += [f"![{b[2]}]({b[1].relative_to(self.root).as_posix()})", ""]
        return "\n".join(out)

    def html(self, title: str) -> str:
        out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
               f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>"]
        folding, held, figures = False, [], []

        def flush() -> None:  # a folded section: its text and tables in <details>, its figures in view
            if held:
                out.append("<details><summary>numbers and method</summary>")
                out.extend(held)
                out.append("</details>")
            out.extend(figures)
            held.clear()
            figures.clear()

        for b in self.blocks:
            if b[0] == "fold":
                folding = True
                continue
            if b[0] == "h" and b[1] <= 2:
                flush()
            text = _block_html(b)
            if folding and b[0] not in ("fig",) and not (b[0] == "h" and b[1] <= 2):
                held.append(text)
            elif folding and b[0] == "fig":
                figures.append(text)
            else:
                out.append(text)
        flush()
        out.append("</body></html>")
        return "\n".join(out) + "\n"


def _block_html(b: tuple) -> str:
    if b[0] == "h":
        return f"<h{b[1]}>{_inline_html(b[2])}</h{b[1]}>"
    if b[0] == "p":
        return f"<p>{_inline_html(b[1])}</p>"
    if b[0] == "ul":
        return "<ul>" + "".join(f"<li>{_inline_html(x)}</li>" for x in b[1]) + "</ul>"
    if b[0] == "notes":
        return '<ol class="notes">' + "".join(f'<li id="note-{m}" value="{m}">{_inline_html(t)}</li>' if m.isdigit() else
                                             f'<li id="note-{m}">{_inline_html(t)}</li>' for m, t in b[1]) + "</ol>"
    if b[0] == "table":
        head = "".join(f"<th>{html.escape(str(c))}</th>" for c in b[1].columns)
        rows = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in r) + "</tr>"
                       for r in b[1].itertuples(index=False))
        return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"
    data = base64.b64encode(b[1].read_bytes()).decode("ascii")
    css = f' class="{b[3]}"' if len(b) > 3 and b[3] else ""
    return f'<figure{css}><img alt="{html.escape(b[2])}" src="data:image/png;base64,{data}"></figure>'
