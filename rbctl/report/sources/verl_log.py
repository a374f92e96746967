"""verl: the JSON lines of its ``file`` logger (verl/utils/tracking.py `FileLogger`): one line
``{"step": N, "data": {name: value}}`` per `Tracking.log` call, in
``$VERL_FILE_LOGGER_ROOT/<project>/<experiment>.jsonl`` (or ``$VERL_FILE_LOGGER_PATH``). Training
metrics (``actor/entropy``, ``critic/score/mean``, ``response_length/mean`` …) and validation
(``val-core/<data source>/<acc|reward>/mean@<n>`` …) arrive at their step. verl's ``tensorboard``
backend writes the same names into event files: read those with runs_from tensorboard.
"""

from __future__ import annotations

from pathlib import Path

from rbctl.errors import UserError
from rbctl.report.sources.safe_read import NoRecords, as_step, numbers, read_json_lines


def log_file(path: Path) -> Path:
    """``path`` itself, or the one ``*.jsonl`` file in the folder ``path``."""
    path = Path(path)
    if path.is_file():
        return path
    found = sorted(path.glob("*.jsonl"))
    if not found:
        raise NoRecords(f"{path}: no verl file-logger log (*.jsonl)")
    if len(found) > 1:
        raise UserError(f"{path}: expected one verl file-logger log (*.jsonl), found {len(found)}; name the file "
                        "in the manifest's path")
    return found[0]


def read(path: Path) -> tuple[dict[int, dict[str, float]], dict]:
    """``{step: {name: value}}`` of a verl file-logger log (lines of one step merged; orjson writes
    NaN as null: a null is NaN, undefined at that step) and ``{"files", "ended"}`` (the log's
    modification time: its lines hold no clock time)."""
    f = log_file(path)
    records: dict[int, dict[str, float]] = {}
    for line, rec in read_json_lines(f):
        if "step" not in rec or not isinstance(rec.get("data"), dict):
            raise UserError(f"{f} line {line}: not a verl file-logger line (expected {{\"step\": N, \"data\": {{...}}}})")
        records.setdefault(as_step(rec["step"], f, line), {}).update(numbers(rec["data"], null=True))
    return records, {"max_steps": None, "files": [str(f)], "ended": f.stat().st_mtime}
