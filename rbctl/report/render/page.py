"""Where the renderers write: the document being built, the report's output folders
(``tables/``, ``figures/``, ``data/``) and one style per arm, the same in every figure."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from rbctl.report.render.document import Doc
from rbctl.report.render.figures import arm_styles, panel_groups, save_figure
from rbctl.report.render.tables import write_csv, write_table
from rbctl.store.rundir import REPORT_DATA, REPORT_FIGURES, REPORT_TABLES


class Page:
    """The output of one report: ``doc`` (blocks of report.md and report.html), the folders the
    tables, figures and data files go to, and the arms' styles and panels."""

    def __init__(self, out: Path, info: dict[str, tuple[str, str]]):
        self.out = Path(out)
        self.doc = Doc(self.out)
        self.tables, self.figures, self.data = self.out / REPORT_TABLES, self.out / REPORT_FIGURES, self.out / REPORT_DATA
        for d in (self.tables, self.figures, self.data):
            d.mkdir(parents=True, exist_ok=True)
        self.styles, self.groups = arm_styles(info), panel_groups(info)

    def figure(self, fig, name: str, alt: str, css: str = "") -> None:
        self.doc.figure(save_figure(fig, self.figures, name), alt, css)

    def table(self, numbers: pd.DataFrame, shown: pd.DataFrame, name: str) -> None:
        self.doc.table(write_table(numbers, shown, self.tables, name))

    def data_file(self, df: pd.DataFrame, name: str) -> None:
        """``data/<name>``: the numbers behind a figure."""
        write_csv(df, self.data / name)

    def numbers(self, df: pd.DataFrame, name: str) -> None:
        """``tables/<name>.csv`` alone: numbers no table of the document shows in full."""
        write_csv(df, self.tables / f"{name}.csv")


class TablePage(Page):
    """A page that writes nothing: it keeps each table as the document shows it (``shown[name]``,
    what ``tables/<name>.md`` holds) and draws no figure file."""

    def __init__(self, info: dict[str, tuple[str, str]]):
        self.out = Path(".")
        self.doc = Doc(self.out)
        self.styles, self.groups = arm_styles(info), panel_groups(info)
        self.shown: dict[str, pd.DataFrame] = {}

    def figure(self, fig, name: str, alt: str, css: str = "") -> None:
        pass

    def table(self, numbers: pd.DataFrame, shown: pd.DataFrame, name: str) -> None:
        self.shown[name] = shown

    def data_file(self, df: pd.DataFrame, name: str) -> None:
        pass

    def numbers(self, df: pd.DataFrame, name: str) -> None:
        pass
