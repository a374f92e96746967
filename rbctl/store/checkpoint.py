"""Checkpoint I/O, in one place: writing a checkpoint and sealing it with its manifest, choosing one
from markers and file sizes, and reading its files verified as they are read (the trainer state,
the model's safetensors weights). Model construction (transformers, peft) is
`rbctl.rollout.models`'s; it reads a checkpoint's files through this module.

A checkpoint is chosen when its COMPLETE marker exists and lists exactly the files there are, each
of its recorded size: choosing reads no file's contents. The one that is loaded is verified as it
is read (each file hashed while it is read for loading, `Checkpoint.open`); one that fails is
skipped with a warning and the previous one is loaded (`first_intact`). `rbctl train` resumes from,
and `rbctl eval` reads, only checkpoints that pass both.

A run directory is data: the trainer state is read with `torch.load(weights_only=True)`, which
unpickles only tensors and plain containers, so a planted file cannot run code on resume; its
tensors are loaded onto the CPU whatever device saved them (`load_state`).
Needs torch: `rbctl report` never imports it.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from rbctl.errors import UserError
from rbctl.store.atomic import write_atomic
from rbctl.store.faults import inject
from rbctl.store.rundir import (CKPT_DONE, MODEL, TMP_SUFFIX, TRAINER_STATE, checkpoint_dir, checkpoint_dirs,
                                step_of)

# peft's names inside an adapter's model folder (a LoRA run's checkpoint)
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"


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

    @property
    def is_adapter(self) -> bool:
        """A LoRA run's checkpoint: its model folder holds the adapter, not full weights."""
        return (self.model_dir / ADAPTER_CONFIG).exists()

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


def run_checkpoints(run_dir: Path, step: int | None = None, log=None) -> list[Checkpoint]:
    """`checkpoints_to_try`, refusing a run directory that has none."""
    found = checkpoints_to_try(run_dir, step, log)
    if not found:
        raise UserError(f"run directory {run_dir} has no complete checkpoint yet")
    return found


# --- writing --------------------------------------------------------------------------------------


