"""The run directory, defined once: file names, step folders, checkpoint integrity and selection.

    RUN_DIR/
      config.yaml             the resolved training config the code used
      config.step_NNNNNN.yaml the config steps up to NNNNNN ran with, where a resume changed it
      provenance.json         versions, git commit, device, seed
      metrics.jsonl           one line per optimizer step
      samples.jsonl           rollouts every `sample_every` steps
      eval.jsonl              periodic held-out evaluation, one line per (step, benchmark)
      checkpoints/step_NNNNNN/
        model/                save_pretrained weights + tokenizer (+ the built-in marker)
        trainer_state.*       optimizer, scheduler, RNG and entropy-α state
        COMPLETE              written last: {"step", "files": {path: {"sha256", "size"}} of every other file}
      run.json                written by `rbctl ablate`: arm, seed, baseline, variant (warm_start)
      eval/step_NNNNNN/BENCH/ final evaluation (summary.json, samples.jsonl; partial.json while
                              incomplete: rbctl.eval.partial)
      eval/periodic/step_NNNNNN/BENCH/

    SWEEP_DIR/
      sweep.yaml              the resolved sweep: {"sweep": the sweep file, "configs": arm -> config}
      state.json              {"runs": {"ARM/seed_S": {"status", "error"}}}
      ceiling.json            optional: {"value": reachable pass@1, "source": text} (the plateau test)
      runs/ARM/seed_S/        one run directory per (arm, seed), or
      runs/ARM/WARM_START/seed_S/  per (arm, warm start, seed) when the sweep crosses warm starts

A checkpoint is chosen when its COMPLETE marker exists and lists exactly the files there are, each
of its recorded size: choosing reads no file's contents. The one that is loaded is verified as it
is read (each file hashed while it is read for loading, `Checkpoint.open`); one that fails is
skipped with a warning and the previous one is loaded (`first_intact`). `rbctl train` resumes from,
and `rbctl eval` reads, only checkpoints that pass both.
No torch here: `rbctl report` reads run directories without it.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from rbctl.errors import UserError

CONFIG = "config.yaml"
PROVENANCE = "provenance.json"
METRICS = "metrics.jsonl"
SAMPLES = "samples.jsonl"
EVAL_LINES = "eval.jsonl"
RUN_META = "run.json"  # written by `rbctl ablate`: arm, seed, baseline, variant
EVAL_DIR = "eval"
PERIODIC_DIR = "periodic"
SUMMARY = "summary.json"  # one benchmark's evaluation: metrics, per-problem counts, protocol
EVAL_SAMPLES = "samples.jsonl"  # one benchmark's graded samples, appended as they are graded
EVAL_PARTIAL = "partial.json"  # beside them while the benchmark is not complete: what resumes it
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


_CHUNK = 1 << 24  # 16 MiB per read while hashing


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def checkpoint_manifest(ck: Path) -> dict:
    """{relative path: {"sha256", "size"}} of every file of a checkpoint directory but the marker.
    Reads every byte: it runs once, when `save_checkpoint` seals the checkpoint."""
    return {str(f.relative_to(ck)): {"sha256": sha256(f), "size": f.stat().st_size}
            for f in sorted(ck.rglob("*")) if f.is_file() and f.name != CKPT_DONE}


class CorruptCheckpoint(UserError):
    """A checkpoint file whose bytes, as they were read for loading, do not match its manifest."""

    def __init__(self, ck: Path, problem: str):
        super().__init__(f"checkpoint {ck} {problem}")
        self.problem = problem


@dataclass(frozen=True)
class Checkpoint:
    """A sealed checkpoint as its COMPLETE marker describes it, chosen without reading a weight byte.
    Its files are verified as they are read for loading (`open`), never in a separate pass."""

    step: int
    path: Path
    files: dict[str, tuple[str, int]]  # relative path -> (SHA-256, size)

    @property
    def model_dir(self) -> Path:
        return self.path / MODEL

    def open(self, rel: str) -> "VerifiedReader":
        if rel not in self.files:
            raise CorruptCheckpoint(self.path, f"has no {rel} in its manifest")
        return VerifiedReader(self, rel)

    def verify(self, rel: str) -> None:
        """Hash one file whole (for the small files that a library then reads by path itself)."""
        with self.open(rel):
            pass


class VerifiedReader:
    """One checkpoint file read front to back, every byte hashed as it is read. Leaving the `with`
    block reads what is left, then compares size and SHA-256 with the manifest: a mismatch raises
    `CorruptCheckpoint`, also in place of an error the corrupted bytes caused in the reader."""

    def __init__(self, ck: Checkpoint, rel: str):
        self.ck, self.rel = ck, rel
        self.expected, self.size = ck.files[rel]
        self._f = open(ck.path / rel, "rb")
        self._h = hashlib.sha256()
        self.pos = 0

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n)
        self._h.update(data)
        self.pos += len(data)
        return data

    def readinto(self, buf) -> int:
        """Fill `buf` (a writable buffer) completely; fewer bytes only at the end of the file."""
        view, got = memoryview(buf).cast("B"), 0
        while got < len(view):
            k = self._f.readinto(view[got:got + _CHUNK])
            if not k:
                break
            self._h.update(view[got:got + k])
            got += k
        self.pos += got
        return got

    def __enter__(self) -> "VerifiedReader":
        return self

    def __exit__(self, kind, error, tb) -> None:
        if kind is not None and not issubclass(kind, Exception):  # Ctrl-C: stop, do not read on
            self._f.close()
            return
        try:
            while self.read(_CHUNK):
                pass
        finally:
            self._f.close()
        if self.pos != self.size:
            raise CorruptCheckpoint(self.ck.path, f"fails its integrity check ({self.rel}: {self.pos} bytes, "
                                                  f"its manifest says {self.size})") from None
        if self._h.hexdigest() != self.expected:
            raise CorruptCheckpoint(self.ck.path, f"fails its integrity check ({self.rel})") from None


def _sealed(ck: Path) -> Checkpoint | str:
    """The checkpoint its marker describes, or why it cannot be used. Reads the marker and the
    directory listing (names and sizes), no file's contents."""
    marker = ck / CKPT_DONE
    if not marker.exists():
        return "incomplete"
    try:
        listed = json.loads(marker.read_text())["files"]
        files = {k: (str(v["sha256"]), int(v["size"])) for k, v in listed.items()}
    except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError, OSError):
        return "unreadable completion marker"
    actual = {str(f.relative_to(ck)): f.stat().st_size for f in ck.rglob("*") if f.is_file() and f.name != CKPT_DONE}
    bad = sorted(k for k in files.keys() | actual.keys()
                 if k not in files or k not in actual or files[k][1] != actual[k])
    if bad:
        return f"fails its integrity check ({', '.join(bad[:3])})"
    return Checkpoint(step_of(ck.name), ck, files)


