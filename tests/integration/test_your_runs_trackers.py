"""`rbctl report` over the same runs logged by each tracker's own package (docs/your_runs.md): W&B run
folders written by the wandb SDK offline, W&B history exports in the API's shape, an MLflow file
store and a real local `mlflow server` (logged with mlflow's client), TensorBoard event files and
verl's file logger. Every format gives the same runs, the same calls, and the same words for a
value logged as undefined (null or NaN)."""

from __future__ import annotations

import math
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import scipy.stats as sps
import yaml

from rbctl.report.analyses.comparisons import HIGHER
from rbctl.report.data import report_data
from tests.integration.test_your_runs_verl import tracking  # noqa: F401  (verl's logger module, or a skip saying why)

# arm -> final held-out accuracy per seed 0, 1, 2: Δ = .25, .25, .3125 (paired t over 3 seeds)
FINAL = {"grpo": (0.25, 0.3125, 0.375), "grpo_budget": (0.5, 0.5625, 0.6875)}
SEEDS = (0, 1, 2)
STEPS = 4
P_VALUE = float(sps.ttest_1samp([0.25, 0.25, 0.3125], 0.0).pvalue)


def history(arm: str, seed: int) -> dict[int, dict[str, float | None]]:
    """What one run logs at each step: training metrics every step, the held-out accuracy every 2
    steps, and κ_eff undefined (None) at step 3 (no group of mixed rewards there)."""
    out = {}
    for step in range(1, STEPS + 1):
        row = {"train/entropy": 0.6 if step == 1 else 0.1, "train/reward": 0.1 * step,
               "rbctl/kappa_eff": None if step == 3 else 0.5 + 0.1 * seed}
        if step % 2 == 0:
            row["eval/acc"] = FINAL[arm][seed] - (0.01 if step == 2 else 0.0)
        out[step] = row
    return out


def run_name(arm: str, seed: int) -> str:
    return f"{arm}-seed{seed}"


def units():
    return [(arm, seed) for arm in FINAL for seed in SEEDS]


def manifest(root: Path | str, runs_from: str, name: str, where: Path | None = None, **extra) -> Path:
    """A manifest of the six runs at ``root`` (a folder or a tracking URI), written into ``where``
    (default: beside ``root``)."""
    data = {"runs_from": runs_from, "name": name, "root": str(root), "path": "{arm}-seed{seed}",
            "arms": {"grpo": {}, "grpo_budget": {"variant": "budget"}}, "seeds": list(SEEDS),
            "roles": {"heldout": "eval/acc", "benchmark": "math", "entropy": "train/entropy",
                      "reward": "train/reward", "kappa_eff": "rbctl/kappa_eff"},
            "comparisons": {"principal": [["grpo_budget", "grpo"]], "mde": 10.0, "planning_sd": 3.5}, **extra}
    path = (where or Path(root).parent) / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def check_report(path: Path) -> None:
    """The calls and the data every format must give for these runs."""
    data = report_data([path], n_boot=50)
    row = data.verdict.rows.iloc[0]
    assert (row.arm, row.ref, int(row.seeds)) == ("grpo_budget", "grpo", 3)
    assert row.delta == pytest.approx((0.25 + 0.25 + 0.3125) / 3, abs=1e-6)
    assert row.p_holm == pytest.approx(P_VALUE, rel=1e-4) and row.call == HIGHER
    run = next(r for r in data.sweep.runs if r.arm == "grpo" and r.seed == 1)
    assert [(e["step"], e["avg@n"]) for e in run.evals] == [(2, pytest.approx(0.3025)), (4, pytest.approx(0.3125))]
    assert [m["reward/mean"] for m in run.metrics] == pytest.approx([0.1, 0.2, 0.3, 0.4])
    ke = [m.get("kappa_eff") for m in run.metrics]
    assert ke[:2] == pytest.approx([0.6, 0.6]) and math.isnan(ke[2]) and ke[3] == pytest.approx(0.6)
    assert "κ_eff: undefined (null or NaN) at 6 of the 24 steps it was logged; those steps are left out of its " \
           "trajectory" in data.sweep.remarks
    assert not any("κ_eff: not logged" in r for r in data.sweep.remarks)


