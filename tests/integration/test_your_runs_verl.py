"""`rbctl report MANIFEST` over runs logged by verl's own logger classes: `Tracking` with its `file`
and `tensorboard` backends (verl/utils/tracking.py, loaded from verl's real wheel), written as
verl's trainer writes them (training metrics every step, validation under val-core/<data source>/
acc/mean@<n>). Where verl and orjson (its file logger's JSON writer) cannot be had offline, the
tests skip and say why: the format is never imitated by hand here.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy import stats

from tests.integration.test_integration_verl import _verl_wheel

DATA_SOURCE = "openai/gsm8k"  # verl's gsm8k preprocessing names its data source so (a slash in it)
N = 4  # validation samples per prompt: val-core holds mean@4
ARMS = {"grpo": 0.0, "budget": 0.05}  # arm -> how far its held-out score rises above grpo's
SEEDS = (0, 1, 2)
STEPS, VAL_EVERY = 6, 3


def _wheel(cache_dir: Path, name: str, version: str | None) -> tuple[Path | None, str]:
    """orjson's binary wheel for this Python, downloaded once into pytest's cache."""
    import subprocess

    found = sorted(cache_dir.glob(f"{name}-*.whl"))
    if found:
        return found[0], ""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", str(cache_dir),
           name if version is None else f"{name}=={version}"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, str(e)
    found = sorted(cache_dir.glob(f"{name}-*.whl"))
    return (found[0], "") if proc.returncode == 0 and found else (None, (proc.stderr.strip().splitlines() or ["?"])[-1])


@pytest.fixture(scope="module")
def tracking(request, tmp_path_factory):
    """verl's verl/utils/tracking.py module: installed verl's, else the file from verl's wheel (it
    imports only the standard library, orjson and packaging at the top)."""
    try:
        return importlib.import_module("verl.utils.tracking")
    except ImportError:
        pass
    cache = getattr(request.config, "cache", None)
    where = (lambda n: Path(cache.mkdir(n))) if cache else tmp_path_factory.mktemp
    wheel, why = _verl_wheel(where("verl_wheel"))
    if wheel is None:
        pytest.skip(f"verl is not installed and its wheel could not be downloaded ({why}); set RBCTL_VERL_WHEEL")
    root = tmp_path_factory.mktemp("verl_tracking")
    try:
        importlib.import_module("orjson")
    except ImportError:
        orjson, why = _wheel(where("orjson_wheel"), "orjson", None)
        if orjson is None:
            pytest.skip(f"orjson (verl's file logger writes with it) is not installed and could not be downloaded ({why})")
        with zipfile.ZipFile(orjson) as zf:
            zf.extractall(root / "site")
        sys.path.insert(0, str(root / "site"))
    with zipfile.ZipFile(wheel) as zf:
        (root / "tracking.py").write_bytes(zf.read("verl/utils/tracking.py"))
    spec = importlib.util.spec_from_file_location("verl_utils_tracking", root / "tracking.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def heldout(arm: str, seed: int, step: int) -> float:
    """The run's val-core/openai/gsm8k/acc/mean@4 at ``step``: a fraction that rises with the step."""
    return round(0.2 + 0.05 * step / VAL_EVERY + ARMS[arm] + 0.01 * seed * (arm == "budget"), 4)


def entropy(arm: str, seed: int, step: int) -> float:
    return 1.0 / (step + 1) + 0.1 * seed


