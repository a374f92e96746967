"""`rbctl eval RUN_DIR` computes as the run did (its seed, threads, device, Linear kernel, precision)
and does not recompute what the run already holds: a result of the same protocol for the step (the
evaluation training ran at its last step, or an earlier `rbctl eval`) is reused and said so;
`--force` evaluates again. A tiny random policy over the built-in tokenizer; no warm start trained."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from tests.integration.test_evaluate import _no_hub, _run_dir_with_checkpoint  # noqa: F401  (autouse fixture)

RUN_CONFIG = {"seed": 3, "threads": 1, "model": {"device": "cpu"}, "rollout": {"max_new_tokens": 5},
              "eval": {"every": 5, "benchmarks": ["builtin"], "n": 2, "temperature": 1.0, "limit": 4}}


@pytest.fixture(autouse=True)
def _keep_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def _eval(*argv: str):
    from typer.testing import CliRunner

    from rbctl.cli import app

    result = CliRunner().invoke(app, ["eval", *argv], env={"COLUMNS": "1000"})  # no wrapped paths
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


def test_a_run_is_evaluated_with_its_own_seed_threads_device_and_precision(tmp_path):
    from rbctl.eval.run import eval_config

    run_dir = _run_dir_with_checkpoint(tmp_path, RUN_CONFIG)
    cfg, note = eval_config(str(run_dir), {})
    # the run trained on the CPU in fp32 (precision auto): float32 weights, no autocast
    assert (cfg.seed, cfg.threads, cfg.device, cfg.cpu_linear, cfg.dtype, cfg.precision) == (3, 1, "cpu", "auto", "float32", "auto")
    assert "settings: the run's seed 3, threads 1, device cpu" in note
    # told otherwise: the option wins; a dtype asked for drops the run's autocast
    cfg, note = eval_config(str(run_dir), {"threads": 2, "dtype": "bfloat16"})
    assert (cfg.threads, cfg.dtype, cfg.precision, cfg.seed) == (2, "bfloat16", None, 3)
    assert "threads" not in note.split("settings:")[1] and "precision" not in note
    # a bare model keeps the published defaults: torch's threads, seed 0
    cfg, _ = eval_config("builtin", {})
    assert (cfg.seed, cfg.threads, cfg.precision) == (0, 0, None)


def test_the_run_precision_of_a_gpu_run_loads_master_weights_and_keeps_a_lora_base_as_trained(tmp_path):
    from rbctl.config.train import TrainConfig
    from rbctl.eval.run import run_settings

    mixed = TrainConfig.model_validate({"model": {"device": "cuda", "dtype": "bfloat16", "precision": "bf16-mixed"}})
    assert run_settings(mixed)["dtype"] == "float32" and run_settings(mixed)["precision"] == "bf16-mixed"
    pure = TrainConfig.model_validate({"model": {"dtype": "bfloat16", "precision": "bf16-pure"}})
    assert run_settings(pure)["dtype"] == "bfloat16"
    lora = TrainConfig.model_validate({"model": {"dtype": "bfloat16", "lora": {"r": 4}}})
    assert run_settings(lora)["dtype"] == "bfloat16"


def _protocol_folder(run_dir: Path, step: int, n: int) -> Path:
    """The folder `rbctl eval` kept its evaluation at n samples per problem in (one per protocol)."""
    found = [p for p in (run_dir / "eval" / f"step_{step:06d}").glob("protocol_*")
             if json.loads((p / "protocol.json").read_text())["protocol"]["n"] == n]
    assert len(found) == 1, found
    return found[0]


def test_the_result_training_left_is_reused_and_force_evaluates_again(tmp_path, monkeypatch):
    import rbctl.rollout.models as models

    run_dir = _run_dir_with_checkpoint(tmp_path, RUN_CONFIG)
    out = _eval(str(run_dir))  # nothing yet: evaluated, with the run's threads and seed
    own = _protocol_folder(run_dir, 7, 2)
    final = own / "builtin"
    first = json.loads((final / "summary.json").read_text())
    assert (first["protocol"]["threads"], first["protocol"]["seed"], first["n"], first["num_problems"]) == (1, 3, 2, 4)
    assert "reused" not in out and "the run's own evaluation protocol" in out
    record = json.loads((own / "protocol.json").read_text())
    assert record["run_protocol"] and record["run_benchmarks"] == ["builtin"]
    assert record["text"] == "n=2, temperature 1.0, top-p 1.0, at most 5 new tokens, seed 3, engine hf, first 4 problems"
    # what training leaves: its evaluation at the last step, under eval/periodic/
    periodic = run_dir / "eval" / "periodic" / "step_000007" / "builtin"
    periodic.parent.mkdir(parents=True)
    shutil.move(str(final), str(periodic))

    def no_load(*a, **k):
        raise AssertionError("the model was loaded although the run holds the result")

    monkeypatch.setattr(models, "load_first_intact", no_load)
    out = _eval(str(run_dir))
    assert (f"builtin: the run already holds this protocol's result for step 7 ({periodic}): reused; "
            "--force evaluates again") in out
    assert f"results in {periodic.parent}" in out and f"{100 * first['metrics']['avg@n']['value']:.1f}" in out
    assert not final.exists()  # nothing written
    monkeypatch.undo()

    # another protocol (n) is not the run's result: evaluated, into its own folder, a side evaluation
    out = _eval(str(run_dir), "--n", "1")
    side = _protocol_folder(run_dir, 7, 1)
    assert "reused" not in out and json.loads((side / "builtin" / "summary.json").read_text())["n"] == 1
    assert "side evaluation of builtin" in out and not json.loads((side / "protocol.json").read_text())["run_protocol"]
    # --force: evaluated again although the periodic result has this protocol
    out = _eval(str(run_dir), "--force")
    again = json.loads((final / "summary.json").read_text())
    assert "reused" not in out and again["n"] == 2
    assert again["metrics"] == first["metrics"]  # same seed, same samples
    assert (side / "builtin" / "summary.json").is_file()  # the other protocol's result is still there


def test_same_protocol_compares_what_decides_the_score(tmp_path):
    from rbctl.config.eval import build_config
    from rbctl.eval.reuse import same_protocol
    from rbctl.tasks.benchmarks import Problem

    probs = [Problem(id="a", problem="q", answer="1"), Problem(id="b", problem="q", answer="2")]
    summary = {"step": 5, "per_problem": [{"id": "a"}, {"id": "b"}],
               "protocol": {"n": 4, "temperature": 1.0, "top_p": 1.0, "max_new_tokens": 9, "seed": 0, "engine": "hf",
                            "answer_extraction": "final", "grader_timeout_s": 5.0, "template": "builtin",
                            "instruction": None, "dtype": "float32", "device": "cpu", "threads": 2}}
    cfg = build_config(n=4, temperature=1.0, top_p=1.0, max_new_tokens=9, threads=1)  # threads do not decide the score
    assert same_protocol(summary, cfg, 5, probs)
    assert not same_protocol(summary, cfg, 6, probs)  # another checkpoint
    assert not same_protocol(summary, cfg, 5, probs[:1])  # other problems
    for change in ({"seed": 1}, {"n": 2}, {"max_new_tokens": 10}, {"template": "chat"}, {"dtype": "bfloat16"}):
        assert not same_protocol(summary, cfg.model_copy(update=change), 5, probs), change
    assert same_protocol(summary, cfg.model_copy(update={"device": "cpu", "dtype": "float32"}), 5, probs)


def test_the_command_hands_the_run_precision_resolved_to_the_evaluation(tmp_path, monkeypatch):
    import rbctl.eval.run as er
    from rbctl.cli import run

    run_dir = _run_dir_with_checkpoint(tmp_path, RUN_CONFIG)
    seen = {}
    monkeypatch.setattr(er, "run_eval", lambda model, cfg, **k: seen.update(k))
    assert run(["eval", str(run_dir)]) == 0
    prec = seen["precision"]  # auto on the CPU: fp32, no autocast (bf16-mixed on CUDA)
    assert (prec.mode, prec.device_type, prec.autocast) == ("fp32", "cpu", False)
    assert run(["eval", str(run_dir), "--dtype", "float32"]) == 0 and seen["precision"] is None
