"""The shipped presets (`configs/*.yaml`): in the wheel they are package data (`rbctl/configs/`,
force-included by the build); in a source checkout they are the repository's top-level `configs/`.

A preset is named anywhere a config path goes (`rbctl train fixpoint`, `rbctl ablate
ablate_quickstart`, a sweep file's `base: quickstart.yaml` beside which no such file lies):
`resolve_config` takes a path that exists, else the preset of that name. `rbctl presets` lists them
with the command that runs each and what it is for (`PURPOSES`, `preset_summary`).
"""

from __future__ import annotations

import difflib
from importlib import resources
from pathlib import Path

from rbctl.errors import UserError

SWEEP_KEYS = ("base", "arms")  # a sweep file has both; a training config has neither


def presets_dir() -> Path:
    packaged = Path(str(resources.files("rbctl"))) / "configs"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "configs"  # editable install / source checkout


def preset(name: str) -> Path:
    """Path of a shipped preset by file name, e.g. `preset("ablate_quickstart.yaml")`."""
    return presets_dir() / name


def preset_names() -> list[str]:
    """Every shipped preset's name (its file name without .yaml), sorted."""
    return sorted(p.stem for p in presets_dir().glob("*.yaml"))


def find_preset(name: str) -> Path | None:
    """The preset `name` names: `fixpoint`, `fixpoint.yaml` or `configs/fixpoint.yaml` (as the presets'
    headers write it); None if none, or if `name` is a path elsewhere (`./fixpoint.yaml`, `my/x.yaml`)."""
    given = Path(str(name))
    if str(given.parent) not in (".", "configs") or str(name).startswith("./"):
        return None
    stem = given.name.removesuffix(".yaml").removesuffix(".yml")
    path = preset(stem + ".yaml")
    return path if stem and path.is_file() else None


def resolve_config(path: str | Path, what: str = "config file") -> Path:
    """`path` where it exists, else the shipped preset it names (`find_preset`); a `UserError`
    naming the closest presets otherwise."""
    p = Path(path).expanduser()
    if p.exists() and not p.is_dir():  # a folder named like a preset (runs/quickstart) is not a config
        return p
    found = find_preset(str(path))
    if found is not None:
        return found
    close = difflib.get_close_matches(Path(str(path)).stem, preset_names(), n=3, cutoff=0.5)
    hint = f" (did you mean {' or '.join(close)}?)" if close else " (`rbctl presets` lists the shipped configs)"
    raise UserError(f"{what} {path} does not exist, and no preset has that name{hint}")


def is_sweep(data: dict) -> bool:
    """Whether a config file's top-level keys are a sweep file's (`rbctl ablate`), not a training config's."""
    return any(k in data for k in SWEEP_KEYS)


# What each preset is for, in one line (`rbctl presets`); a test holds it to the shipped files.
PURPOSES = {
    "quickstart": "The embedded default: plain GRPO on the built-in links task, minutes on 2 CPU cores",
    "ablate_quickstart": "The quick sweep on quickstart: GRPO, Dr.GRPO, RLOO, each ± budget, and two entropy bonuses",
    "fixpoint": "The plateau testbed: plain GRPO on the fixed-point task from the shipped warm start",
    "ablate_fixpoint": "The main job (plain `rbctl ablate`): GRPO, GRPO + budget, GRPO + entropy bonus on the plateau",
    "ablate_arms": "Every entropy-control and exploration method implemented, beside GRPO ± budget, on the plateau",
    "maze": "MaxRL's maze at CPU scale: 9×9 mazes, a 75k-parameter policy warm-started on BFS paths",
    "maze_17": "MaxRL's maze at paper scale: 17×17 mazes, P 256 × G 128 (GPU work)",
    "ablate_maze_17": "MaxRL's maze table at paper scale, one GPU per run",
    "smollm2_add1": "A real model on a CPU: SmolLM2-135M-Instruct (LoRA) learning single-digit addition",
    "ablate_smollm2_add1": "The real-model demo: GRPO, GRPO + budget, GRPO + entropy bonus on smollm2_add1",
    "smollm2_gsm8k": "SmolLM2-135M-Instruct (LoRA) on GSM8K, offline on a CPU",
    "ablate_smollm2_gsm8k": "GRPO with and without the budget on smollm2_gsm8k, one seed",
    "paper_llama32_3b": "Paper scale: Llama-3.2-3B-Instruct (gated on the Hub) on DeepScaleR, one GPU per run",
    "paper_llama32_3b_sweep": "The paper-scale ablation on Llama-3.2-3B-Instruct: every baseline ± budget",
    "paper_qwen3_8b": "Paper scale: Qwen3-8B (LoRA) on DeepScaleR, one GPU per run",
    "paper_qwen3_8b_sweep": "The paper-scale ablation on Qwen3-8B: every baseline ± budget",
    "runs_trl": "A runs manifest: TRL runs (GRPOTrainer, BudgetGRPOTrainer) reported by rbctl (docs/your_runs.md)",
    "runs_verl": "A runs manifest: verl runs (its file logger) reported by rbctl (docs/your_runs.md)",
    "runs_wandb": "A runs manifest: any trainer's runs from a W&B or MLflow long-table export (docs/your_runs.md)",
    "study_quickstart": "An example study: does an adaptive entropy bonus beat GRPO + budget on the quick sweep?",
}


def preset_summary(name: str) -> tuple[str, str, str]:
    """(name, the command that runs it: the one its header's first line names, else train or ablate
    by its keys; what it is for) of a shipped preset; a sweep's purpose ends with its design (arms ×
    warm starts × seeds)."""
    import re

    import yaml

    path = preset(name + ".yaml")
    text = path.read_text()
    data = yaml.safe_load(text) or {}
    purpose = PURPOSES.get(name, "")
    named = re.match(r"# rbctl (\w+)", text)
    command = named.group(1) if named else "ablate" if is_sweep(data) else "train"
    if command == "ablate" and is_sweep(data):
        ws = len(data.get("warm_starts") or [])
        design = f"{len(data.get('arms') or {})} arms × " + (f"{ws} warm starts × " if ws else "")
        seeds = len(data.get("seeds") or [0])
        purpose += f" ({design}{seeds} seed{'s' if seeds != 1 else ''})"
    return name, command, purpose
