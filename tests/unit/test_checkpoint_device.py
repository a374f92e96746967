"""A checkpoint's trainer state is loaded onto the CPU whatever device saved it (`load_state`'s
`map_location`): on a GPU run rank 0 saves its optimizer state from cuda:0, and every rank of the
resumed run must not restore it there."""

from __future__ import annotations

import torch

from rbctl.store.checkpoint import checkpoints_to_try, load_state, save_checkpoint
from tests.conftest import tiny_llama


def tag_storages_as_cuda(monkeypatch) -> None:
    """`torch.save` records every storage's location as 'cuda:0', exactly as it does for tensors on
    the first GPU (the tag is what `torch.load` restores onto unless told otherwise): a tagger ahead
    of torch's own in its registry of device taggers (`torch.serialization.register_package`)."""
    registry = torch.serialization._package_registry
    monkeypatch.setattr(torch.serialization, "_package_registry",
                        [(0, lambda storage: "cuda:0", lambda storage, location: None), *registry])


def test_a_trainer_state_saved_on_cuda_loads_onto_the_cpu(tmp_path, monkeypatch):
    from rbctl.tasks.builtin import build_tokenizer
    from rbctl.tasks.links import TaskSpec

    tok = build_tokenizer(TaskSpec())
    model = tiny_llama(len(tok))
    moment = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    state = {"step": 1, "optimizer": {"state": {0: {"step": torch.tensor(1.0), "exp_avg": moment}}, "param_groups": []}}
    tag_storages_as_cuda(monkeypatch)
    save_checkpoint(tmp_path, 1, model, tok, state, keep=1, builtin_marker=None)
    monkeypatch.undo()  # loading sees torch's own taggers and deserializers
    ck = checkpoints_to_try(tmp_path)[0]
    with open(ck.path / "trainer_state.pt", "rb") as f:  # the file records the CUDA device
        assert b"cuda:0" in f.read()
    got = load_state(ck)
    exp_avg = got["optimizer"]["state"][0]["exp_avg"]
    assert exp_avg.device == torch.device("cpu") and torch.equal(exp_avg, moment)
