"""The run directory and the sweep directory, defined once: every file and folder name, step
folders, the `ARM/seed_S` layout of a sweep's runs, and the format version. Checkpoint files and
their integrity are `rbctl.store.checkpoint`'s; reading is `rbctl.store.read`'s, writing the headers
and the sweep state `rbctl.store.write`'s.

    RUN_DIR/
      config.yaml             the resolved training config the code used
      config.step_NNNNNN.yaml the config steps up to NNNNNN ran with, where a resume changed it
      provenance.json         format_version, versions, git commit, device, seed (the run's header)
      metrics.jsonl           one line per step
      samples.jsonl           rollouts every `sample_every` steps
      eval.jsonl              periodic held-out evaluation, one line per (step, benchmark)
      checkpoints/step_NNNNNN/
        model/                save_pretrained weights + tokenizer (+ the built-in marker)
        trainer_state.pt      optimizer, scheduler, RNG and entropy-α state
        COMPLETE              written last: {"step", "files": {path: {"sha256", "size"}} of every other file}
      run.json                written by `rbctl ablate`: format_version, arm, seed, baseline, variant (warm_start)
      error.txt               written by `rbctl ablate` when the run failed: its traceback
      eval/step_NNNNNN/BENCH/ the run's own final evaluation at step NNNNNN: the one its sweep declares,
                              written by `rbctl ablate` (summary.json, samples.jsonl; partial.json while
                              incomplete: rbctl.eval.partial)
      eval/step_NNNNNN/protocol_XXXXXXXXXX/
        protocol.json         an `rbctl eval` of checkpoint NNNNNN under one protocol: its identity
                              (`protocol_dir_name`), whether it is the run's own declared protocol
        BENCH/                as above, one folder per benchmark
      eval/periodic/step_NNNNNN/BENCH/  the periodic evaluation training ran (the run's config's `eval:`)
      .lock                   held while `rbctl train` runs (rbctl.store.lock)
      tb/, wandb/             TensorBoard and W&B logs, when enabled

    SWEEP_DIR/
      sweep.yaml              the resolved sweep: {"format_version", "sweep": the sweep file, "configs": arm -> config}
      state.json              {"runs": {"ARM/seed_S": {"status", "error"}}}
      ceiling.json            optional: {"value": reachable pass@1, "source": text} (the plateau test)
      runs/ARM/seed_S/        one run directory per (arm, seed), or
      runs/ARM/WARM_START/seed_S/  per (arm, warm start, seed) when the sweep crosses warm starts
      .ablate.lock            held while `rbctl ablate` runs
      submitit/               the jobs' logs under `--launcher submitit`
      report/                 `rbctl report`'s default output: report.md, report.html, summary.md,
                              summary.tex, tables/, figures/, data/

`FORMAT_VERSION` is the layout's version, recorded in the run's header (provenance.json), in
run.json and in sweep.yaml; a reader refuses another (a file without one is version 1).
No torch here: `rbctl report` reads run directories without it.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

FORMAT_VERSION = 1

# the run directory
CONFIG = "config.yaml"
PROVENANCE = "provenance.json"  # the run's header: written when the run starts
METRICS = "metrics.jsonl"
SAMPLES = "samples.jsonl"
EVAL_LINES = "eval.jsonl"
RUN_META = "run.json"  # written by `rbctl ablate`: arm, seed, baseline, variant
ERROR_LOG = "error.txt"  # written by `rbctl ablate` beside a failed run: its traceback
LOCK = ".lock"  # a directory's own lock file (rbctl.store.lock); another folder's is "<name>.lock"
TENSORBOARD = "tb"
WANDB = "wandb"
EVAL_DIR = "eval"
PERIODIC_DIR = "periodic"
SUMMARY = "summary.json"  # one benchmark's evaluation: metrics, per-problem counts, protocol
EVAL_SAMPLES = "samples.jsonl"  # one benchmark's graded samples, appended as they are graded
EVAL_PARTIAL = "partial.json"  # beside them while the benchmark is not complete: what resumes it
PROTOCOL_PREFIX = "protocol_"  # an evaluation's folder per protocol: protocol_XXXXXXXXXX (`protocol_dir_name`)
PROTOCOL_FILE = "protocol.json"  # in it: the protocol it was evaluated with
CHECKPOINTS = "checkpoints"
STEP_PREFIX = "step_"  # step folders: step_NNNNNN
TMP_SUFFIX = ".tmp"  # a checkpoint folder while it is written
CKPT_DONE = "COMPLETE"  # written last into a checkpoint directory: its absence marks a torn checkpoint
MODEL = "model"
TRAINER_STATE = "trainer_state.pt"
BUILTIN_MARKER = "rbctl_builtin.json"  # in a built-in policy's directory and its checkpoints: the task it was made for
# the sweep directory
SWEEP_FILE = "sweep.yaml"
SWEEP_STATE = "state.json"
SWEEP_RUNS = "runs"
CEILING = "ceiling.json"
SWEEP_HISTORY = "sweep_history.jsonl"  # every version of the sweep file `rbctl ablate` ran under (rbctl.store.history)
STUDY_HISTORY = "study_history"  # per study file that reads the sweep: study_history/<study>.jsonl
SWEEP_LOCK = ".ablate.lock"
SUBMITIT = "submitit"
SEED_PREFIX = "seed_"  # a sweep's run folders: ARM/seed_S, ARM/WARM_START/seed_S
# `rbctl report`'s output folder (by default in the sweep or run directory)
REPORT_DIR = "report"
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
SUMMARY_MD, SUMMARY_TEX = "summary.md", "summary.tex"  # the report's one page (rbctl.report.render.summary)
REPORT_TABLES = "tables"
REPORT_FIGURES = "figures"
REPORT_DATA = "data"
# where commands put run and sweep directories by default (relative to the working directory)
RUNS_ROOT = "runs"

NAMES = (CONFIG, PROVENANCE, METRICS, SAMPLES, EVAL_LINES, RUN_META, ERROR_LOG, LOCK, TENSORBOARD, WANDB, EVAL_DIR,
         PERIODIC_DIR, SUMMARY, EVAL_SAMPLES, EVAL_PARTIAL, PROTOCOL_PREFIX, PROTOCOL_FILE, CHECKPOINTS, STEP_PREFIX,
         TMP_SUFFIX, CKPT_DONE, MODEL, TRAINER_STATE, BUILTIN_MARKER, SWEEP_FILE, SWEEP_STATE, SWEEP_RUNS, CEILING,
         SWEEP_HISTORY, STUDY_HISTORY, SWEEP_LOCK, SUBMITIT,
         SEED_PREFIX, REPORT_DIR, REPORT_MD, REPORT_HTML, SUMMARY_MD, SUMMARY_TEX, REPORT_TABLES, REPORT_FIGURES, REPORT_DATA, RUNS_ROOT)
"""Every file and folder name of a run, sweep or report directory (and the prefixes of its step and
seed folders): no module outside rbctl/store/ spells one (tests/unit/test_layout.py)."""

_STEP_DIR = re.compile(re.escape(STEP_PREFIX) + r"(\d+)")
_SEED_DIR = re.compile(re.escape(SEED_PREFIX) + r"(\d+)")


def step_dir_name(step: int) -> str:
    return f"{STEP_PREFIX}{step:06d}"


def step_of(name: str) -> int | None:
    """The step of a folder named `step_NNNNNN` (None for anything else, `.tmp` folders included)."""
    m = _STEP_DIR.fullmatch(name)
    return int(m.group(1)) if m else None


def kept_config_path(run_dir: Path, step: int) -> Path:
    """config.step_NNNNNN.yaml: the config the steps up to `step` ran with, kept when a resume at
    `step` changed it."""
    stem, suffix = CONFIG.rsplit(".", 1)
    return Path(run_dir) / f"{stem}.{step_dir_name(step)}.{suffix}"


def study_history_path(sweep_dir: Path, study: str) -> Path:
    """``SWEEP/study_history/<study>.jsonl``: the versions of study file `study` (its file name without
    .yaml) recorded in a sweep directory it reads."""
    return Path(sweep_dir) / STUDY_HISTORY / f"{study}.jsonl"


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


def protocol_dir_name(identity: dict) -> str:
    """The folder of an evaluation under one protocol: ``protocol_`` and the first 10 hex digits of
    the SHA-256 of `identity` (what decides the samples and their grading: n, sampling, token limit,
    seed, extraction, …; JSON with sorted keys). Two protocols never share a folder, so an
    evaluation under one never deletes another's results."""
    text = json.dumps(identity, sort_keys=True, ensure_ascii=False, default=str)
    return PROTOCOL_PREFIX + hashlib.sha256(text.encode()).hexdigest()[:10]


