"""TensorBoard event files from any trainer, read with the `tensorboard` package's own reader
(`EventFileLoader`: protocol buffers, no code). Every scalar (a ``simple_value``, or a scalar
tensor) is a record at its step; event files of one run (a resumed run writes another) are read in
name order, a later value of a step replacing an earlier one.

TRL's (transformers') `TensorBoardCallback` renames what it logs (`rewrite_logs`): ``eval_x`` →
``eval/x``, ``test_x`` → ``test/x``, anything else ``x`` → ``train/x``. With TRL's names
(`trl_names`) that renaming is undone, so one manifest reads a TRL run from either file.
"""

from __future__ import annotations

from pathlib import Path

from rbctl.errors import UserError
from rbctl.report.sources.safe_read import NoRecords, refuse_pickle

EVENTS = "events.out.tfevents.*"


def event_files(path: Path) -> list[Path]:
    path = Path(path)
    if path.is_file():
        return [path]
    return sorted(path.rglob(EVENTS))


def trl_name(tag: str) -> str:
    """The name TRL logged that transformers' `rewrite_logs` turned into ``tag``."""
    head, _, rest = tag.partition("/")
    if rest and head in ("eval", "test"):
        return f"{head}_{rest}"
    return rest if rest and head == "train" else tag


def _scalar(value) -> float | None:
    kind = value.WhichOneof("value")
    if kind == "simple_value":
        return float(value.simple_value)
    if kind == "tensor":
        from tensorboard.util import tensor_util

        arr = tensor_util.make_ndarray(value.tensor)
        if arr.size == 1 and arr.dtype.kind in "fiu":
            return float(arr.reshape(()))
    return None


def read(path: Path, trl_names: bool = False) -> tuple[dict[int, dict[str, float]], dict]:
    """``{step: {tag: value}}`` of every scalar in the run's event files, and ``{"files", "ended"}``
    (``ended``: the latest event's wall time)."""
    try:
        from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    except ImportError:
        raise UserError("reading TensorBoard event files needs the tensorboard package: "
                        "pip install 'rbctl[tensorboard]'") from None
    files = event_files(path)
    if not files:
        raise NoRecords(f"{path}: no TensorBoard event files ({EVENTS})")
    records: dict[int, dict[str, float]] = {}
    ended = 0.0
    for f in files:
        refuse_pickle(f)
        try:
            for event in EventFileLoader(str(f)).Load():
                ended = max(ended, float(event.wall_time))
                if not event.HasField("summary"):
                    continue
                for value in event.summary.value:
                    x = _scalar(value)
                    if x is not None:
                        name = trl_name(value.tag) if trl_names else value.tag
                        records.setdefault(int(event.step), {})[name] = x
        except Exception as e:  # the reader's own errors (a corrupt record) differ by version
            raise UserError(f"{f}: not a readable TensorBoard event file ({type(e).__name__}: {e})") from None
    return records, {"max_steps": None, "files": [str(f) for f in files], "ended": ended or None}
