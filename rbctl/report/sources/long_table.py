"""A long table of many runs, the shape a W&B or MLflow export takes: CSV (a header line) or JSON
lines, one row per (run, step, key, value). The manifest's run paths are the values of the ``run``
column. A row's value may be empty (W&B exports leave a key unlogged at a step blank): it is skipped.
"""

from __future__ import annotations

from pathlib import Path

from rbctl.errors import UserError
from rbctl.report.sources.safe_read import as_float, as_step, read_csv_rows, read_json_lines

COLUMNS = ("run", "step", "key", "value")


def read_table(path: Path) -> dict[str, dict[int, dict[str, float]]]:
    """``{run: {step: {key: value}}}`` of the table (``.csv``: CSV; otherwise JSON lines)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: the manifest's table does not exist")
    rows = read_csv_rows(path) if path.suffix.lower() == ".csv" else read_json_lines(path)
    out: dict[str, dict[int, dict[str, float]]] = {}
    for line, row in rows:
        missing = [c for c in COLUMNS if c not in row]
        if missing:
            raise UserError(f"{path} line {line}: no column {missing[0]!r} (a long table has {', '.join(COLUMNS)})")
        if row["value"] is None or row["value"] == "":
            continue
        value = as_float(row["value"], path, line, "value")
        out.setdefault(str(row["run"]), {}).setdefault(as_step(row["step"], path, line), {})[str(row["key"])] = value
    return out