# --- MLflow -------------------------------------------------------------------------------------

def log_mlflow(uri: str) -> None:
    """Each run logged with mlflow's client, one batch a run (an undefined value as NaN: MLflow takes no null)."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric

    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("budget")
    for arm, seed in units():
        run = client.create_run(exp, run_name=run_name(arm, seed))
        now = int(time.time() * 1000)
        metrics = [Metric(key, math.nan if v is None else v, now + step, step)
                   for step, row in history(arm, seed).items() for key, v in row.items()]
        client.log_batch(run.info.run_id, metrics=metrics)
        client.set_terminated(run.info.run_id)


def test_an_mlflow_file_store_written_by_mlflow_is_reported(tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # mlflow 3 writes a file store only when asked
    store = tmp_path / "mlruns"
    log_mlflow(store.as_uri())
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE")  # rbctl reads it without the user setting it
    check_report(manifest(store, "mlflow", "mlflow_files", experiment="budget"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # starts a real mlflow server (~10 s on 2 shared cores)
def test_a_local_mlflow_server_is_read_with_mlflows_client(tmp_path: Path) -> None:
    pytest.importorskip("mlflow")
    port = _free_port()
    cmd = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
           "--backend-store-uri", f"sqlite:///{tmp_path / 'mlflow.db'}", "--default-artifact-root", str(tmp_path / "art")]
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                assert server.poll() is None and time.time() < deadline, "mlflow server did not start"
                time.sleep(0.5)
        log_mlflow(uri)
        check_report(manifest(uri, "mlflow", "mlflow_server", where=tmp_path))
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)


# --- TensorBoard, W&B exports, verl ----------------------------------------------------------------

def test_tensorboard_event_files_and_wandb_history_exports_give_the_same_calls(tmp_path: Path) -> None:
    from torch.utils.tensorboard import SummaryWriter

    tb, exports = tmp_path / "tb", tmp_path / "exports"
    exports.mkdir()
    for arm, seed in units():
        writer = SummaryWriter(str(tb / run_name(arm, seed)))
        rows = []
        for step, row in history(arm, seed).items():
            for key, v in row.items():
                writer.add_scalar(key, math.nan if v is None else v, step)
            rows.append({"_step": step, "_timestamp": 1.8e9 + step, **row})
        writer.close()
        # the API's run.history(): one row per step, NaN where a key was not logged (to_csv: an empty cell)
        frame = pd.DataFrame(rows)
        if seed == 1:
            frame.to_json(exports / f"{run_name(arm, seed)}.json", orient="records")
        else:
            frame.to_csv(exports / f"{run_name(arm, seed)}.csv")
    check_report(manifest(tb, "tensorboard", "tb"))
    data = report_data([manifest(exports, "wandb", "exports", path="{arm}-seed{seed}.csv",
                                 runs=[{"arm": a, "seed": s, "path": f"{run_name(a, s)}.{'json' if s == 1 else 'csv'}"}
                                       for a, s in units()])], n_boot=50)
    # an export cannot tell an undefined value from one not logged (both are empty): no κ_eff gaps there
    row = data.verdict.rows.iloc[0]
    assert row.delta == pytest.approx((0.25 + 0.25 + 0.3125) / 3) and row.p_holm == pytest.approx(P_VALUE)
    run = next(r for r in data.sweep.runs if r.arm == "grpo" and r.seed == 1)
    assert [(e["step"], e["avg@n"]) for e in run.evals] == [(2, pytest.approx(0.3025)), (4, 0.3125)]
    assert [m.get("kappa_eff") for m in run.metrics] == [0.6, 0.6, None, 0.6]


# --- W&B run folders ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def wandb_dir(tmp_path_factory) -> Path:
    """Six runs written by the wandb SDK offline (no login, no network): ``ROOT/wandb/offline-run-*``."""
    wandb = pytest.importorskip("wandb")
    root = tmp_path_factory.mktemp("wandb_runs")
    env = {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DIR": str(root)}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        for arm, seed in units():
            run = wandb.init(project="budget", name=run_name(arm, seed), dir=str(root), mode="offline",
                             config={"arm": arm, "seed": seed})
            for step, row in history(arm, seed).items():
                run.log(row, step=step)
            run.finish()
    finally:
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    return root / "wandb"


@pytest.mark.slow  # six wandb SDK runs (~2 s each on 2 shared cores)
def test_wandb_run_folders_written_by_the_sdk_are_read_by_its_reader(wandb_dir: Path) -> None:
    folders = sorted(wandb_dir.glob("offline-run-*"))
    assert len(folders) == 6
    check_report(manifest(wandb_dir, "wandb", "wandb_runs"))
    # a run named by its folder or its id reads the same records
    by_folder = manifest(wandb_dir, "wandb", "wandb_folders", path=None, runs=[
        {"arm": "grpo", "seed": 0, "path": folders[0].name}])
    from rbctl.report.sources import load_manifest

    (run,), issues = load_manifest(by_folder)
    assert [i.status for i in issues] == ["not named"] and len(issues[0].detail.split(", ")) == 5
    rid = folders[0].name.rsplit("-", 1)[1]
    (by_id,), _ = load_manifest(manifest(wandb_dir, "wandb", "wandb_id", path=None,
                                         runs=[{"arm": "grpo", "seed": 0, "path": rid}]))
    assert by_id.metrics == run.metrics and run.provenance["ended"] > 1.7e9


@pytest.mark.slow  # the six wandb SDK runs (shared with the test above) and two reports
def test_a_wandb_folder_alone_is_reported_and_its_manifest_round_trips(wandb_dir: Path, tmp_path: Path,
                                                                        monkeypatch, capsys) -> None:
    from rbctl.cli import run

    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    rc = run(["report", str(wandb_dir / sorted(p.name for p in wandb_dir.glob("offline-run-*"))[0])])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    assert "1 wandb run found" in printed and "--init-manifest" in printed
    rc = run(["report", str(wandb_dir.parent)])  # the folder above wandb/: every run, arms and seeds from the names
    printed = capsys.readouterr().out
    assert rc == 0, printed
    assert "arms and seeds guessed from their names: grpo: seeds 0, 1, 2; grpo_budget: seeds 0, 1, 2" in printed
    report = (tmp_path / "runs" / wandb_dir.parent.name / "report.md").read_text()
    assert "sweep file" not in report and "grpo_budget" in report

    assert run(["report", "--init-manifest", str(wandb_dir.parent), "-o", "m.yaml"]) == 0
    text = (tmp_path / "m.yaml").read_text()
    assert "runs_from: wandb" in text and "{arm: grpo_budget, seed: 2, path: grpo_budget-seed2}" in text
    assert "grpo_budget: {baseline: grpo, variant: budget}" in text  # the arm's name says what it is
    assert "principal comparisons" not in printed  # a folder's guesses call nothing
    assert "eval/acc" in text  # the names the runs logged, listed to map the roles
    edited = yaml.safe_load(text)
    edited["arms"]["grpo_budget"]["variant"] = "budget"
    edited["roles"].update(heldout="eval/acc", benchmark="math", entropy="train/entropy", reward="train/reward",
                           kappa_eff="rbctl/kappa_eff")
    edited["comparisons"] = {"principal": [["grpo_budget", "grpo"]], "mde": 10.0, "planning_sd": 3.5}
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(edited))
    check_report(tmp_path / "m.yaml")
    capsys.readouterr()
    assert run(["report", "m.yaml", "-o", "out"]) == 0
    assert "grpo_budget − grpo" in capsys.readouterr().out
    assert "sweep file" not in (tmp_path / "out" / "report.md").read_text()


def test_verls_file_logger_gives_the_same_calls(tracking, tmp_path: Path, monkeypatch) -> None:
    """verl's `Tracking` (its file backend, orjson writing a None as null) logging the same runs."""
    root = tmp_path / "verl"
    root.mkdir()
    for arm, seed in units():
        monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(root / f"{run_name(arm, seed)}.jsonl"))
        logger = tracking.Tracking(project_name="rbctl", experiment_name=run_name(arm, seed), default_backend=["file"])
        for step, row in history(arm, seed).items():
            logger.log(data=row, step=step)
        logger.finish()
    check_report(manifest(root, "verl", "verl", names="none", path="{arm}-seed{seed}.jsonl"))
