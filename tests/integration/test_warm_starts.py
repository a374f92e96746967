"""The warm starts shipped inside the package (rbctl.tasks.shipped): each loads with its SHA-256s
checked, meets its task's stated targets on the held-out split, is refused when a file changed or
when the config's task settings are not the ones it was trained with, and is what a run trains from."""

from __future__ import annotations

import shutil
from dataclasses import replace

import pytest
import torch
from safetensors.torch import load_file

from rbctl.config.train import load_train_config
from rbctl.errors import UserError
from rbctl.tasks import builtin, shipped
from rbctl.tasks.shipped import SHIPPED_DIR, check_targets, index, shipped_warm_start
from scripts.fixpoint_probe import probe
from rbctl.train.training_data import task_spec, warm_start_spec
from tests.conftest import REPO

NAMES = shipped.names()
MAIN = load_train_config(REPO / "configs" / "fixpoint.yaml")


def _specs(name):
    rec = index()["warm_starts"][name]
    mod = builtin.task(rec["kind"])
    return mod.TaskSpec(**rec["task"]), mod.WarmStartSpec(**rec["warm_start"])


def test_at_least_three_warm_starts_are_shipped_and_the_main_config_uses_one():
    assert len(NAMES) >= 3, NAMES
    assert MAIN.data.builtin.warm_start in NAMES
    sizes = [(SHIPPED_DIR / n / "model.safetensors").stat().st_size for n in NAMES]
    assert all(s < 1_000_000 for s in sizes)  # ~0.5 MB each: the package stays small


@pytest.mark.parametrize("name", NAMES)
def test_each_shipped_warm_start_loads_with_its_hashes_and_meets_the_targets(name):
    spec, ws = _specs(name)
    folder = shipped_warm_start(name, spec, ws)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    props = probe(AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder), spec)
    assert check_targets(spec.kind, props) == [], props
    # the same protocol as when it was made: on this machine the same numbers up to sampling-kernel
    # differences of other CPUs (the targets above are what every machine must meet)
    recorded = index()["warm_starts"][name]["properties"]
    assert props["walk_share"] == pytest.approx(recorded["walk_share"], abs=0.03)


def test_the_targets_are_stated_for_every_shipped_kind():
    kinds = {index()["warm_starts"][n]["kind"] for n in NAMES}
    for kind in kinds:
        t = index()["targets"][kind]
        assert {"pass@1", "pass@8", "walk_share", "entropy"} <= set(t)
        assert all(lo < hi for lo, hi in t.values())


def test_a_changed_file_is_refused_naming_it(tmp_path, monkeypatch):
    name = NAMES[0]
    spec, ws = _specs(name)
    copy = tmp_path / "warm_starts"
    shutil.copytree(SHIPPED_DIR, copy)
    monkeypatch.setattr(shipped, "SHIPPED_DIR", copy)
    raw = bytearray((copy / name / "model.safetensors").read_bytes())
    raw[-1] ^= 1  # one bit of one weight
    (copy / name / "model.safetensors").write_bytes(bytes(raw))
    with pytest.raises(UserError) as e:
        shipped_warm_start(name, spec, ws)
    assert "model.safetensors is changed (SHA-256 mismatch)" in str(e.value) and "\n" not in str(e.value)


def test_a_config_whose_task_differs_from_the_warm_starts_is_refused_with_the_key():
    name = NAMES[0]
    spec, ws = _specs(name)
    with pytest.raises(UserError) as e:
        shipped_warm_start(name, replace(spec, depth1_frac=0.6), ws)
    assert f"task setting depth1_frac={spec.depth1_frac}" in str(e.value) and "0.6" in str(e.value)
    with pytest.raises(UserError) as e:
        shipped_warm_start("fixpoint-nope", spec, ws)
    assert "no shipped warm start 'fixpoint-nope'" in str(e.value) and name in str(e.value)


def test_the_main_config_resolves_to_the_shipped_files_and_a_run_starts_from_them(tmp_path, rbctl_cache):
    from rbctl.train.trainer import Trainer

    cfg = load_train_config(REPO / "configs" / "fixpoint.yaml", ["steps=1", "eval.every=0"])
    name = cfg.data.builtin.warm_start
    before = sorted(rbctl_cache.rglob("*"))  # the cache is shared by the pytest session's tests
    folder = builtin.warm_started(task_spec(cfg), warm_start_spec(cfg), shipped=name)
    assert folder == SHIPPED_DIR / name
    tr = Trainer(cfg, tmp_path / "run", log=lambda *a: None)
    want = load_file(str(folder / "model.safetensors"))
    got = tr.model.state_dict()
    assert all(torch.equal(got[k], v) for k, v in want.items())
    assert sorted(rbctl_cache.rglob("*")) == before  # nothing was trained or cached


def test_a_warm_start_built_on_a_nonzero_rank_is_complete_and_an_incomplete_folder_is_rebuilt(tmp_path, monkeypatch):
    """Under DDP/FSDP any rank may take the build lock; transformers 5 writes weights only on rank 0
    once torch.distributed is initialised, which left a rank-1 build with a tokenizer and no model."""
    import transformers.distributed.mixin as mixin
    from transformers import AutoModelForCausalLM

    from rbctl.tasks import tiny

    monkeypatch.setenv("RBCTL_CACHE", str(tmp_path))
    monkeypatch.setattr(mixin, "_is_torch_distributed_initialized", lambda: True)
    monkeypatch.setattr(mixin, "_get_torch_distributed_rank", lambda: 1)

    def train():
        torch.manual_seed(0)
        cfg = tiny.model_config(vocab_size=8, hidden_size=16, layers=1, heads=2, kv_heads=1, intermediate_size=32,
                                max_positions=16)
        return tiny.build_model(cfg), tiny.build_tokenizer("abcde")

    spec = replace(task_spec(load_train_config(None, [])), seed=123)
    ws = warm_start_spec(load_train_config(None, []))
    path = tiny.warm_start_path("links", spec, ws)
    path.mkdir(parents=True)
    (path / "tokenizer.json").write_text("{}")  # what the bug left behind: no config.json, no weights
    got = tiny.warm_started("links", spec, ws, train, log=lambda *a: None)
    assert got == path and (path / "config.json").is_file() and (path / "model.safetensors").is_file()
    model = AutoModelForCausalLM.from_pretrained(path)
    want, _ = train()
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), want.state_dict().values()))
