"""One small logging interface: `log(step, metrics)` and `close()`.

metrics.jsonl is always written (one JSON line per step, appended and flushed); TensorBoard and
Weights & Biases sit behind the same interface and are off by default.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path


def _jsonable(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def append_jsonl(path: Path, record: dict) -> None:
    """Append one line and flush it to disk: a crash leaves at most a torn last line."""
    with open(path, "a") as f:
        f.write(json.dumps({k: _jsonable(v) for k, v in record.items()}) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_jsonl(path: Path) -> list[dict]:
    """All complete lines; a torn (unparsable) last line is dropped."""
    if not Path(path).exists():
        return []
    out = []
    lines = Path(path).read_text().splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                break  # torn last line from a crash
            raise
    return out


def truncate_jsonl(path: Path, keep) -> None:
    """Rewrite `path` atomically keeping the records for which keep(record) is true."""
    path = Path(path)
    if not path.exists():
        return
    records = [r for r in read_jsonl(path) if keep(r)]
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class Tracker:
    """metrics.jsonl always; TensorBoard and W&B optional."""

    def __init__(self, run_dir: Path, tensorboard: bool = False, wandb: bool = False,
                 wandb_project: str = "rbctl", wandb_mode: str = "offline", config: dict | None = None):
        self.path = Path(run_dir) / "metrics.jsonl"
        self._tb = None
        self._wandb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(Path(run_dir) / "tb"))
        if wandb:
            import wandb as wb

            self._wandb = wb.init(project=wandb_project, mode=wandb_mode, dir=str(run_dir), config=config,
                                  name=Path(run_dir).name, resume="allow")

    def log(self, step: int, metrics: dict) -> None:
        append_jsonl(self.path, {"step": step, **metrics})
        scalars = {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and v is not None}
        if self._tb is not None:
            for k, v in scalars.items():
                self._tb.add_scalar(k, v, step)
        if self._wandb is not None:
            self._wandb.log(scalars, step=step)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()
