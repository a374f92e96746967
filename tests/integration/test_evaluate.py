"""Tests of rbctl.eval.pipeline and `rbctl eval`, with a tiny random policy over the built-in tokenizer
(the cached warm start is never trained here) or a scripted engine. The Hub is never contacted."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rbctl.tasks import benchmarks
from rbctl.tasks import links as builtin
from rbctl.errors import UserError
from rbctl.config.eval import build_config
from rbctl.rollout.factory import engine_class
from rbctl.eval.pipeline import evaluate_policy, periodic_eval_lines
from rbctl.grading.extract import EXTRACTION_POLICY
from rbctl.rollout.models import LoadedPolicy
from rbctl.store.rundir import BUILTIN_MARKER
from rbctl.rollout.base import Sample, generate_each
from tests.conftest import SHARED_BENCHMARKS as SHARED, SHARED_MISSING

needs_shared = pytest.mark.skipif(
    not (SHARED / "amc23.jsonl").is_file(),
    reason=SHARED_MISSING,
)
SUMMARY_KEYS = {
    "benchmark", "model", "step", "n", "num_problems", "metrics", "per_problem", "grader", "extraction",
    "truncated", "mean_new_tokens", "protocol", "time_s", "tokens_per_s",
}
SAMPLE_KEYS = {"id", "sample", "completion", "extracted", "extraction", "gold", "correct", "status", "finished",
               "num_tokens"}


@pytest.fixture(autouse=True)
def _no_hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(benchmarks, "hub_reachable", lambda timeout_s=0: False)
    monkeypatch.delenv("RBCTL_DATA_DIR", raising=False)
    monkeypatch.setenv("RBCTL_CACHE", str(tmp_path / "cache"))  # a test must never train the warm start


def tiny_model_and_tokenizer():
    torch.manual_seed(0)
    spec = builtin.TaskSpec()
    from rbctl.tasks.builtin import build_model, build_tokenizer

    tok = build_tokenizer(spec)
    model = build_model(spec, builtin.WarmStartSpec(hidden_size=16, layers=1, heads=2), len(tok))
    return model, tok


@pytest.fixture(scope="module")
def tiny() -> LoadedPolicy:
    model, tok = tiny_model_and_tokenizer()
    return LoadedPolicy(model=model, tokenizer=tok, source="tiny", builtin="links")


def read_samples(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_builtin_outputs_match_samples(tiny: LoadedPolicy, tmp_path: Path) -> None:
    # batch_size 4 with n=3 gives one prompt per generate call: 4 calls, seeds 0..3.
    cfg = build_config(benchmarks=["builtin"], n=3, limit=4, temperature=1.0, max_new_tokens=8, batch_size=4)
    results = evaluate_policy(tiny, cfg, tmp_path, step=5)
    summary = json.loads((tmp_path / "builtin" / "summary.json").read_text())
    assert summary == json.loads(json.dumps(results["builtin"]))
    assert set(summary) == SUMMARY_KEYS
    assert (summary["benchmark"], summary["model"], summary["step"], summary["n"], summary["num_problems"]) == (
        "builtin", "tiny", 5, 3, 4)
    # default_ks(3) == [1, 2, 3]
    assert list(summary["metrics"]) == ["avg@n", "pass@1", "pass@2", "pass@3", "maj@1", "maj@2", "maj@3"]
    assert all(set(v) == {"value", "ci_low", "ci_high"} for v in summary["metrics"].values())

    samples = read_samples(tmp_path / "builtin" / "samples.jsonl")
    assert len(samples) == 12 and all(set(s) == SAMPLE_KEYS for s in samples)
    ids = [p.id for p in builtin.problems(builtin.TaskSpec(), "test")[:4]]
    assert [(s["id"], s["sample"]) for s in samples] == [(i, j) for i in ids for j in range(3)]
    assert all(s["num_tokens"] <= 8 and s["extracted"] == builtin.extract_answer(s["completion"]) for s in samples)
    assert all(s["correct"] == builtin.check(s["completion"], s["gold"]) for s in samples)
    mean_correct = sum(s["correct"] for s in samples) / 12
    assert summary["metrics"]["avg@n"]["value"] == pytest.approx(mean_correct)
    assert summary["metrics"]["pass@1"]["value"] == pytest.approx(mean_correct)
    assert [p["correct"] for p in summary["per_problem"]] == [
        sum(s["correct"] for s in samples if s["id"] == i) for i in ids]
    assert summary["grader"]["ok"] + summary["grader"]["no_answer"] == 12
    assert summary["grader"]["no_answer"] == sum(s["extracted"] is None for s in samples)
    assert summary["extraction"] == {"task": summary["grader"]["ok"], "none": summary["grader"]["no_answer"]}
    assert all(s["extraction"] == ("none" if s["extracted"] is None else "task") for s in samples)
    proto = summary["protocol"]
    assert (proto["engine"], proto["template"], proto["temperature"], proto["max_new_tokens"], proto["batch_size"]) == (
        "hf", "builtin", 1.0, 8, 4)
    assert proto["example_prompt"] == builtin.format_problem(builtin.problems(builtin.TaskSpec(), "test")[0].problem)
    assert proto["instruction"] is None  # the built-in template has none
    assert proto["extraction"] == builtin.extract_answer.__doc__.strip()  # the task's own extractor
    assert set(proto["versions"]) == {"rbctl", "torch", "transformers", "math-verify"}

    lines = periodic_eval_lines(results, step=5)
    values = {k: v["value"] for k, v in summary["metrics"].items()}
    assert lines == [{"step": 5, "benchmark": "builtin", **values, "n": 3}]


def test_greedy_is_deterministic(tiny: LoadedPolicy, tmp_path: Path) -> None:
    cfg = build_config(benchmarks=["builtin"], limit=3, max_new_tokens=6)
    assert (cfg.n, cfg.temperature, cfg.top_p) == (1, 0.0, 1.0)
    evaluate_policy(tiny, cfg, tmp_path / "a")
    evaluate_policy(tiny, cfg.model_copy(update={"seed": 123}), tmp_path / "b")
    a = read_samples(tmp_path / "a" / "builtin" / "samples.jsonl")
    b = read_samples(tmp_path / "b" / "builtin" / "samples.jsonl")
    assert len(a) == 3 and [s["completion"] for s in a] == [s["completion"] for s in b]


def test_config_defaults_and_errors() -> None:
    assert (build_config(n=4).temperature, build_config(n=4).top_p) == (0.6, 0.95)
    assert build_config(n=4, temperature=0).top_p == 1.0
    assert build_config(temperature=1.0).top_p == 0.95
    assert build_config().benchmarks == ["amc23", "aime24", "aime25"]
    with pytest.raises(UserError, match="--top-p"):
        build_config(top_p=1.5)
    with pytest.raises(UserError, match="--bogus"):
        build_config(bogus=1)


def test_vllm_engine_without_vllm_is_a_clear_error() -> None:
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed")
    with pytest.raises(UserError, match="--engine hf"):
        engine_class("vllm")


def test_build_engine_passes_the_policy_to_vllm(tiny: LoadedPolicy, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    class FakeVLLM:
        def __init__(self, model, tokenizer, **kwargs):
            calls.append((model, tokenizer, kwargs))

    from rbctl.rollout import factory

    monkeypatch.setattr(factory, "engine_class", lambda name: FakeVLLM)
    factory.build_engine("vllm", tiny.model, tiny.tokenizer, source=tiny.source, batch_size=8, seed=3)
    assert calls == [(tiny.model, tiny.tokenizer, {"model_name_or_path": "tiny", "dtype": "float32", "seed": 3})]


class ScriptedEngine:
    """Returns fixed completions: ``script[problem_index]`` is the list of n texts."""

    name = "scripted"

    def __init__(self, script: list[list[str]]):
        self.script = script
        self.seen = 0

    def prompts_per_call(self, prompt_tokens, params):
        return None  # the whole benchmark in one call

    def generate_calls(self, calls, progress=None):
        return generate_each(self, calls, progress)

    def generate(self, prompts, params, progress=None):
        out = []
        for texts in self.script[self.seen:self.seen + len(prompts)]:
            out.append([Sample(self.seen, [7] * (i + 1), t, finished=True) for i, t in enumerate(texts[:params.n])])
            self.seen += 1
        return out


def test_math_metrics_by_hand(tiny: LoadedPolicy, tmp_path: Path) -> None:
    data = tmp_path / "my_test.jsonl"
    data.write_text(json.dumps({"id": "p0", "problem": "x", "answer": "27"}) + "\n"
                    + json.dumps({"id": "p1", "problem": "y", "answer": "1/2"}) + "\n")
    script = [
        ["so \\boxed{27}", "no box", "\\boxed{26}", "\\boxed{26}"],  # c=1
        ["\\boxed{3}", "\\boxed{0.5}", "\\boxed{\\frac{1}{2}}", "\\boxed{2/4}"],  # c=3; 0.5, 1/2, 2/4 vote together
    ]
    cfg = build_config(benchmarks=[f"file:{data}"], n=4)
    summary = evaluate_policy(tiny, cfg, tmp_path / "out", engine=ScriptedEngine(script))[f"file:{data}"]
    values = {k: v["value"] for k, v in summary["metrics"].items()}
    assert values == pytest.approx({
        "avg@n": 0.5,  # (1/4 + 3/4) / 2
        "pass@1": 0.5,
        "pass@2": 0.75,  # p0: 1 - C(3,2)/C(4,2) = 1 - 3/6; p1: n-c = 1 < 2 -> 1
        "pass@4": 1.0,
        "maj@1": 0.5,  # p0 "27" right; p1 "3" wrong
        "maj@2": 0.5,  # p0 "27" vs none -> right; p1 "3" vs "0.5" tie -> first ("3") wrong
        "maj@4": 0.5,  # p0 "26" x2 beats "27" -> wrong; p1 three equivalent halves -> right
    })
    assert summary["grader"] == {"ok": 7, "no_answer": 1, "unevaluated": 0, "timeout": 0, "error": 0}
    assert summary["extraction"] == {"boxed": 7, "phrase": 0, "none": 1}
    assert [p["correct"] for p in summary["per_problem"]] == [1, 3]
    assert summary["protocol"]["engine"] == "scripted"
    assert summary["protocol"]["extraction"] == EXTRACTION_POLICY
    samples = read_samples(tmp_path / "out" / "my_test" / "samples.jsonl")
    assert [s["extracted"] for s in samples[:4]] == ["27", None, "26", "26"]
    assert [s["extraction"] for s in samples[:4]] == ["boxed", "none", "boxed", "boxed"]
    assert summary["mean_new_tokens"] == 2.5  # token lists of length 1..4


def test_phrases_and_separated_numbers_are_graded_and_counted(tiny: LoadedPolicy, tmp_path: Path) -> None:
    data = tmp_path / "sep.jsonl"
    data.write_text(json.dumps({"id": "p0", "problem": "x", "answer": "1000"}) + "\n"
                    + json.dumps({"id": "p1", "problem": "y", "answer": "0"}) + "\n")
    script = [
        ["\\boxed{1 000}", "The final answer is $1{,}000$.", "no answer", "\\boxed{0}"],  # right, right, -, wrong
        ["\\boxed{1 000}", "Final Answer: 0", "\\boxed{0} and \\boxed{1}", "The answer is 0."],  # -, right, -, right
    ]
    cfg = build_config(benchmarks=[f"file:{data}"], n=4)
    summary = evaluate_policy(tiny, cfg, tmp_path / "out", engine=ScriptedEngine(script))[f"file:{data}"]
    values = {k: v["value"] for k, v in summary["metrics"].items()}
    assert values["avg@n"] == pytest.approx(0.5)  # (2/4 + 2/4) / 2; `1 000` no longer equals 0
    assert values["maj@4"] == pytest.approx(1.0)  # p0: `1 000` and `1{,}000` vote together; p1: two 0s
    assert summary["extraction"] == {"boxed": 4, "phrase": 3, "none": 1}
    samples = read_samples(tmp_path / "out" / "sep" / "samples.jsonl")
    assert [(s["extracted"], s["extraction"], s["correct"]) for s in samples] == [
        ("1 000", "boxed", True), ("1{,}000", "phrase", True), (None, "none", False), ("0", "boxed", False),
        ("1 000", "boxed", False), ("0", "phrase", True), ("1", "boxed", False), ("0", "phrase", True),
    ]


@needs_shared
def test_amc23_from_shared_data_dir(tiny: LoadedPolicy, tmp_path: Path) -> None:
    cfg = build_config(benchmarks=["amc23"], limit=2, max_new_tokens=4, data_dir=str(SHARED), template="plain")
    summary = evaluate_policy(tiny, cfg, tmp_path)["amc23"]
    assert [p["id"] for p in summary["per_problem"]] == ["amc23-0", "amc23-1"]
    # the character tokenizer has no backslash, so no sample can hold a \boxed answer
    assert summary["grader"] == {"ok": 0, "no_answer": 2, "unevaluated": 0, "timeout": 0, "error": 0}
    assert summary["protocol"]["example_prompt"].endswith("\\boxed{}.\n")
    samples = read_samples(tmp_path / "amc23" / "samples.jsonl")
    assert [s["gold"] for s in samples] == ["27", "36"]


def test_cli_on_run_dir_writes_under_the_checkpoint_step(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from rbctl.cli import app

    run_dir = _run_dir_with_checkpoint(tmp_path, config=None)  # no config.yaml: the published defaults
    ckpt = run_dir / "checkpoints" / "step_000007" / "model"
    result = CliRunner().invoke(app, ["eval", str(run_dir), "-b", "builtin", "--limit", "2", "--n", "2",
                                      "--max-new-tokens", "4", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    folder, = (run_dir / "eval" / "step_000007").glob("protocol_*")  # the protocol's own folder
    summary = json.loads((folder / "builtin" / "summary.json").read_text())
    assert (summary["step"], summary["n"], summary["num_problems"], summary["model"]) == (7, 2, 2, str(ckpt))
    assert (summary["protocol"]["temperature"], summary["protocol"]["max_new_tokens"]) == (0.6, 4)
    assert "avg@n" in result.output
    assert "protocol: the published defaults where not given" in result.output
    assert "protocol: n=2, temperature 0.6, top-p 0.95, at most 4 new tokens, engine hf" in result.output


@pytest.mark.slow
def test_cli_unknown_benchmark_is_one_line_exit_2(tmp_path: Path) -> None:
    # "builtin" would train the warm start if the benchmark were checked after loading the model
    env = {**os.environ, "RBCTL_CACHE": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "rbctl", "eval", "builtin", "--benchmarks", "amc23,nope"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown benchmark 'nope'" in lines[0] and "builtin" in lines[0]
    assert proc.stdout == ""


def test_progress_runs_over_token_slots_while_generating_and_completes(tiny: LoadedPolicy, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from rich.console import Console
    from rich.progress import Progress

    import rbctl.rollout.hf as hf

    monkeypatch.setattr(hf, "PROGRESS_EVERY", 2)
    advances = []
    progress = Progress(console=Console(file=io.StringIO()))
    real = progress.advance
    monkeypatch.setattr(progress, "advance", lambda task, k: advances.append((task, k)) or real(task, k))
    cfg = build_config(benchmarks=["builtin"], n=3, limit=4, temperature=1.0, max_new_tokens=8, batch_size=6)
    with progress:
        evaluate_policy(tiny, cfg, tmp_path, progress=progress)
    gen, grade = progress.tasks
    assert gen.description == "builtin: generating" and gen.total == 4 * 3 * 8 == gen.completed  # slots: P × n × max
    assert gen.fields["detail"] == "12/12 samples"
    assert grade.total == grade.completed == 12
    # 2 calls of 2 prompts (6 // 3), each reporting while it decodes (every 2 steps) and at its end
    assert len([k for t, k in advances if t == gen.id]) > 2


def test_summary_warnings_name_the_share_of_cut_off_and_answerless_samples() -> None:
    from rbctl.eval.pipeline import WARN_SHARE, protocol_text, summary_warnings

    def summary(truncated, none):
        return {"benchmark": "amc23", "num_problems": 5, "n": 2, "truncated": truncated,
                "extraction": {"boxed": 10 - none, "phrase": 0, "none": none},
                "protocol": {"n": 2, "temperature": 0.6, "top_p": 0.95, "max_new_tokens": 128, "engine": "hf"}}

    assert WARN_SHARE == 0.10
    assert summary_warnings(summary(0.1, 1)) == []  # 10% is not more than 10%
    assert summary_warnings(summary(1.0, 4)) == [
        "amc23: 100% of samples were cut off at max_new_tokens 128 before they ended; raise --max-new-tokens",
        "amc23: 40% of samples gave no answer the grader could find (extraction 'none')",  # 4 of 5 × 2
    ]
    assert protocol_text(summary(0, 0)) == "n=2, temperature 0.6, top-p 0.95, at most 128 new tokens, engine hf"
    greedy = summary(0, 0)
    greedy["protocol"].update(n=1, temperature=0.0, top_p=1.0)
    assert protocol_text(greedy) == "n=1, greedy, at most 128 new tokens, engine hf"


def _run_dir_with_checkpoint(tmp_path: Path, config: dict | None) -> Path:
    from rbctl.store.checkpoint import checkpoint_manifest
    from rbctl.store.rundir import CKPT_DONE

    run_dir = tmp_path / "run"
    ckpt = run_dir / "checkpoints" / "step_000007" / "model"
    model, tok = tiny_model_and_tokenizer()
    model.save_pretrained(ckpt)
    tok.save_pretrained(ckpt)
    (ckpt / BUILTIN_MARKER).write_text("{}")
    (run_dir / "metrics.jsonl").write_text("")
    sealed = ckpt.parent
    (sealed / CKPT_DONE).write_text(json.dumps({"step": 7, "files": checkpoint_manifest(sealed)}))
    if config is not None:
        from rbctl.config.base import dump_config
        from rbctl.config.train import TrainConfig

        (run_dir / "config.yaml").write_text(dump_config(TrainConfig.model_validate(config)))
    return run_dir


@pytest.fixture
def keep_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def test_cli_on_a_run_directory_uses_its_periodic_protocol_and_says_so(tmp_path: Path, keep_threads) -> None:
    from typer.testing import CliRunner

    from rbctl.cli import app

    run_dir = _run_dir_with_checkpoint(tmp_path, {
        "rollout": {"max_new_tokens": 9},
        "eval": {"every": 5, "benchmarks": ["builtin"], "n": 3, "temperature": 0.7, "top_p": 0.9, "limit": 8}})
    result = CliRunner().invoke(app, ["eval", str(run_dir), "--device", "cpu", "--threads", "1"])
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert f"the run's periodic evaluation ({run_dir / 'config.yaml'}, eval:)" in said
    assert "top_p, max_new_tokens, template, instruction, extraction, limit;" in said
    folder, = (run_dir / "eval" / "step_000007").glob("protocol_*")  # the protocol's own folder
    assert json.loads((folder / "protocol.json").read_text())["run_protocol"]  # the run's own declared protocol
    assert "the run's own evaluation protocol (its config's eval:)" in said
    summary = json.loads((folder / "builtin" / "summary.json").read_text())
    proto = summary["protocol"]
    # eval.max_new_tokens null = rollout.max_new_tokens 9; the run's limit of 8 problems (its curve's subset),
    # not the test split's 256
    assert (summary["n"], proto["temperature"], proto["top_p"], proto["max_new_tokens"]) == (3, 0.7, 0.9, 9)
    assert summary["num_problems"] == 8 and proto["threads"] == 1
    assert "protocol: n=3, temperature 0.7, top-p 0.9, at most 9 new tokens, engine hf" in result.output

    # told otherwise: --n 1 and -o; the rest still the run's (temperature 0.7, not the greedy default)
    result = CliRunner().invoke(app, ["eval", str(run_dir), "--limit", "2", "--device", "cpu", "--n", "1",
                                      "--max-new-tokens", "1", "-o", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    proto = json.loads((tmp_path / "o" / "builtin" / "summary.json").read_text())["protocol"]
    assert (proto["n"], proto["temperature"], proto["max_new_tokens"]) == (1, 0.7, 1)
    # one token leaves no room for an answer: said, not just a 0.0 in the table
    assert "warning: builtin:" in result.output and "cut off at max_new_tokens 1" in " ".join(result.output.split())


@pytest.mark.parametrize("model, expected", [
    ("./no_such_run", "model ./no_such_run: not a run directory, a model directory or a GGUF file (no_such_run does not exist)"),
    ("{tmp}/gone", "model {tmp}/gone: not a run directory, a model directory or a GGUF file ({tmp}/gone does not exist)"),
    ("{tmp}/plain", "{tmp}/plain is not a model directory (no config.json) nor an rbctl run directory"),
    ("nobody/no-such-model", "model nobody/no-such-model: not a local path, a run directory or a model in the Hugging "
                             "Face cache, and the Hub is unreachable"),
])
def test_cli_eval_of_something_that_is_no_model_says_so_not_that_amc23_has_no_data(model, expected, tmp_path, capsys,
                                                                                    monkeypatch) -> None:
    from rbctl.cli import run

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))  # nothing cached
    (tmp_path / "plain").mkdir()  # a folder that is neither a run nor a model
    monkeypatch.chdir(tmp_path)
    model, expected = model.format(tmp=tmp_path), expected.format(tmp=tmp_path)
    capsys.readouterr()
    assert run(["eval", model]) == 2  # no -b: the default benchmarks amc23, aime24, aime25 have no data here
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {expected}"] or (len(err) == 1 and expected in err[0]), err
    assert "amc23" not in err[0]
