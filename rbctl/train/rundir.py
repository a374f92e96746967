"""Setting up a run directory: the resolved config (checked on resume) and provenance.
The layout itself is `rbctl.store.rundir`."""

from __future__ import annotations

import platform
import subprocess
import time
from pathlib import Path

import torch

from rbctl import __version__
from rbctl.config.base import dump_config, validate
from rbctl.config.builtin import upgrade_legacy
from rbctl.config.train import TrainConfig
from rbctl.errors import UserError
from rbctl.store.atomic import write_atomic
from rbctl.store.rundir import CHECKPOINTS, CONFIG, METRICS


def provenance(cfg: TrainConfig, device: torch.device) -> dict:
    import transformers

    def git_commit():
        try:
            root = Path(__file__).resolve().parents[2]
            return subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                                  text=True, timeout=5).stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            return None

    return {
        "rbctl": __version__,
        "git_commit": git_commit(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "platform": platform.platform(),
        "device": str(device),
        "cuda": torch.cuda.get_device_name(0) if device.type == "cuda" else None,
        "threads": torch.get_num_threads(),
        "seed": cfg.seed,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def comparable(cfg: TrainConfig) -> dict:
    """The config without the keys that may change across a resume (more steps, logging)."""
    d = cfg.model_dump(mode="json")
    for k in ("steps", "log", "threads"):
        d.pop(k, None)
    return d


def prepare_run_dir(cfg: TrainConfig, run_dir: Path, force: bool) -> None:
    """Create the run directory, or check that an existing one was made with this config."""
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg_path = run_dir / CONFIG
    if cfg_path.exists() and _started(run_dir):
        import yaml

        old = validate(TrainConfig, upgrade_legacy(yaml.safe_load(cfg_path.read_text()) or {}), str(cfg_path))
        if comparable(old) != comparable(cfg) and not force:
            diff = [k for k in _flat(comparable(cfg)) if _flat(comparable(cfg)).get(k) != _flat(comparable(old)).get(k)]
            raise UserError(f"run directory {run_dir} was made with a different config ({', '.join(diff[:4])}); "
                            "use another -o or --force")
    write_atomic(cfg_path, dump_config(cfg))


def _started(run_dir: Path) -> bool:
    """Whether a run got anywhere: a checkpoint or a metrics line. A directory left by a failed start
    (config.yaml and nothing else) counts as fresh, so the corrected config may use it."""
    ckpts, metrics = run_dir / CHECKPOINTS, run_dir / METRICS
    return (ckpts.is_dir() and any(ckpts.iterdir())) or (metrics.exists() and metrics.read_text().strip() != "")


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


