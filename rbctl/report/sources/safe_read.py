"""Reading an imported run's files as data, never as code: JSON, JSON lines, CSV and TensorBoard's
protocol buffers only. rbctl never unpickles a run's file (TRL's training_args.bin, a checkpoint) and
never imports or executes anything from it; a file that is a pickle, or a malformed or truncated
one, is a one-line `UserError` naming the file (and the line)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

from rbctl.errors import UserError

class NoRecords(UserError):
    """A run's folder holds none of the files its format writes (a run that crashed before logging,
    or a wrong path): the report lists the run as missing and goes on."""


PICKLE_SUFFIXES = (".pkl", ".pickle", ".bin", ".pt", ".pth", ".ckpt", ".joblib", ".npy", ".npz")


def refuse_pickle(path: Path) -> Path:
    """``path`` when it is not a pickle; else a one-line `UserError`. A pickle is recognised by its
    name (`PICKLE_SUFFIXES`, torch.save's files included) or by its first byte (protocol 2+ opens
    with 0x80), so a pickle renamed to .json is refused too, before anything parses it."""
    path = Path(path)
    with open(path, "rb") as f:
        head = f.read(2)
    if path.suffix.lower() in PICKLE_SUFFIXES or head[:1] == b"\x80":
        raise UserError(f"{path}: a pickle (or torch.save file); rbctl never unpickles a run's files: give the "
                        "run's JSON, JSON-lines, CSV or TensorBoard records instead")
    return path


NON_FINITE = {"NaN": math.nan, "nan": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _number(v, null: bool = False):
    """A finite or non-finite float from a JSON value (W&B's transaction log writes NaN and the
    infinities as text); None for what is not a number (text, bool). ``null``: a null is NaN (a
    value logged as undefined at that step, kept apart from a name not logged at all), else None."""
    if v is None:
        return math.nan if null else None
    if isinstance(v, str):
        return NON_FINITE.get(v)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


def numbers(d: dict, null: bool = False) -> dict[str, float]:
    """The numeric entries of one record (NaN kept: the report drops non-finite values itself, and
    says where a role is undefined); ``null``: a null value is NaN (`_number`)."""
    return {str(k): x for k, v in d.items() if (x := _number(v, null)) is not None}


def _cut(e: json.JSONDecodeError, text: str) -> str:
    """" (truncated)" when the text ends where the parser still wanted more (a write cut short)."""
    return " (truncated)" if e.pos >= len(text.rstrip()) or e.msg.startswith("Unterminated string") else ""


def read_json_file(path: Path):
    """A whole JSON file; invalid or truncated JSON is a `UserError` naming the file and line."""
    path = refuse_pickle(path)
    text = path.read_text(errors="replace")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{path} line {e.lineno}: invalid JSON{_cut(e, text)} ({e.msg})") from None


def read_json_lines(path: Path) -> list[tuple[int, dict]]:
    """(line number, object) of every non-empty line. Unlike rbctl's own logs (whose writer makes a
    torn last line a crash's trace), an imported file's torn line is refused: rbctl cannot tell a
    crash from an edit, and the user can cut the line knowingly."""
    path = refuse_pickle(path)
    out = []
    lines = path.read_text(errors="replace").splitlines()
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            cut = _cut(e, line) if i == len(lines) else ""
            raise UserError(f"{path} line {i}: invalid JSON{cut} ({e.msg})") from None
        if not isinstance(obj, dict):
            raise UserError(f"{path} line {i}: expected a JSON object, got {type(obj).__name__}")
        out.append((i, obj))
    return out


def read_csv_rows(path: Path) -> list[tuple[int, dict]]:
    """(line number, row) of a CSV file with a header line."""
    path = refuse_pickle(path)
    with open(path, newline="", errors="replace") as f:
        reader = csv.DictReader(f)
        rows = []
        for row in reader:
            if None in row or any(v is None for v in row.values()):
                raise UserError(f"{path} line {reader.line_num}: {len(reader.fieldnames or [])} columns expected "
                                f"({', '.join(reader.fieldnames or [])})")
            rows.append((reader.line_num, row))
    return rows


def as_float(text, path: Path, line: int, what: str) -> float:
    try:
        x = float(text)
    except (TypeError, ValueError):
        raise UserError(f"{path} line {line}: {what} {text!r} is not a number") from None
    return x


def as_step(v, path: Path, line: int) -> int:
    x = as_float(v, path, line, "step")
    if not math.isfinite(x) or x != int(x) or x < 0:
        raise UserError(f"{path} line {line}: step {v!r} is not a whole number >= 0")
    return int(x)
