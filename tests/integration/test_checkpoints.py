"""Checkpoints are chosen without reading their contents and verified once, as they are read for
loading: counted with inotify (every open of a checkpoint file, by any code, C and
Rust libraries included) and by counting the bytes Python reads from each file."""

from __future__ import annotations

import builtins
import ctypes
import io
import json
import os
import struct
import sys
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from rbctl.store.checkpoint import checkpoints_to_try
from rbctl.store.rundir import CKPT_DONE

IN_OPEN, IN_ISDIR = 0x20, 0x40000000


@contextmanager
def opens(*dirs: Path):
    """Counter {relative path: times opened} of the files directly in `dirs` (inotify IN_OPEN: any
    open by this process or a library it calls, whatever its language)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_NONBLOCK)
    assert fd >= 0
    watches = {libc.inotify_add_watch(fd, str(d).encode(), IN_OPEN): d for d in dirs}
    assert all(w >= 0 for w in watches)
    seen: Counter = Counter()
    try:
        yield seen
    finally:
        root = dirs[0]
        while True:
            try:
                buf = os.read(fd, 1 << 16)
            except BlockingIOError:
                break
            at = 0
            while at < len(buf):
                wd, mask, _, n = struct.unpack_from("iIII", buf, at)
                name = buf[at + 16: at + 16 + n].rstrip(b"\0").decode()
                if name and not mask & IN_ISDIR:
                    seen[str((watches[wd] / name).relative_to(root))] += 1
                at += 16 + n
        os.close(fd)


class _Counted(io.BufferedIOBase):
    """A binary file whose read/readinto bytes are added to a tally."""

    def __init__(self, f, tally: Counter, key: str):
        self._f, self._tally, self._key = f, tally, key

    def read(self, n=-1):
        data = self._f.read(n)
        self._tally[self._key] += len(data)
        return data

    def readinto(self, b):
        k = self._f.readinto(b)
        self._tally[self._key] += k or 0
        return k

    def __getattr__(self, name):
        return getattr(self._f, name)

    def close(self):
        self._f.close()


@contextmanager
def bytes_read(root: Path, monkeypatch):
    """Counter {relative path: bytes read through Python's open} of the binary files under `root`."""
    tally: Counter = Counter()
    real = builtins.open

    def counting(file, mode="r", *a, **k):
        f = real(file, mode, *a, **k)
        p = Path(os.fspath(file)) if isinstance(file, (str, os.PathLike)) else None
        if p is not None and "b" in mode and p.resolve().is_relative_to(root.resolve()):
            return _Counted(f, tally, str(p.resolve().relative_to(root.resolve())))
        return f

    with monkeypatch.context() as m:
        m.setattr(builtins, "open", counting)
        m.setattr(io, "open", counting)
        yield tally


@contextmanager
def hashed(monkeypatch):
    """Counter {relative path: times verified} of checkpoint files (`VerifiedReader`s made)."""
    from rbctl.store import checkpoint

    tally: Counter = Counter()
    real = checkpoint.VerifiedReader.__init__

    def counting(self, ck, rel):
        tally[rel] += 1
        real(self, ck, rel)

    with monkeypatch.context() as m:
        m.setattr(checkpoint.VerifiedReader, "__init__", counting)
        yield tally


@pytest.fixture(scope="module")
def two_checkpoints(tmp_path_factory, rbctl_cache):
    """A 4-step tiny run with checkpoints at steps 2 and 4 (trained once for this module)."""
    from rbctl.config.train import TrainConfig
    from rbctl.train.loop import train
    from tests.conftest import TINY_TRAIN

    run = tmp_path_factory.mktemp("ckpt") / "run"
    train(TrainConfig.model_validate({**TINY_TRAIN, "steps": 4, "save_every": 2}), run, progress=False,
          log=lambda *a: None)
    return run


def _sizes(ck: Path) -> dict[str, int]:
    return {str(f.relative_to(ck)): f.stat().st_size for f in ck.rglob("*") if f.is_file() and f.name != CKPT_DONE}


@pytest.mark.skipif(sys.platform != "linux", reason="inotify")
def test_choosing_reads_only_markers_and_loading_reads_each_weight_file_once(two_checkpoints, monkeypatch):
    from rbctl.rollout.models import load_policy

    ck = two_checkpoints / "checkpoints" / "step_000004"
    with opens(ck, ck / "model") as opened, bytes_read(ck, monkeypatch) as read:
        chosen = checkpoints_to_try(two_checkpoints)
    assert [c.step for c in chosen] == [4, 2]
    assert opened == {CKPT_DONE: 1} and set(read) <= {CKPT_DONE}  # no file's contents but the marker's

    sizes = _sizes(ck)
    with opens(ck, ck / "model") as opened, bytes_read(ck, monkeypatch) as read, hashed(monkeypatch) as verified:
        load_policy(chosen[0], device="cpu")
    model_files = {rel for rel in sizes if rel.startswith("model/")}
    assert verified == {rel: 1 for rel in model_files}  # every file the model is made of, verified once
    # the weights: opened once, every byte read once (hashed and deserialized from the same read)
    assert opened["model/model.safetensors"] == 1 and read["model/model.safetensors"] == sizes["model/model.safetensors"]
    assert "trainer_state.pt" not in opened  # evaluation reads no optimizer state
    # the small files are hashed whole, then transformers / tokenizers read those they need by path
    # (config.json 3 times: the hash, AutoConfig, the tokenizer's class lookup)
    assert all(read[rel] >= sizes[rel] for rel in model_files)


@pytest.mark.skipif(sys.platform != "linux", reason="inotify")
def test_a_resume_chooses_once_and_reads_weights_and_trainer_state_once(two_checkpoints, tiny_config, monkeypatch):
    from rbctl.train.trainer import Trainer

    ck = two_checkpoints / "checkpoints" / "step_000004"
    sizes = _sizes(ck)
    with opens(ck, ck / "model") as opened, bytes_read(ck, monkeypatch) as read, hashed(monkeypatch) as verified:
        tr = Trainer(tiny_config(steps=6), two_checkpoints, log=lambda *a: None)
    assert tr.resume_step == 4
    assert opened[CKPT_DONE] == 1  # one look-up for the whole set-up
    for rel in ("model/model.safetensors", "trainer_state.pt"):
        assert opened[rel] == 1 and read[rel] == sizes[rel] and verified[rel] == 1, rel


@pytest.mark.skipif(sys.platform != "linux", reason="inotify")
def test_rbctl_eval_on_a_run_directory_chooses_once_and_reads_the_weights_once(two_checkpoints, tmp_path):
    from rbctl.cli import run as cli

    ck = two_checkpoints / "checkpoints" / "step_000004"
    with opens(ck, ck / "model") as opened:
        assert cli(["eval", str(two_checkpoints), "-b", "builtin", "--limit", "2", "--n", "1",
                    "--max-new-tokens", "4", "-o", str(tmp_path / "ev")]) == 0
    assert opened[CKPT_DONE] == 1 and opened["model/model.safetensors"] == 1 and "trainer_state.pt" not in opened


def _run_copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".lock"))
    return dst