def checkpoint_problem(ck: Path) -> str | None:
    """Why a checkpoint cannot be chosen (None when it is sealed and every file has its recorded
    size). Its contents are checked when it is loaded (`Checkpoint.open`)."""
    found = _sealed(ck)
    return found if isinstance(found, str) else None


def checkpoints_to_try(run_dir: Path, step: int | None = None, log=None) -> list[Checkpoint]:
    """The checkpoints a command may load, newest first, chosen from markers, manifests and file
    sizes (no weight byte is read): every usable one, or checkpoint `step` alone (a UserError if it
    cannot be used). Unusable ones are skipped with a warning through `log` when given. The caller
    loads the first that verifies as it is read (`first_intact`)."""
    if step is not None:
        ck = checkpoint_dir(run_dir, step)
        found = _sealed(ck) if ck.is_dir() else "missing"
        if isinstance(found, str):
            raise UserError(f"run directory {run_dir} has no usable checkpoint for step {step} ({found})")
        return [found]
    out = []
    for ck in reversed(checkpoint_dirs(run_dir)):
        found = _sealed(ck)
        if not isinstance(found, str):
            out.append(found)
        elif log is not None:
            log(f"warning: skipping {found} checkpoint {ck}" if found == "incomplete"
                else f"warning: skipping checkpoint {ck}: {found}")
    return out


def first_intact(candidates: list[Checkpoint], load, log=None):
    """(checkpoint, load(checkpoint)) for the first of `candidates` whose files verify as `load`
    reads them; a corrupted one is skipped with a warning through `log`. (None, None) if none does."""
    for ck in candidates:
        try:
            return ck, load(ck)
        except CorruptCheckpoint as e:
            if log is not None:
                log(f"warning: skipping checkpoint {ck.path}: {e.problem}")
    return None, None


def last_good_checkpoint(run_dir: Path, log=None) -> tuple[int, Path | None]:
    """(step, folder) of the newest usable checkpoint (`checkpoints_to_try`); (0, None) when there is none."""
    found = checkpoints_to_try(run_dir, log=log)
    return (found[0].step, found[0].path) if found else (0, None)


def builtin_task_record(model_dir: Path) -> dict | None:
    """The built-in task settings a built-in policy folder (warm start or checkpoint) records."""
    marker = Path(model_dir) / BUILTIN_MARKER
    if not marker.exists():
        return None
    return json.loads(marker.read_text())
