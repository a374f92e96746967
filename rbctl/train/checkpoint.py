"""Writing and reading checkpoints. Selection and integrity are `rbctl.store.rundir`'s.

A run directory is data: the trainer state is read with `torch.load(weights_only=True)`, which
unpickles only tensors and plain containers, so a planted file cannot run code on resume. The RNG
states are stored as tensors, lists and numbers for that reason.
"""

from __future__ import annotations

import io
import json
import os
import random
import shutil
from pathlib import Path

import numpy as np
import torch

from rbctl.errors import UserError
from rbctl.store.atomic import write_atomic
from rbctl.store.faults import inject
from rbctl.store.rundir import CKPT_DONE, MODEL, Checkpoint, checkpoint_dir, checkpoint_dirs, checkpoint_manifest

STATE_FILE = "trainer_state.pt"


def rng_state() -> dict:
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    return {"torch": torch.get_rng_state(), "python": random.getstate(),
            "numpy": [kind, keys.tolist(), int(pos), int(has_gauss), float(gauss)]}


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))


def save_checkpoint(run_dir: Path, step: int, model, tokenizer, state: dict, keep: int,
                    builtin_marker: Path | None, weights: dict | None = None) -> None:
    """Write checkpoint `step` into a `.tmp` folder, seal it with the manifest (SHA-256 and size of
    every file), then rename it into place and delete all but the newest `keep` checkpoints.
    `weights`: the full state dict to save (gathered from FSDP shards), else the model's own."""
    final = checkpoint_dir(run_dir, step)
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / MODEL).mkdir(parents=True)
    model.save_pretrained(tmp / MODEL, safe_serialization=True, state_dict=weights)
    tokenizer.save_pretrained(tmp / MODEL)
    if builtin_marker is not None and builtin_marker.exists():
        shutil.copy(builtin_marker, tmp / MODEL / builtin_marker.name)
    inject("checkpoint", tmp / STATE_FILE)  # a failed write leaves only the `.tmp` folder, never a step folder
    torch.save(state, tmp / STATE_FILE)
    write_atomic(tmp / CKPT_DONE, json.dumps({"step": step, "files": checkpoint_manifest(tmp)}, indent=1), kind="marker")
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    for old in checkpoint_dirs(run_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def load_state(ck: Checkpoint) -> dict:
    """The trainer state of checkpoint `ck`, read once and verified as it is read (a mismatch raises
    `CorruptCheckpoint`), then unpickled as data (no code runs). It is held twice in memory for a
    moment (the bytes and the tensors made from them): `torch.load` takes a seekable file, so it
    cannot unpickle while the file streams through the hash."""
    path = ck.path / STATE_FILE
    with ck.open(STATE_FILE) as f:
        data = f.read()
    try:
        return torch.load(io.BytesIO(data), weights_only=True)
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
