"""Setting up a run directory: the resolved config (checked on resume) and provenance.
The layout itself is `rbctl.store.rundir`."""

from __future__ import annotations

import hashlib
import platform
import subprocess
import time
from pathlib import Path

import torch

from rbctl import __version__
from rbctl.config.base import dump_config
from rbctl.config.train import TrainConfig, read_run_config
from rbctl.errors import UserError
from rbctl.rollout.cpu_linear import cpu_vendor
from rbctl.store.atomic import write_atomic
from rbctl.store.read import check_run_format
from rbctl.store.rundir import CHECKPOINTS, CONFIG, METRICS, kept_config_path


# the packages whose versions change a run's numbers, recorded where installed
WORK_PACKAGES = ("torch", "transformers", "numpy", "trl", "peft", "vllm", "datasets", "math-verify", "accelerate")
REPO_ROOT = Path(__file__).resolve().parents[2]


def provenance(cfg: TrainConfig, device: torch.device, root: Path = REPO_ROOT) -> dict:
    """The run's header (provenance.json): what re-runs it. The commit, whether the checkout had
    uncommitted changes to tracked files and a hash of them (`git_state`; ``root``: the checkout,
    injectable for tests), the versions of the packages that change the work (`package_versions`),
    the machine, and the seed. The resolved config is config.yaml beside it."""
    return {
        "rbctl": __version__,
        **git_state(root),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": package_versions().get("transformers"),
        "packages": package_versions(),
        "platform": platform.platform(),
        "device": str(device),
        "cuda": torch.cuda.get_device_name(0) if device.type == "cuda" else None,
        "cpu_vendor": cpu_vendor() or None,
        "threads": torch.get_num_threads(),
        "seed": cfg.seed,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def git_state(root: Path) -> dict:
    """``git_commit`` (HEAD), ``git_dirty`` (uncommitted changes to tracked files: `git status
    --porcelain --untracked-files=no` is not empty; an untracked file is no part of the code that ran
    unless something imports it, which a commit of it would show) and ``git_diff_sha256`` (sha256 of
    `git diff HEAD --binary` when dirty, else None): a dirty run re-runs only with that diff. All
    None outside a git checkout."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.decode(errors="replace") if done.returncode == 0 else None

    commit = (git("rev-parse", "HEAD") or "").strip() or None
    if commit is None:
        return {"git_commit": None, "git_dirty": None, "git_diff_sha256": None}
    status = git("status", "--porcelain", "--untracked-files=no")
    dirty = None if status is None else bool(status.strip())
    diff = None
    if dirty:
        try:
            out = subprocess.run(["git", "-C", str(root), "diff", "HEAD", "--binary"], capture_output=True, timeout=30)
            diff = hashlib.sha256(out.stdout).hexdigest() if out.returncode == 0 else None
        except (OSError, subprocess.SubprocessError):
            diff = None
    return {"git_commit": commit, "git_dirty": dirty, "git_diff_sha256": diff}


def package_versions() -> dict[str, str]:
    """The installed versions of `WORK_PACKAGES` (importlib.metadata: nothing is imported)."""
    from importlib import metadata

    out = {}
    for name in WORK_PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def comparable(cfg: TrainConfig) -> dict:
    """The config without the keys that may change across a resume (more steps, logging). The
    learning-rate schedule, which may depend on `steps`, is checked by `check_run_dir`."""
    d = cfg.model_dump(mode="json")
    for k in ("steps", "log", "threads", "dist_timeout_min", "hardware"):
        d.pop(k, None)
    d["optim"].pop("schedule_steps", None)
    return d


def check_run_dir(cfg: TrainConfig, run_dir: Path, force: bool, extend: bool = False) -> TrainConfig:
    """The config to train `run_dir` with: `cfg` itself for a new run; for a run that got somewhere,
    `cfg` checked against the config it was made with. Reads only; every rank calls it before rank 0
    rewrites config.yaml (`write_config`).

    - A run directory of another format version is refused (`rbctl.store.read.check_format`).
    - Keys other than steps, log, threads, dist_timeout_min and hardware may differ only with `force`.
    - The learning-rate schedule of the steps already run never changes: another optim.lr,
      optim.schedule or optim.warmup_steps is refused, with or without `force`.
    - A changed `steps` needs `extend` (or `force`): a run is never lengthened or shortened by a
      config that differs in `steps` alone (`rbctl train fixpoint -o RUN --set steps=120` on a
      finished 100-step run is refused, naming `steps`), and a report then compares what it was asked to.
    - A constant schedule (after any warm-up) does not depend on `steps`: with `extend` a run
      extends (or shortens) with its lr unchanged.
    - A cosine schedule spans its horizon (`optim.schedule_steps`, else `steps`): a changed
      `steps` is refused unless `extend`, which pins `optim.schedule_steps` to the run's horizon.
      The steps up to it keep their lr; those past it keep the lr of its last step (`lr_factor`).
      Later resumes inherit the pinned horizon.
    """
    cfg_path = run_dir / CONFIG
    if not (cfg_path.exists() and started(run_dir)):
        return cfg
    check_run_format(run_dir)
    old = read_run_config(cfg_path)
    if cfg.steps != old.steps and not (extend or force):
        change = "train it past its" if cfg.steps > old.steps else "stop it before its"
        raise UserError(f"run directory {run_dir} was made with steps={old.steps}; steps={cfg.steps} would {change} "
                        f"{old.steps} steps: pass --extend to change steps on this run, or use another -o")
    cfg = _keep_schedule(old, cfg, run_dir, extend)
    if comparable(old) != comparable(cfg) and not force:
        new_flat, old_flat = _flat(comparable(cfg)), _flat(comparable(old))
        diff = [k for k in new_flat if new_flat.get(k) != old_flat.get(k)]
        raise UserError(f"run directory {run_dir} was made with a different config ({', '.join(diff[:4])}); "
                        "use another -o or --force")
    return cfg


def _keep_schedule(old: TrainConfig, cfg: TrainConfig, run_dir: Path, extend: bool) -> TrainConfig:
    o, n = old.optim, cfg.optim
    changed = [f"optim.{k}: {getattr(o, k)} -> {getattr(n, k)}" for k in ("lr", "schedule", "warmup_steps")
               if getattr(o, k) != getattr(n, k)]
    if changed:
        raise UserError(f"run directory {run_dir} ran with another learning-rate schedule ({', '.join(changed)}); "
                        f"a run keeps its schedule: train a new run from its weights (-o NEW --set model.name={run_dir})")
    if n.schedule != "cosine":
        return cfg
    horizon = o.schedule_steps or old.steps
    pinned = n.schedule_steps or o.schedule_steps  # a horizon pinned by an earlier --extend carries over
    if (pinned or cfg.steps) == horizon:
        return cfg.model_copy(update={"optim": n.model_copy(update={"schedule_steps": pinned})})
    if n.schedule_steps is not None:
        raise UserError(f"run directory {run_dir} ran a cosine schedule over {horizon} steps; "
                        f"optim.schedule_steps={n.schedule_steps} would change it")
    if not extend:
        raise UserError(f"run directory {run_dir} ran a cosine schedule over steps={horizon}; steps={cfg.steps} would "
                        f"stretch the lr of the steps already run: pass --extend to keep that schedule (steps past "
                        f"{horizon} keep the lr of its last step) or train a new run from its weights "
                        f"(-o NEW --set model.name={run_dir})")
    return cfg.model_copy(update={"optim": n.model_copy(update={"schedule_steps": horizon})})


def write_config(cfg: TrainConfig, run_dir: Path, start: int) -> None:
    """Write the config the run trains with to config.yaml. A run resumed at step `start` > 0 with a
    config that differs keeps the previous one as config.step_{start}.yaml, the config its steps
    up to `start` ran with (unless a file for that step exists already: a config tried there
    before applies to no step kept), so the run directory says what every step ran with."""
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg_path, text = run_dir / CONFIG, dump_config(cfg)
    previous = cfg_path.read_text() if cfg_path.exists() else None
    kept = kept_config_path(run_dir, start)
    if start > 0 and previous is not None and previous != text and not kept.exists():
        write_atomic(kept, previous)
    write_atomic(cfg_path, text)


def started(run_dir: Path) -> bool:
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


