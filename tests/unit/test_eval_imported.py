"""`rbctl eval` of checkpoints trained elsewhere (rbctl.eval.imported): which folder is the model,
its step, and where its results go (the run's checkpoints folder, where a manifest's report reads them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rbctl.errors import UserError
from rbctl.eval.imported import imported_checkpoint
from rbctl.eval.run import default_out_dir
from rbctl.report.sources.checkpoint_evals import checkpoint_folders


def model_dir(d: Path, weights: bool = True) -> Path:
    d.mkdir(parents=True)
    (d / "config.json").write_text("{}")
    if weights:
        (d / "model.safetensors").write_bytes(b"")
    return d


def test_trl_and_verl_checkpoints_name_their_model_step_and_run_folder(tmp_path: Path) -> None:
    trl = model_dir(tmp_path / "trl" / "grpo" / "seed_0" / "checkpoint-200")
    ck = imported_checkpoint(trl)
    assert (ck.model, ck.step, ck.folder, ck.framework) == (trl, 200, trl.parent, "TRL")
    verl = tmp_path / "ckpts" / "grpo" / "seed_0" / "global_step_40"
    hf = model_dir(verl / "actor" / "huggingface")
    for given in (verl, verl / "actor", hf):  # any of the three names the export
        ck = imported_checkpoint(given)
        assert (ck.model, ck.step, ck.folder, ck.framework) == (hf, 40, verl.parent, "verl")
    assert checkpoint_folders(verl.parent) == [(40, hf)] and checkpoint_folders(trl.parent) == [(200, trl)]
    out = default_out_dir(str(hf), None, {"n": 1})
    assert out.parent == verl.parent / "eval" / "step_000040" and out.name.startswith("protocol_")
    assert imported_checkpoint(tmp_path / "trl") is None  # an output folder is no checkpoint


def test_a_verl_step_without_its_hf_model_is_one_line(tmp_path: Path) -> None:
    verl = tmp_path / "global_step_7"
    model_dir(verl / "actor" / "huggingface", weights=False)  # verl writes config and tokenizer there anyway
    with pytest.raises(UserError, match=r"verl checkpoint 7 has no HF model at .*save_contents including hf_model"):
        imported_checkpoint(verl)
