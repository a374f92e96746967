"""Checkpoints of runs trained elsewhere, for `rbctl eval`: TRL's ``OUTPUT/checkpoint-N/`` (a model
folder) and verl's HF export ``CKPTS/global_step_N/actor/huggingface/`` (``global_step_N/`` or its
``actor/`` name it too). Evaluated as a model folder under the protocol asked for, the result goes
into the run's checkpoints folder in an rbctl run's layout (``FOLDER/eval/step_N/protocol_X/``,
`rbctl.store.rundir`), where the report of a runs manifest naming that folder (`checkpoints:`, a TRL
run's own output folder by default) reads it as the run's held-out score at step N
(`rbctl.report.sources.checkpoint_evals`).

Also how `-b` splits its list: on commas, except the one inside a custom benchmark's fields
(``file:PATH@question,solution``, ``hf:ID:SPLIT@q,a``), as a config's list holds it whole.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from rbctl.errors import UserError

VERL_EXPORT = ("actor", "huggingface")  # below global_step_N: where verl saves the HF model
_TRL = re.compile(r"checkpoint-(\d+)")
_VERL = re.compile(r"global_step_(\d+)")
_FIELD = re.compile(r"[\w.\-]+")  # a record field of a custom benchmark (`rbctl.tasks.benchmarks`)


@dataclass(frozen=True)
class ImportedCheckpoint:
    """A checkpoint of a run trained elsewhere: the model folder to load, its step, the run's
    checkpoints folder (where the evaluation is written) and who wrote it."""

    model: Path
    step: int
    folder: Path
    framework: str


def imported_checkpoint(path: Path) -> ImportedCheckpoint | None:
    """The TRL or verl checkpoint ``path`` names (module docstring), else None. A verl step folder
    without its HF export is a one-line error (verl saves FSDP shards unless asked for the HF model)."""
    path = Path(path).expanduser()
    if not path.is_dir():
        return None
    m = _TRL.fullmatch(path.name)
    if m and (path / "config.json").is_file():
        return ImportedCheckpoint(path, int(m.group(1)), path.parent, "TRL")
    for up in range(3):  # global_step_N, global_step_N/actor, global_step_N/actor/huggingface
        step_dir = path.parents[up - 1] if up else path
        m = _VERL.fullmatch(step_dir.name)
        if m and list(path.relative_to(step_dir).parts) == list(VERL_EXPORT[:up]):
            model = step_dir.joinpath(*VERL_EXPORT)
            if not _has_weights(model):  # verl writes the config and tokenizer there whatever it saves
                raise UserError(f"{path}: verl checkpoint {m.group(1)} has no HF model at {model} (save it with "
                                "actor_rollout_ref.actor.checkpoint.save_contents including hf_model)")
            return ImportedCheckpoint(model, int(m.group(1)), step_dir.parent, "verl")
    return None


def _has_weights(model: Path) -> bool:
    return (model / "config.json").is_file() and any(
        p.suffix in (".safetensors", ".bin") for p in model.glob("*") if p.name != "training_args.bin")


def where_line(ck: ImportedCheckpoint) -> str:
    return (f"{ck.model}: checkpoint {ck.step} of a {ck.framework} run; its results go to {ck.folder}/…/step N, where "
            "a runs manifest's report reads them as the run's held-out score at that step")


def split_benchmarks(text: str) -> list[str]:
    """`-b`'s comma-separated list: ``amc23,file:p.jsonl@question,solution,gsm8k`` -> three
    benchmarks; the comma after a spec's first field (``@question``) joins its second field."""
    out: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if out and "@" in out[-1] and _FIELD.fullmatch(out[-1].rsplit("@", 1)[1]) and _FIELD.fullmatch(part):
            out[-1] += "," + part
        else:
            out.append(part)
    return out
