"""The store's run and sweep directories: the `ARM/seed_S` naming, the one reader of state.json, and
the format version of the headers (provenance.json, run.json, sweep.yaml)."""

from __future__ import annotations

import json

import pytest
import yaml

from rbctl.config.train import TrainConfig
from rbctl.errors import UserError
from rbctl.store import read
from rbctl.store.rundir import (CONFIG, FORMAT_VERSION, METRICS, PROVENANCE, RUN_META, SWEEP_FILE, SWEEP_STATE, RunKey,
                                kept_config_path, parse_run_key, run_key, sweep_run_dir, sweep_runs)
from rbctl.store.write import write_provenance, write_run_meta, write_sweep_file, write_sweep_state
from tests.conftest import TINY_TRAIN


def test_run_keys_are_arm_seed_or_arm_warm_start_seed_and_parse_back():
    assert run_key("grpo", 3) == "grpo/seed_3"
    assert run_key("grpo", 3, "fixpoint-ws1") == "grpo/fixpoint-ws1/seed_3"
    assert parse_run_key("grpo/seed_3") == RunKey("grpo", 3)
    assert parse_run_key("grpo/fixpoint-ws1/seed_3") == RunKey("grpo", 3, "fixpoint-ws1")
    for other in ("grpo", "grpo/seed_x", "grpo/ws/seed_1/eval", "/seed_1", "grpo/run_1"):
        assert parse_run_key(other) is None, other
    assert kept_config_path("R", 40).as_posix() == "R/config.step_000040.yaml"


def test_a_sweeps_runs_are_found_in_both_layouts_and_nothing_else(tmp_path):
    for key in ("b/seed_1", "a/seed_0", "a/ws0/seed_2"):
        sweep_run_dir(tmp_path, key).mkdir(parents=True)
    (tmp_path / "runs" / "a" / "notes").mkdir()
    (tmp_path / "runs" / "a" / "ws0" / "seed_2" / "eval").mkdir()
    assert [k for k, _ in sweep_runs(tmp_path)] == ["a/seed_0", "a/ws0/seed_2", "b/seed_1"]
    assert dict(sweep_runs(tmp_path))["a/ws0/seed_2"] == tmp_path / "runs" / "a" / "ws0" / "seed_2"
    (sweep_run_dir(tmp_path, "b/seed_1") / METRICS).write_text('{"step": 1}\n')
    assert [k for k, _ in read.sweep_run_dirs(tmp_path)] == ["b/seed_1"]  # only runs with metrics


def test_state_json_absent_is_a_fresh_sweep_and_a_torn_one_a_one_line_error(tmp_path):
    assert read.read_sweep_state(tmp_path) == {}
    state = {"runs": {"a/seed_0": {"status": "done", "error": None}}}
    write_sweep_state(tmp_path, state)
    assert read.read_sweep_state(tmp_path) == state["runs"]
    path = tmp_path / SWEEP_STATE
    for torn in ('{"runs": {"a/seed_0": {"sta', "", '["a/seed_0"]', '{"runs": {"a/seed_0": "done"}}'):
        path.write_text(torn)
        with pytest.raises(UserError) as e:
            read.read_sweep_state(tmp_path)
        assert str(e.value).startswith(f"{path}: ") and "\n" not in str(e.value), torn


def test_headers_record_format_version_1_and_files_without_one_read_as_version_1(tmp_path):
    write_provenance(tmp_path, {"rbctl": "0.1.0", "seed": 0})
    write_run_meta(tmp_path, {"arm": "grpo", "seed": 0})
    assert list(json.loads((tmp_path / PROVENANCE).read_text())) == ["format_version", "rbctl", "seed"]
    assert json.loads((tmp_path / RUN_META).read_text()) == {"format_version": FORMAT_VERSION, "arm": "grpo", "seed": 0}
    assert FORMAT_VERSION == 1
    run = read.read_run(tmp_path)
    assert run["meta"]["arm"] == "grpo" and run["provenance"]["seed"] == 0
    # a run directory written before the field was recorded
    (tmp_path / PROVENANCE).write_text(json.dumps({"rbctl": "0.1.0", "seed": 0}))
    (tmp_path / RUN_META).write_text(json.dumps({"arm": "grpo", "seed": 0}))
    assert read.read_run(tmp_path)["meta"] == {"arm": "grpo", "seed": 0}
    write_sweep_file(tmp_path, {"sweep": {"name": "s"}, "configs": {}})
    assert yaml.safe_load((tmp_path / SWEEP_FILE).read_text())["format_version"] == 1
    assert read.read_sweep_file(tmp_path) == {"name": "s"}
    (tmp_path / SWEEP_FILE).write_text(yaml.safe_dump({"sweep": {"name": "old"}, "configs": {}}))
    assert read.read_sweep_file(tmp_path) == {"name": "old"}


@pytest.mark.parametrize("name", [PROVENANCE, RUN_META, SWEEP_FILE])
@pytest.mark.parametrize("version", [2, 0, "1", True])
def test_a_header_of_another_format_version_is_refused_in_one_line_naming_file_and_version(tmp_path, name, version):
    data = {"format_version": version, "seed": 0}
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data) if name == SWEEP_FILE else json.dumps(data))
    with pytest.raises(UserError) as e:
        read.read_sweep_file(tmp_path) if name == SWEEP_FILE else read.read_run(tmp_path)
    assert str(e.value) == f"{path}: format_version {version!r} is not one this rbctl reads (it reads 1)"


def test_resuming_a_run_directory_of_another_format_version_is_refused(tmp_path):
    from rbctl.train.run_setup import check_run_dir

    cfg = TrainConfig.model_validate(TINY_TRAIN)
    (tmp_path / CONFIG).write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    (tmp_path / METRICS).write_text('{"step": 1}\n')
    write_provenance(tmp_path, {"seed": 0})
    assert check_run_dir(cfg, tmp_path, force=False) == cfg
    (tmp_path / PROVENANCE).write_text(json.dumps({"format_version": 2, "seed": 0}))
    with pytest.raises(UserError, match=rf"^{tmp_path / PROVENANCE}: format_version 2 is not one"):
        check_run_dir(cfg, tmp_path, force=False)
