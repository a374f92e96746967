"""One small logging interface: `log(step, metrics)` and `close()`.

metrics.jsonl is always written (one JSON line per step, appended and flushed); TensorBoard and
Weights & Biases sit behind the same interface and are off by default.
"""

from __future__ import annotations

from pathlib import Path

from rbctl.store.jsonl import append_jsonl
from rbctl.store.rundir import METRICS, TENSORBOARD


class Tracker:
    """metrics.jsonl always; TensorBoard and W&B optional."""

    def __init__(self, run_dir: Path, tensorboard: bool = False, wandb: bool = False,
                 wandb_project: str = "rbctl", wandb_mode: str = "offline", config: dict | None = None):
        self.path = Path(run_dir) / METRICS
        self._tb = None
        self._wandb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(Path(run_dir) / TENSORBOARD))
        if wandb:
            import wandb as wb

            self._wandb = wb.init(project=wandb_project, mode=wandb_mode, dir=str(run_dir), config=config,
                                  name=Path(run_dir).name, resume="allow")

    def log(self, step: int, metrics: dict) -> None:
        append_jsonl(self.path, {"step": step, **metrics}, kind="metrics")
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