def protocol_eval_dir(parent: Path, identity: dict) -> Path:
    """``PARENT/protocol_XXXXXXXXXX``: where an evaluation under `identity` goes below `parent` (a
    run's ``eval/step_N``, or a bare model's folder under ``runs/eval/``)."""
    return Path(parent) / protocol_dir_name(identity)


def protocol_dirs(parent: Path) -> list[Path]:
    """Every protocol folder of `parent` (one holding a protocol.json), sorted by name."""
    return sorted(p for p in Path(parent).glob(f"{PROTOCOL_PREFIX}*") if (p / PROTOCOL_FILE).is_file())


def step_dirs(parent: Path) -> list[tuple[int, Path]]:
    """(step, folder) of every `step_N` folder of `parent`, oldest first (never `.tmp` folders)."""
    found = [(step_of(p.name), p) for p in Path(parent).glob(f"{STEP_PREFIX}*") if p.is_dir()]
    return sorted((s, p) for s, p in found if s is not None)


def checkpoint_dirs(run_dir: Path) -> list[Path]:
    """Every `step_N` checkpoint folder, oldest first (complete or not; never `.tmp` folders)."""
    return [p for _, p in step_dirs(Path(run_dir) / CHECKPOINTS)]


# --- a sweep's runs ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunKey:
    """Where one run of a sweep sits: ``ARM/seed_S``, or ``ARM/WARM_START/seed_S`` when the sweep
    crosses warm starts. Its text (`str`) is the run's key in state.json and its folder below
    ``SWEEP/runs/``."""

    arm: str
    seed: int
    warm_start: str | None = None

    def __str__(self) -> str:
        seed = f"{SEED_PREFIX}{self.seed}"
        return f"{self.arm}/{seed}" if self.warm_start is None else f"{self.arm}/{self.warm_start}/{seed}"


