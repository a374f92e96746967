"""The run directory, defined once: file names, step folders, checkpoint integrity and selection.

    RUN_DIR/
      config.yaml             the resolved training config the code used
      provenance.json         versions, git commit, device, seed
      metrics.jsonl           one line per optimizer step
      samples.jsonl           rollouts every `sample_every` steps
      eval.jsonl              periodic held-out evaluation, one line per (step, benchmark)
      checkpoints/step_NNNNNN/
        model/                save_pretrained weights + tokenizer (+ the built-in marker)
        trainer_state.*       optimizer, scheduler, RNG and entropy-α state
        COMPLETE              written last: {"step", "files": SHA-256 of every other file}
      run.json                written by `rbctl ablate`: arm, seed, baseline, variant (warm_start)
      eval/step_NNNNNN/BENCH/ final evaluation (summary.json, samples.jsonl)
      eval/periodic/step_NNNNNN/BENCH/

    SWEEP_DIR/
      sweep.yaml              the resolved sweep: {"sweep": the sweep file, "configs": arm -> config}
      state.json              {"runs": {"ARM/seed_S": {"status", "error"}}}
      ceiling.json            optional: {"value": reachable pass@1, "source": text} (the plateau test)
      runs/ARM/seed_S/        one run directory per (arm, seed), or
      runs/ARM/WARM_START/seed_S/  per (arm, warm start, seed) when the sweep crosses warm starts

A checkpoint counts only when its COMPLETE marker exists and every file matches the manifest:
`rbctl train` resumes from, and `rbctl eval` / `rbctl report` read, only such checkpoints.
No torch here: `rbctl report` reads run directories without it.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

CONFIG = "config.yaml"
PROVENANCE = "provenance.json"
METRICS = "metrics.jsonl"
SAMPLES = "samples.jsonl"
EVAL_LINES = "eval.jsonl"
RUN_META = "run.json"  # written by `rbctl ablate`: arm, seed, baseline, variant
EVAL_DIR = "eval"
PERIODIC_DIR = "periodic"
SUMMARY = "summary.json"  # one benchmark's evaluation: metrics, per-problem counts, protocol
SWEEP_FILE = "sweep.yaml"
SWEEP_STATE = "state.json"
SWEEP_RUNS = "runs"
CEILING = "ceiling.json"
CHECKPOINTS = "checkpoints"
CKPT_DONE = "COMPLETE"  # written last into a checkpoint directory: its absence marks a torn checkpoint
MODEL = "model"
BUILTIN_MARKER = "rbctl_builtin.json"  # in a built-in policy's directory and its checkpoints: the task it was made for
_STEP_DIR = re.compile(r"step_(\d+)")


def step_dir_name(step: int) -> str:
    return f"step_{step:06d}"


def step_of(name: str) -> int | None:
    """The step of a folder named `step_NNNNNN` (None for anything else, `.tmp` folders included)."""
    m = _STEP_DIR.fullmatch(name)
    return int(m.group(1)) if m else None


def is_run_dir(path: Path) -> bool:
    """An rbctl run directory: it has metrics or a checkpoints folder."""
    path = Path(path)
    return path.is_dir() and ((path / METRICS).exists() or (path / CHECKPOINTS).is_dir())


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / CHECKPOINTS / step_dir_name(step)


def final_eval_dir(run_dir: Path, step: int) -> Path:
    """Where a run's evaluation at `step` goes (and where `rbctl report` looks for final scores)."""
    return Path(run_dir) / EVAL_DIR / step_dir_name(step)


def periodic_eval_dir(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / EVAL_DIR / PERIODIC_DIR / step_dir_name(step)


def checkpoint_dirs(run_dir: Path) -> list[Path]:
    """Every `step_N` checkpoint folder, oldest first (complete or not; never `.tmp` folders)."""
    root = Path(run_dir) / CHECKPOINTS
    found = [p for p in root.glob("step_*") if p.is_dir() and step_of(p.name) is not None]
    return sorted(found, key=lambda p: step_of(p.name))


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def checkpoint_manifest(ck: Path) -> dict:
    """SHA-256 of every file of a checkpoint directory (but the marker), by relative path."""
    return {str(f.relative_to(ck)): sha256(f) for f in sorted(ck.rglob("*")) if f.is_file() and f.name != CKPT_DONE}


def checkpoint_problem(ck: Path) -> str | None:
    """Why a checkpoint cannot be used (None when it is complete and intact)."""
    marker = ck / CKPT_DONE
    if not marker.exists():
        return "incomplete"
    try:
        expected = json.loads(marker.read_text())["files"]
    except (json.JSONDecodeError, KeyError, TypeError, OSError):
        return "unreadable completion marker"
    actual = checkpoint_manifest(ck)
    bad = sorted(k for k in expected.keys() | actual.keys() if expected.get(k) != actual.get(k))
    return f"fails its integrity check ({', '.join(bad[:3])})" if bad else None


def good_checkpoints(run_dir: Path, log=None) -> list[tuple[int, Path]]:
    """(step, folder) of every complete, intact checkpoint, oldest first; others are skipped
    (with a warning through `log` when given)."""
    out = []
    for ck in checkpoint_dirs(run_dir):
        problem = checkpoint_problem(ck)
        if problem is None:
            out.append((step_of(ck.name), ck))
        elif log is not None:
            log(f"warning: skipping {problem} checkpoint {ck}" if problem == "incomplete"
                else f"warning: skipping checkpoint {ck}: {problem}")
    return out


def last_good_checkpoint(run_dir: Path, log=None) -> tuple[int, Path | None]:
    """(step, folder) of the newest complete, intact checkpoint; (0, None) when there is none."""
    for ck in reversed(checkpoint_dirs(run_dir)):
        problem = checkpoint_problem(ck)
        if problem is None:
            return step_of(ck.name), ck
        if log is not None:
            log(f"warning: skipping {problem} checkpoint {ck}" if problem == "incomplete"
                else f"warning: skipping checkpoint {ck}: {problem}")
    return 0, None


def checkpoint_step(source: str) -> int | None:
    """The step of a checkpoint model path ``…/checkpoints/step_000120/model`` (else None)."""
    m = re.search(rf"{CHECKPOINTS}/step_(\d+)/{MODEL}/?$", str(source))
    return int(m.group(1)) if m else None


def builtin_task_record(model_dir: Path) -> dict | None:
    """The built-in task settings a built-in policy folder (warm start or checkpoint) records."""
    marker = Path(model_dir) / BUILTIN_MARKER
    if not marker.exists():
        return None
    return json.loads(marker.read_text())