@pytest.fixture(scope="module")
def verl_runs(tracking, tmp_path_factory) -> Path:
    """2 arms × 3 seeds logged through verl's `Tracking(…, default_backend=["file", "tensorboard"])`: its
    validation before training at step 0, then each step's metrics and every VAL_EVERY steps the
    validation, as verl's ray_trainer calls `logger.log(data=metrics, step=global_steps)`."""
    import os

    root = tmp_path_factory.mktemp("verl_runs")
    for arm in ARMS:
        for seed in SEEDS:
            run = root / arm / f"seed_{seed}"
            os.environ["VERL_FILE_LOGGER_PATH"] = str(run / "metrics.jsonl")
            os.environ["TENSORBOARD_DIR"] = str(run / "tensorboard")
            run.mkdir(parents=True)
            try:
                logger = tracking.Tracking(project_name="rbctl", experiment_name=f"{arm}_{seed}",
                                           default_backend=["file", "tensorboard"])
                val = lambda s: {f"val-core/{DATA_SOURCE}/acc/mean@{N}": heldout(arm, seed, s),  # noqa: E731
                                 f"val-aux/{DATA_SOURCE}/acc/mean@1": heldout(arm, seed, s) - 0.1}
                logger.log(data=val(0), step=0)
                for step in range(1, STEPS + 1):
                    metrics = {"actor/entropy": entropy(arm, seed, step), "critic/score/mean": 0.1 * step,
                               "response_length/mean": 100.0 + step, "training/global_step": step}
                    if step % VAL_EVERY == 0:
                        metrics.update(val(step))
                    logger.log(data=metrics, step=step)
                logger.finish()
            finally:
                del os.environ["VERL_FILE_LOGGER_PATH"], os.environ["TENSORBOARD_DIR"]
    return root


def manifest(root: Path, runs_from: str, path: str) -> Path:
    data = {"runs_from": runs_from, "names": "verl", "root": str(root), "path": path,
            "arms": {"grpo": {}, "budget": {"variant": "budget"}}, "seeds": list(SEEDS),
            "comparisons": {"principal": [["budget", "grpo"]], "mde": 5, "planning_sd": 2}}
    out = root / f"{runs_from}.yaml"
    out.write_text(yaml.safe_dump(data))
    return out


def test_verls_file_logger_and_tensorboard_give_one_report(verl_runs) -> None:
    from rbctl.report.data import report_data

    data = report_data([manifest(verl_runs, "verl", "{arm}/seed_{seed}/metrics.jsonl")], n_boot=100)
    sw = data.sweep
    assert sw.benchmarks == [DATA_SOURCE]  # the data source read off val-core/<data source>/acc/mean@4
    b = [heldout("budget", s, STEPS) for s in SEEDS]
    g = [heldout("grpo", s, STEPS) for s in SEEDS]
    row = data.verdict.rows.iloc[0]
    # Δ per seed = 0.05 + 0.01·seed: mean 0.06; the paired t-test on the final validation
    assert row.delta == pytest.approx(0.06)
    assert row.p_holm == pytest.approx(stats.ttest_rel(b, g).pvalue)
    # the held-out trajectory has verl's step-0 validation (the warm start) and steps 3, 6
    run = next(r for r in sw.runs if r.arm == "grpo" and r.seed == 1)
    assert [(e["step"], e["avg@n"]) for e in run.evals] == [(s, heldout("grpo", 1, s)) for s in (0, 3, 6)]
    assert [m["entropy"] for m in run.metrics if "entropy" in m] == [entropy("grpo", 1, s) for s in range(1, 7)]
    assert run.metrics[-1]["reward/mean"] == pytest.approx(0.6) and run.metrics[-1]["response/len_mean"] == 106.0
    # plateau: validations at steps 0, 3, 6 leave one in the last quarter (steps 4.5-6), so "stalled" is not measured
    # (a stall needs two evaluations there; the step-3 one is half-way, not at three quarters)
    assert data.plateau.verdict.stalled.value is None and not data.plateau.verdict.held
    # κ and κ_eff are in verl's preset (rbctl/kappa) but these runs log neither: said once each
    assert list(sw.remarks[:3]) == ["κ: not logged by these runs (no `rbctl/kappa` in their records)",
                                    "κ_eff: not logged by these runs (no `rbctl/kappa_eff` in their records)",
                                    "advantage gap: not logged by these runs (no `rbctl/adv_gap` in their records)"]

    tb = report_data([manifest(verl_runs, "tensorboard", "{arm}/seed_{seed}/tensorboard")], n_boot=100)
    assert tb.sweep.benchmarks == [DATA_SOURCE]
    assert tb.verdict.rows.iloc[0].delta == pytest.approx(row.delta)  # float32 in the event files
    f32 = lambda xs: np.float32(xs).astype(float)  # noqa: E731  (TensorBoard stores float32)
    assert tb.verdict.rows.iloc[0].p_holm == pytest.approx(stats.ttest_rel(f32(b), f32(g)).pvalue)
    assert tb.plateau.verdict.stalled.value is None
