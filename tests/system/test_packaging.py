"""The wheel: built from this checkout with hatchling, it holds the instrument only (no study, no
document generator, published table, lab pilot or benchmark script: those stay in the repository's
studies/ and scripts/); installed into an empty folder, it runs from anywhere and finds its presets,
the main job's among them, inside itself (configs/ ships as rbctl/configs)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# what the study and the benchmarks are, by file: none of it may be in the wheel
NOT_SHIPPED = re.compile(r"^(studies|scripts|tests)/|/documents/|published\.py$|maxrl_maze|/configs/lab/|/configs/study_claims"
                         r"|/configs/ablate_(claims_|fixpoint_long|fixpoint_study|maze\.yaml|maze_(claims|groups|horizon|long|setting))"
                         r"|maze_results|maze_setting|real_model|claims_fixpoint|fixpoint_long|lab_fixpoint"
                         r"|/bench_|kill_resume|fixpoint_probe|fixpoint_population|build_warm_starts|report_screens|vllm_cpu_demo"
                         r"|make_arithmetic|config_doc|metrics_doc")


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.mark.slow
def test_the_wheel_runs_from_anywhere_with_its_packaged_presets(tmp_path):
    pytest.importorskip("hatchling", reason="building the wheel needs hatchling (pip install hatchling)")
    wheels, site, elsewhere = tmp_path / "wheels", tmp_path / "site", tmp_path / "elsewhere"
    elsewhere.mkdir()
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels), str(ROOT)])
    (wheel,) = wheels.glob("rbctl-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {"rbctl/cli/__init__.py", "rbctl/configs/ablate_fixpoint.yaml", "rbctl/configs/quickstart.yaml",
            "rbctl/configs/study_quickstart.yaml", "rbctl/report/study/checks.py"} <= set(names)
    shipped_study = sorted(n for n in names if NOT_SHIPPED.search(n))
    assert not shipped_study, f"the wheel holds study or benchmark files: {shipped_study}"
    assert not {n for n in names if n.startswith("rbctl/tools/")}  # benchmarks, probes and the GPU check: scripts/
    _run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)])

    env = {**os.environ, "PYTHONPATH": str(site), "RBCTL_CACHE": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}
    where = _run([sys.executable, "-c", "import rbctl, rbctl.config.presets as p; "
                  "print(rbctl.__file__); print(p.preset('quickstart.yaml'))"], cwd=elsewhere, env=env)
    package, preset = (Path(line) for line in where.stdout.split())
    assert package.is_relative_to(site), f"imported {package}, not the installed wheel"
    assert preset.is_relative_to(site) and preset.is_file(), preset

    help_ = _run([sys.executable, "-m", "rbctl", "ablate", "--help"], cwd=elsewhere, env=env)
    assert "Usage" in help_.stdout and "--launcher" in help_.stdout
    plan = _run([sys.executable, "-m", "rbctl", "train", str(preset), "-o", str(tmp_path / "run"), "--dry-run"],
                cwd=elsewhere, env=env)
    assert "P = 16 prompts × G = 8 rollouts" in plan.stdout
    assert not (tmp_path / "run").exists()
    # the main job, `rbctl ablate` with no argument, is a shipped preset: planned from the wheel alone
    main_job = _run([sys.executable, "-m", "rbctl", "ablate", "-o", str(tmp_path / "main"), "--dry-run"], cwd=elsewhere, env=env)
    assert "3 arms × 24 seeds = 72 runs" in main_job.stdout, main_job.stdout
    assert not (tmp_path / "main").exists()


# What a shipped config's path imports beyond the main dependencies, by config key. vLLM
# (rollout.engine: vllm) is left out on purpose: a GPU-only extra ('rbctl[vllm]').
NEEDS = {"model.lora": "peft"}


def test_the_main_install_has_what_every_shipped_configs_path_imports():
    import re

    tomllib = pytest.importorskip("tomllib")
    import yaml

    from rbctl.config.train import load_train_config
    from rbctl.sweep.ablate import load_sweep

    deps = {re.split(r"[<>=!~\[ ;]", d, maxsplit=1)[0].lower()
            for d in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]}
    used = set()
    for path in sorted((ROOT / "configs").rglob("*.yaml")):
        data = yaml.safe_load(path.read_text()) or {}
        if "testbeds" in data or "runs_from" in data:  # a study file or a runs manifest (rbctl report): no config to resolve
            continue
        is_sweep = "arms" in data
        configs = load_sweep(path)[1].values() if is_sweep else [load_train_config(path)]
        for cfg in configs:
            dumped = cfg.model_dump()
            for key, package in NEEDS.items():
                section, name = key.split(".")
                if dumped[section][name] is not None:
                    used.add((path.name, package))
    assert ("smollm2_gsm8k.yaml", "peft") in used  # the real-model config trains LoRA adapters
    missing = sorted((name, package) for name, package in used if package not in deps)
    assert not missing, f"shipped configs import packages the main install lacks: {missing}"