def run_key(arm: str, seed: int, warm_start: str | None = None) -> str:
    """A run's key in state.json, and its folder below ``SWEEP/runs/``: ``ARM/seed_S`` or ``ARM/WS/seed_S``."""
    return str(RunKey(arm, seed, warm_start))


def parse_run_key(key: str) -> RunKey | None:
    """The `RunKey` of ``ARM/seed_S`` or ``ARM/WS/seed_S`` (None for any other path)."""
    parts = key.split("/")
    seed = seed_of(parts[-1])
    if seed is None or len(parts) not in (2, 3) or not all(parts[:-1]):
        return None
    return RunKey(parts[0], seed, parts[1] if len(parts) == 3 else None)


def seed_of(name: str) -> int | None:
    """The seed of a run folder named ``seed_S`` (None for anything else)."""
    m = _SEED_DIR.fullmatch(name)
    return int(m.group(1)) if m else None


def sweep_run_dir(sweep_dir: Path, key: str) -> Path:
    """The run directory of run `key` (`run_key`) of a sweep."""
    return Path(sweep_dir) / SWEEP_RUNS / key


def sweep_runs(sweep_dir: Path) -> list[tuple[str, Path]]:
    """(key, folder) of every folder below ``SWEEP/runs/`` laid out as a run (``ARM/seed_S`` or
    ``ARM/WS/seed_S``), sorted by key; whether it holds anything is the caller's question."""
    root = Path(sweep_dir) / SWEEP_RUNS
    found = [d for pattern in (f"*/{SEED_PREFIX}*", f"*/*/{SEED_PREFIX}*") for d in root.glob(pattern) if d.is_dir()]
    keys = [(d.relative_to(root).as_posix(), d) for d in found]
    return sorted((k, d) for k, d in keys if parse_run_key(k) is not None)


def builtin_task_record(model_dir: Path) -> dict | None:
    """The built-in task settings a built-in policy folder (warm start or checkpoint) records."""
    marker = Path(model_dir) / BUILTIN_MARKER
    if not marker.exists():
        return None
    return json.loads(marker.read_text())