def save_checkpoint(run_dir: Path, step: int, model, tokenizer, state: dict, keep: int,
                    builtin_marker: Path | None, weights: dict | None = None) -> None:
    """Write checkpoint `step` into a `.tmp` folder, seal it with the manifest (SHA-256 and size of
    every file), then rename it into place and delete all but the newest `keep` checkpoints.
    `weights`: the full state dict to save (gathered from FSDP shards), else the model's own."""
    final = checkpoint_dir(run_dir, step)
    tmp = final.with_name(final.name + TMP_SUFFIX)
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / MODEL).mkdir(parents=True)
    model.save_pretrained(tmp / MODEL, safe_serialization=True, state_dict=weights)
    tokenizer.save_pretrained(tmp / MODEL)
    if builtin_marker is not None and builtin_marker.exists():
        shutil.copy(builtin_marker, tmp / MODEL / builtin_marker.name)
    inject("checkpoint", tmp / TRAINER_STATE)  # a failed write leaves only the `.tmp` folder, never a step folder
    torch.save(state, tmp / TRAINER_STATE)
    write_atomic(tmp / CKPT_DONE, json.dumps({"step": step, "files": checkpoint_manifest(tmp)}, indent=1), kind="marker")
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    for old in checkpoint_dirs(run_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


# --- reading --------------------------------------------------------------------------------------


def load_state(ck: Checkpoint) -> dict:
    """The trainer state of checkpoint `ck`, read once and verified as it is read (a mismatch raises
    `CorruptCheckpoint`), then unpickled as data (no code runs). It is held twice in memory for a
    moment (the bytes and the tensors made from them): `torch.load` takes a seekable file, so it
    cannot unpickle while the file streams through the hash.

    Every tensor is loaded onto the CPU (`map_location`): rank 0 of a GPU run saved its optimizer
    state from cuda:0, and without it every rank of a resumed DDP run would restore that state onto
    cuda:0 (N copies on one GPU); the optimizer's `load_state_dict` moves each onto its own
    parameter's device."""
    path = ck.path / TRAINER_STATE
    with ck.open(TRAINER_STATE) as f:
        data = f.read()
    try:
        return torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except Exception as e:  # an UnpicklingError names the refused global or opcode
        raise UserError(f"{path} is not plain checkpoint data (refused to unpickle it: {_reason(e)}); "
                        "a run directory is read as data, never as code") from None


def _reason(e: Exception) -> str:
    """The useful part of torch's refusal ("Unsupported global: GLOBAL posix.system"), without its
    advice to retry with weights_only=False, which is exactly what must not happen here."""
    noise = ("Weights only load failed", "Please file an issue", "Check the documentation")
    lines = [x.replace("WeightsUnpickler error:", "").strip() for x in str(e).splitlines()]
    lines = [x for x in lines if x and not x.startswith(noise)]
    return (lines[0] if lines else type(e).__name__)[:200]


# safetensors' dtype names (https://github.com/huggingface/safetensors, "Format")
_ST_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
              "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
              "BOOL": torch.bool, "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2}


def read_safetensors(ck: Checkpoint, rel: str) -> dict[str, torch.Tensor]:
    """The tensors of the checkpoint's safetensors file `rel`, each read straight into its own CPU
    tensor while the file is hashed (`Checkpoint.open`): one pass over the bytes, one copy in memory.
    (`safetensors.torch.load` would take the whole file as bytes and copy it again; `safe_open`
    maps the file, so the hash would be a second read.) The format: an 8-byte little-endian header
    length, a JSON header {name: {dtype, shape, data_offsets}}, then the tensors' bytes."""
    out = {}
    with ck.open(rel) as f:
        n = int.from_bytes(f.read(8), "little")
        if n > 100_000_000:  # safetensors' own limit on the header
            raise UserError(f"{ck.path / rel}: a {n}-byte header: not a safetensors file")
        header = json.loads(f.read(n))
        header.pop("__metadata__", None)
        at = 0
        for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
            (begin, end), dtype = info["data_offsets"], _ST_DTYPES.get(info["dtype"])
            t = torch.empty(info["shape"], dtype=dtype) if dtype is not None else None
            if t is None or begin < at or t.nbytes != end - begin:
                raise UserError(f"{ck.path / rel}: tensor {name} ({info['dtype']}) is not one this reader takes")
            f.read(begin - at)  # no gap in files safetensors writes; hashed all the same if there is one
            if f.readinto(t.reshape(-1).view(torch.uint8).numpy()) != t.nbytes:
                raise UserError(f"{ck.path / rel}: the file ends inside tensor {name}")
            out[name], at = t, end
    return out


def checkpoint_weights(ck: Checkpoint) -> dict[str, torch.Tensor]:
    """Every tensor of the checkpoint's model/*.safetensors (each shard of a sharded save), read once
    and verified as read."""
    weights = {}
    for rel in sorted(r for r in ck.files if r.startswith(f"{MODEL}/") and r.endswith(".safetensors")):
        weights.update(read_safetensors(ck, rel))
    return weights


def adapter_weights(ck: Checkpoint, check_config: bool) -> dict[str, torch.Tensor]:
    """The LoRA adapter's weights of a checkpoint (`Checkpoint.is_adapter`), read once and verified
    as read; `check_config`: hash its adapter config first (when `verify_model_files` has not)."""
    if check_config:
        ck.verify(f"{MODEL}/{ADAPTER_CONFIG}")
    return read_safetensors(ck, f"{MODEL}/{ADAPTER_WEIGHTS}")


def verify_model_files(ck: Checkpoint) -> None:
    """Hash every file of the checkpoint's model folder but its weights (config, tokenizer: the
    small files a library then reads by path)."""
    for rel in ck.files:
        if rel.startswith(f"{MODEL}/") and not rel.endswith(".safetensors"):
            ck.verify(rel)