def test_choosing_checks_marker_file_set_and_sizes(two_checkpoints, tmp_path):
    from rbctl.store.checkpoint import checkpoint_problem, last_good_checkpoint

    run = _run_copy(two_checkpoints, tmp_path / "run")
    ck4 = run / "checkpoints" / "step_000004"
    marker = json.loads((ck4 / CKPT_DONE).read_text())
    assert marker["files"]["trainer_state.pt"]["size"] == (ck4 / "trainer_state.pt").stat().st_size
    assert checkpoint_problem(ck4) is None and last_good_checkpoint(run)[0] == 4
    # a marker that maps a file to its SHA-256 alone, without its size, is unreadable
    (ck4 / CKPT_DONE).write_text(json.dumps({"step": 4, "files": {k: v["sha256"] for k, v in marker["files"].items()}}))
    assert checkpoint_problem(ck4) == "unreadable completion marker" and last_good_checkpoint(run)[0] == 2
    (ck4 / CKPT_DONE).write_text(json.dumps(marker))
    with open(ck4 / "trainer_state.pt", "ab") as f:  # one byte more than the manifest says
        f.write(b"\0")
    assert checkpoint_problem(ck4) == "fails its integrity check (trainer_state.pt)"
    (ck4 / "trainer_state.pt").write_bytes((two_checkpoints / "checkpoints/step_000004/trainer_state.pt").read_bytes())
    (ck4 / "model" / "stray.bin").write_bytes(b"x")  # a file the manifest does not list
    assert checkpoint_problem(ck4) == "fails its integrity check (model/stray.bin)"
    messages = []
    assert [c.step for c in checkpoints_to_try(run, log=messages.append)] == [2]
    assert messages == [f"warning: skipping checkpoint {ck4}: fails its integrity check (model/stray.bin)"]


def test_a_flipped_byte_is_found_as_the_file_is_read(two_checkpoints, tmp_path):
    from rbctl.store.checkpoint import CorruptCheckpoint, load_state, read_safetensors

    run = _run_copy(two_checkpoints, tmp_path / "run")
    for rel, read in (("model/model.safetensors", lambda ck: read_safetensors(ck, "model/model.safetensors")),
                      ("trainer_state.pt", load_state)):
        path = run / "checkpoints" / "step_000004" / rel
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x01  # inside the tensor data: every parser would take it
        path.write_bytes(bytes(data))
        ck = checkpoints_to_try(run)[0]
        assert ck.step == 4  # same size: chosen
        with pytest.raises(CorruptCheckpoint, match=rf"step_000004 fails its integrity check \({rel}\)"):
            read(ck)


def test_read_safetensors_equals_safetensors_own_loader(tmp_path):
    """Every dtype the reader maps, 0-d and empty tensors, and a file that safetensors wrote."""
    from rbctl.store.checkpoint import checkpoint_manifest, read_safetensors

    g = torch.Generator().manual_seed(0)
    tensors = {
        "f32": torch.randn(3, 5, generator=g), "bf16": torch.randn(7, generator=g).to(torch.bfloat16),
        "f16": torch.randn(2, 2, generator=g).half(), "f64": torch.randn(1, generator=g).double(),
        "i64": torch.arange(5), "i8": torch.tensor([-3, 4], dtype=torch.int8), "u8": torch.tensor([255], dtype=torch.uint8),
        "bool": torch.tensor([True, False, True]), "scalar": torch.tensor(2.5), "empty": torch.zeros(0, 4),
        "f8": torch.randn(4, generator=g).to(torch.float8_e4m3fn),
    }
    ck = tmp_path / "run" / "checkpoints" / "step_000001"
    (ck / "model").mkdir(parents=True)
    save_file(tensors, str(ck / "model" / "model.safetensors"), metadata={"format": "pt"})
    (ck / CKPT_DONE).write_text(json.dumps({"step": 1, "files": checkpoint_manifest(ck)}))
    got = read_safetensors(checkpoints_to_try(tmp_path / "run")[0], "model/model.safetensors")
    want = load_file(str(ck / "model" / "model.safetensors"))
    assert got.keys() == want.keys()
    for k in want:
        assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape, k
        assert torch.equal(got[k].view(torch.uint8) if k == "f8" else got[k],
                           want[k].view(torch.uint8) if k == "f8" else want[k]), k
