"""The report as a list of blocks (headings, paragraphs, bullet lists, tables, figures), rendered
twice in the same order: ``report.md`` (relative links to the figure files) and ``report.html`` (one
self-contained file: tables as HTML, figures inline as base64 PNG, no external assets).

Inline markup in text: ``code`` in backticks and **bold**; nothing else is interpreted.
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

CSS = """body{font-family:system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;max-width:1100px;margin:2em auto;
padding:0 1em;line-height:1.45;color:#222}
table{border-collapse:collapse;margin:0.6em 0 1.2em;font-size:0.9em}th,td{border:1px solid #ccc;padding:3px 7px;
text-align:left;vertical-align:top}th{background:#f2f2f2}tr:nth-child(even) td{background:#fafafa}
img{max-width:100%;height:auto;border:1px solid #eee}code{background:#f4f4f4;padding:0 3px}h1,h2,h3{line-height:1.2}"""


def _inline_html(text: str) -> str:
    out = html.escape(text, quote=False)
    out = _CODE.sub(lambda m: f"<code>{m.group(1)}</code>", out)
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

    def figure(self, png: Path, alt: str) -> None:
        self.blocks.append(("fig", Path(png), alt))

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
            else:
                out += [f"![{b[2]}]({b[1].relative_to(self.root).as_posix()})", ""]
        return "\n".join(out)

    def html(self, title: str) -> str:
        out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
               f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>"]
        for b in self.blocks:
            if b[0] == "h":
                out.append(f"<h{b[1]}>{_inline_html(b[2])}</h{b[1]}>")
            elif b[0] == "p":
                out.append(f"<p>{_inline_html(b[1])}</p>")
            elif b[0] == "ul":
                out.append("<ul>" + "".join(f"<li>{_inline_html(x)}</li>" for x in b[1]) + "</ul>")
            elif b[0] == "table":
                head = "".join(f"<th>{html.escape(str(c))}</th>" for c in b[1].columns)
                rows = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in r) + "</tr>"
                               for r in b[1].itertuples(index=False))
                out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
            else:
                data = base64.b64encode(b[1].read_bytes()).decode("ascii")
                out.append(f'<figure><img alt="{html.escape(b[2])}" src="data:image/png;base64,{data}"></figure>')
        out.append("</body></html>")
        return "\n".join(out) + "\n"
