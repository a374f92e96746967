"""A dry run makes every check the start makes before it writes anything, with the start's own
function (`rbctl.train.preflight.check_start`, `rbctl.sweep.ablate.check_sweep_start`): on each case
below `--dry-run` and the real start agree, word for word, and the refused start leaves nothing
behind (no directory, or the existing one unchanged). Offline: HF_HUB_OFFLINE=1, no data dir."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rbctl.cli import run
from tests.conftest import TINY_TRAIN

REPO = Path(__file__).resolve().parents[2]
FIXPOINT = str(REPO / "configs" / "fixpoint.yaml")
QUICK = str(REPO / "configs" / "ablate_quickstart.yaml")


@pytest.fixture(autouse=True)
def _offline(tmp_path, monkeypatch, rbctl_cache):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RBCTL_DATA_DIR", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf_datasets"))  # nothing cached: no data anywhere
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))


def _snapshot(root: Path) -> dict[str, bytes]:
    """Every file under `root` and its bytes: what a refused start must leave as it was."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _both(capsys, argv: list[str]) -> tuple[tuple[int, str], tuple[int, str]]:
    """(exit code, stderr) of `argv --dry-run`, then of `argv` itself."""
    capsys.readouterr()
    dry = run([*argv, "--dry-run"]), capsys.readouterr().err.strip()
    real = run(argv), capsys.readouterr().err.strip()
    return dry, real


def _agree(capsys, argv: list[str], expected: str, root: Path) -> None:
    before = _snapshot(root)
    (rc_dry, err_dry), (rc_real, err_real) = _both(capsys, argv)
    assert (rc_dry, rc_real) == (2, 2), (err_dry, err_real)
    assert len(err_real.splitlines()) == 1 and err_real.startswith("error: ") and expected in err_real, err_real
    assert err_dry == err_real  # one check, one message
    assert _snapshot(root) == before  # the refused start wrote nothing


@pytest.mark.parametrize("command", ["train", "ablate"])
def test_no_data_for_a_benchmark_is_refused_by_both_and_leaves_no_directory(command, tmp_path, capsys):
    base = [FIXPOINT] if command == "train" else [QUICK, "--arms", "grpo", "--seeds", "0"]
    out = tmp_path / "runs" / "x"
    _agree(capsys, [command, *base, "-o", str(out), "--set", "eval.benchmarks=[amc23]"],
           "eval.benchmarks: no data for benchmark 'amc23' (no data dir given; load_dataset failed", tmp_path)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("command", ["train", "ablate"])
def test_an_unwritable_output_is_refused_by_both_with_a_permission_message(command, tmp_path, capsys):
    base = [FIXPOINT] if command == "train" else [QUICK, "--arms", "grpo", "--seeds", "0"]
    _agree(capsys, [command, *base, "-o", "/proc/rbctl_run"], "-o /proc/rbctl_run: no permission to write in /proc",
           tmp_path)


def test_a_sweep_directory_of_another_sweep_is_refused_by_both_naming_the_key(tmp_path, capsys):
    from rbctl.store.write import write_sweep_file
    from rbctl.sweep.ablate import load_sweep, resolved_sweep

    out = tmp_path / "sweep"
    out.mkdir()
    sweep, configs = load_sweep(Path(QUICK), arms=["grpo"], seeds=[0], overrides=["steps=100"])
    write_sweep_file(out, resolved_sweep(sweep, configs))  # what a first `rbctl ablate ... --set steps=100` records
    _agree(capsys, ["ablate", QUICK, "--arms", "grpo", "--seeds", "0", "-o", str(out), "--set", "steps=120"],
           f"sweep directory {out} holds a different sweep: arms.grpo.steps 100 ≠ 120; use another -o or --force",
           tmp_path)
    # the same sweep is taken: the dry run passes, and so do the start's checks (it is not started here)
    capsys.readouterr()
    assert run(["ablate", QUICK, "--arms", "grpo", "--seeds", "0", "-o", str(out), "--set", "steps=100", "--dry-run"]) == 0
    assert "can run it" in capsys.readouterr().out


@pytest.fixture
def finished_run(tmp_path, tiny_config) -> tuple[Path, Path]:
    """A finished 2-step run and the config file it was made from."""
    from rbctl.train.loop import train

    cfg_file = tmp_path / "tiny.yaml"
    cfg_file.write_text(yaml.safe_dump({**TINY_TRAIN, "steps": 2}))
    rd = tmp_path / "runs" / "first"
    train(tiny_config(steps=2), rd, progress=False, log=lambda *a: None)
    return cfg_file, rd


def test_a_run_directory_of_another_config_or_steps_is_refused_by_both(finished_run, tmp_path, capsys):
    cfg, rd = finished_run
    _agree(capsys, ["train", str(cfg), "-o", str(rd), "-q", "--set", "algo.budget=1.0"],
           f"run directory {rd} was made with a different config (algo.budget); use another -o or --force", tmp_path)
    # a finished 2-step run is not extended by `--set steps=3` alone: refused, naming steps
    _agree(capsys, ["train", str(cfg), "-o", str(rd), "-q", "--set", "steps=3"],
           f"run directory {rd} was made with steps=2; steps=3 would train it past its 2 steps: pass --extend", tmp_path)
    # what the dry run passes, the start passes: the same config resumes (here: is already complete)
    (rc_dry, err_dry), (rc_real, err_real) = _both(capsys, ["train", str(cfg), "-o", str(rd), "-q"])
    assert (rc_dry, rc_real) == (0, 0) and "error" not in err_dry + err_real
