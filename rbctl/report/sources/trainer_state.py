"""TRL (any transformers `Trainer`): the records of an output folder's ``trainer_state.json``.

`Trainer` keeps every `log` call in ``state.log_history`` (train records: ``loss``, TRL's
``reward``, ``entropy``, ``completions/mean_length``, rbctl's ``rbctl/kappa`` …; evaluation records:
the same names prefixed ``eval_``), each with ``step`` (the global step). It writes the state into
each ``checkpoint-N/`` and, when the script calls ``trainer.save_state()``, into the output folder:
the copy with the highest ``global_step`` is read (its history holds the earlier copies'). Nothing
else of the folder is read: ``training_args.bin`` is a pickle.
"""

from __future__ import annotations

from pathlib import Path

from rbctl.errors import UserError
from rbctl.report.sources.safe_read import NoRecords, as_step, numbers, read_json_file

STATE = "trainer_state.json"


def state_files(path: Path) -> list[Path]:
    """The trainer states of a run: ``path`` itself (a trainer_state.json), or the output folder's
    and its checkpoints' copies."""
    path = Path(path)
    if path.is_file():
        return [path]
    return [p for p in [path / STATE, *sorted(path.glob(f"checkpoint-*/{STATE}"))] if p.is_file()]


def read(path: Path) -> tuple[dict[int, dict[str, float]], dict]:
    """``{step: {name: value}}`` of the newest trainer state's log history (a train and an evaluation
    record of one step merged; a null value is NaN: undefined at that step), and ``{"max_steps",
    "files", "ended", "finished"}`` (``ended``: the state file's modification time, when the run last
    wrote it: a trainer state holds no clock time; ``finished``: its global step reached max_steps)."""
    files = state_files(path)
    if not files:
        raise NoRecords(f"{path}: no {STATE} (TRL writes it into each checkpoint-N/ and, with "
                        "trainer.save_state(), into the output folder)")
    states = []
    for f in files:
        s = read_json_file(f)
        if not isinstance(s, dict) or not isinstance(s.get("log_history"), list):
            raise UserError(f"{f}: not a trainer state (expected an object with a log_history list)")
        states.append((int(s.get("global_step") or 0), f, s))
    _, newest, state = max(states, key=lambda t: t[0])
    records: dict[int, dict[str, float]] = {}
    for i, rec in enumerate(state["log_history"]):
        if not isinstance(rec, dict) or "step" not in rec:
            raise UserError(f"{newest}: log_history[{i}] has no step")
        records.setdefault(as_step(rec["step"], newest, i), {}).update(
            {k: v for k, v in numbers(rec, null=True).items() if k != "step"})
    max_steps = state.get("max_steps")
    max_steps = max_steps if isinstance(max_steps, int) and max_steps > 0 else None
    return records, {"max_steps": max_steps, "files": [str(newest)], "ended": newest.stat().st_mtime,
                     "finished": max_steps is None or int(state.get("global_step") or 0) >= max_steps}
