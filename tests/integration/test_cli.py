"""The command line: argument parsing, one-line config errors with exit code 2, and hand-offs."""

from __future__ import annotations

from typing import Optional

import pytest
import typer
import yaml

from rbctl.cli import run

QUICKSTART = "configs/quickstart.yaml"


@pytest.fixture(autouse=True)
def _repo_root(monkeypatch, rbctl_cache):
    from pathlib import Path

    monkeypatch.chdir(Path(__file__).resolve().parents[2])


def _err_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err  # one line, no traceback
    return err[0]


@pytest.mark.parametrize("override, expected", [
    ("algo.buget=1.0", "unknown config key 'algo.buget' (did you mean 'algo.budget'?)"),
    ("rollout.group_size=1", "config key 'rollout.group_size': Input should be greater than or equal to 2"),
    ("algo.budget=0", "config key 'algo.budget': Input should be greater than 0"),
    ("steps=abc", "config key 'steps': Input should be a valid integer"),
    ("algo.estimator=ppo", "config key 'algo.estimator': Input should be 'grpo', 'dr_grpo', 'rloo', 'reinforce_pp', 'maxrl' or 'passk'"),
    ("data.builtin.min_hops=7", "min_hops must be <= max_hops"),
    ("algo.entropy.mode=static", "algo.entropy.alpha must be > 0 when algo.entropy.mode is 'static'"),
    ("nonsense", "--set 'nonsense': expected key.path=value"),
])
def test_config_errors_are_one_line_naming_the_key(override, expected, tmp_path, capsys):
    rc = run(["train", QUICKSTART, "-o", str(tmp_path / "run"), "--set", "seed=1", "--set", override])
    assert rc == 2
    line = _err_line(capsys)
    assert line.startswith("error: ") and expected in line
    # the error names the `--set` item that caused it (not the YAML file, not the other override);
    # a whole-config error (no key) names the file and every override
    assert f"--set '{override}'" in line
    if "config key" in line:
        assert line.startswith(f"error: --set '{override}': ") and "seed=1" not in line
    assert not (tmp_path / "run").exists()  # nothing was started


def test_an_error_in_the_file_names_the_file_not_an_override(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("steps: 10\nalgo:\n  budget: -1\n")
    assert run(["train", str(bad), "-o", str(tmp_path / "run"), "--set", "algo.estimator=rloo"]) == 2
    line = _err_line(capsys)
    assert line.startswith(f"error: {bad}: config key 'algo.budget'") and "--set" not in line


def test_yaml_syntax_error_names_the_file_and_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("steps: 10\nalgo:\n  budget: [1.0\n")
    assert run(["train", str(bad), "-o", str(tmp_path / "run")]) == 2
    line = _err_line(capsys)
    assert str(bad) in line and "line 4" in line and "invalid YAML" in line


def test_missing_config_file(tmp_path, capsys):
    assert run(["train", str(tmp_path / "nope.yaml"), "-o", str(tmp_path / "run")]) == 2
    assert "nope.yaml does not exist" in _err_line(capsys)


def test_missing_required_option_is_a_usage_error(capsys):
    assert run(["train", QUICKSTART]) == 2
    assert "--out" in capsys.readouterr().err


def test_debug_shows_the_traceback_and_keeps_exit_code_2(tmp_path, capsys):
    assert run(["--debug", "train", QUICKSTART, "-o", str(tmp_path / "run"), "--set", "algo.buget=1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("Traceback") and any("UserError" in line for line in err)
    assert err[-1].startswith("error: ") and "algo.buget" in err[-1]
    # the flag does not stick to later calls in the same process
    assert run(["train", QUICKSTART, "-o", str(tmp_path / "run"), "--set", "algo.buget=1"]) == 2
    _err_line(capsys)


@pytest.mark.parametrize("where", ["before", "after"])
@pytest.mark.parametrize("command", [
    ["train", QUICKSTART, "-o", "RUN", "--set", "algo.buget=1"],
    ["eval", "builtin", "-b", "nosuchbench"],
    ["ablate", "MISSING.yaml"],
    ["report", "MISSING_DIR"],
])
def test_debug_works_before_and_after_every_command(command, where, tmp_path, capsys):
    argv = [str(tmp_path / a) if a in ("RUN", "MISSING.yaml", "MISSING_DIR") else a for a in command]
    argv = ["--debug", *argv] if where == "before" else [*argv, "--debug"]
    assert run(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("Traceback") and err[-1].startswith("error: "), err
    assert run(argv[1:] if where == "before" else argv[:-1]) == 2  # without it: the one line only
    assert capsys.readouterr().err.strip().startswith("error: ")


@pytest.mark.slow
def test_debug_through_the_entry_point_exits_2(tmp_path):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "rbctl", "--debug", "train", QUICKSTART, "-o", str(tmp_path / "run"),
                           "--set", "algo.buget=1"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" in proc.stderr and proc.stderr.strip().splitlines()[-1].startswith("error: ")


COMMAND_SUMMARIES = {
    "train": "Train a policy with a GRPO-family estimator",
    "eval": "Evaluate a model on AMC23",
    "ablate": "Run a declared grid of arms × seeds",
    "report": "Comparison plots and tables",
    "presets": "List the shipped configs",
    "config": "Print a config resolved",
}


def test_help_explains_every_command(capsys, monkeypatch):
    import re

    monkeypatch.setenv("COLUMNS", "200")
    assert run(["--help"]) == 0
    out = capsys.readouterr().out
    # each command is a row of the command list: its name, then the first line of its docstring
    listed = re.findall(r"^\W*([a-z]+) {2,}(\S.*?)\W*$", out.split("Commands", 1)[-1], re.M)
    assert {name for name, _ in listed} == set(COMMAND_SUMMARIES), listed
    for name, summary in listed:
        assert summary.startswith(COMMAND_SUMMARIES[name]), (name, summary)
    for cmd in ("train", "eval", "ablate", "report"):
        assert run([cmd, "--help"]) == 0
        assert "Usage" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [[], ["train"], ["eval"], ["ablate"], ["report"]])
def test_help_has_no_bool_metavars_and_unbroken_paragraphs(argv, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert run(argv + ["--help"]) == 0
    out = capsys.readouterr().out
    assert "<bool>" not in out and "--help" in out
    if argv == ["train"]:  # a docstring paragraph wrapped in the source is one line at 200 columns
        assert "samples.jsonl, eval.jsonl (periodic held-out evaluation) and checkpoints/." in out
        assert "KEY=VALUE" in out and "<list[str]>" not in out
    if argv == ["report"]:  # Markdown mode: file patterns survive
        assert "OUT/tables/*.{csv,md,tex}" in out


def test_train_dry_run_prints_a_plan_and_trains_nothing(tmp_path, capsys, benchmark_data):
    rc = run(["train", "configs/paper_llama32_3b.yaml", "-o", str(tmp_path / "run"), "--dry-run"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "meta-llama/Llama-3.2-3B-Instruct" in out and "FLOPs" in out
    assert not (tmp_path / "run").exists()


def test_train_hands_the_validated_config_to_the_trainer(tmp_path, monkeypatch):
    import rbctl.train.loop

    seen = {}
    monkeypatch.setattr(rbctl.train.loop, "train",
                        lambda cfg, out, force, extend, progress: seen.update(cfg=cfg, out=out, force=force, extend=extend))
    assert run(["train", QUICKSTART, "-o", str(tmp_path / "r"), "--set", "algo.budget=2", "--set", "seed=3", "--force", "-q"]) == 0
    cfg = seen["cfg"]
    assert cfg.algo.budget == 2.0 and cfg.seed == 3 and seen["force"] is True and seen["extend"] is False
    assert run(["train", QUICKSTART, "-o", str(tmp_path / "r"), "--extend", "-q"]) == 0 and seen["extend"] is True
    assert cfg.algo.loss_agg == "seq-mean-token-mean"  # grpo's default aggregation, resolved
    assert seen["out"] == tmp_path / "r"


def test_train_nproc_hands_every_option_to_torchrun(tmp_path, monkeypatch):
    import rbctl.train.distributed

    seen = {}
    monkeypatch.setattr(rbctl.train.distributed, "launch", lambda nproc, argv: seen.update(nproc=nproc, argv=argv) or 0)
    out = str(tmp_path / "r")
    assert run(["train", QUICKSTART, "-o", out, "--nproc", "2", "--set", "seed=3", "--extend", "--force", "-q"]) == 0
    # the command as typed, less --nproc (its own spelling and order: `command_argv`)
    assert seen == {"nproc": 2, "argv": ["train", QUICKSTART, "-o", out, "--set", "seed=3", "--extend", "--force", "-q"]}


def test_the_resume_command_is_the_command_as_typed_less_what_a_resume_must_not_repeat():
    from rbctl.cli.options import resume_command

    app, said = typer.Typer(), []

    @app.command()
    def go(ctx: typer.Context, thing: str, out: Optional[str] = typer.Option(None, "--out", "-o"),
           force: bool = typer.Option(False, "--force"), jobs: int = typer.Option(1, "--jobs", "-j"),
           debug: bool = typer.Option(False, "--debug")):
        said.append(resume_command(ctx, drop=("force", "jobs"), pin={"out": "runs/default dir"}))

    @app.command()
    def other():  # two commands: `go` is a subcommand, as rbctl's are
        pass

    def resume(*argv):
        app(args=list(argv), standalone_mode=False, obj={"argv": list(argv)})
        return said[-1]

    # dropped with their values (`-j 2`, `--jobs=2`), --debug always; a pinned default added where not typed
    assert resume("go", "a b", "--force", "-j", "2", "--debug") == "rbctl go 'a b' --out 'runs/default dir'"
    assert resume("go", "x", "--jobs=2", "-o", "mine") == "rbctl go x -o mine"
    assert resume("go", "--out=mine", "x") == "rbctl go --out=mine x"


def test_ablate_unknown_arm_key_exits_2_naming_arm_and_key(tmp_path, capsys):
    sweep = tmp_path / "s.yaml"
    (tmp_path / "base.yaml").write_text((__import__("pathlib").Path(QUICKSTART)).read_text())
    sweep.write_text(yaml.safe_dump({"base": "base.yaml", "arms": {"ok": {}, "bad": {"algo.clip_hi": 0.3}}}))
    assert run(["ablate", str(sweep), "-o", str(tmp_path / "out"), "--no-report"]) == 2
    line = _err_line(capsys)
    assert "arm 'bad'" in line and "'algo.clip_hi'" in line and "did you mean 'algo.clip_high'" in line


def test_ablate_rejects_an_unknown_launcher(tmp_path, capsys):
    assert run(["ablate", "configs/ablate_quickstart.yaml", "-o", str(tmp_path / "o"), "--launcher", "ray"]) == 2
    assert "--launcher must be 'local' or 'submitit'" in _err_line(capsys)


def test_config_reference_doc_is_current():
    from pathlib import Path

    from scripts.config_doc import reference_markdown

    doc = Path("docs/config.md").read_text()
    assert doc == reference_markdown(), "regenerate it: python scripts/config_doc.py > docs/config.md"
    for key in ("`algo.budget`", "`algo.entropy.target`", "`model.lora.r`", "`rollout.group_size`", "`arms`"):
        assert key in doc


@pytest.mark.parametrize("jobs", ["0", "-1"])
def test_ablate_refuses_fewer_than_one_job_in_one_line_before_anything_starts(jobs, tmp_path, capsys):
    out = tmp_path / "sweep"
    assert run(["ablate", "configs/ablate_quickstart.yaml", "--jobs", jobs, "-o", str(out), "--no-report"]) == 2
    assert _err_line(capsys) == f"error: --jobs must be at least 1 (runs in parallel), got {jobs}"
    assert not out.exists()


def test_version_prints_the_package_metadata_version(capsys):
    from importlib import metadata

    assert run(["--version"]) == 0
    assert capsys.readouterr().out == f"rbctl {metadata.version('rbctl')}\n"


def test_eval_option_help_is_the_config_models_own():
    """Each `rbctl eval` option that sets an EvalConfig field shows that field's description and
    default, as the config model states them (written once there, never restated in the CLI)."""
    import typer

    from rbctl.cli import app
    from rbctl.config.eval import EvalConfig

    command = typer.main.get_command(app).commands["eval"]
    shown = {p.name: p.help for p in command.params}
    fields = [name for name in shown if name in EvalConfig.model_fields]
    assert len(fields) >= 15  # every sampling, prompt, engine and loading option
    for name in fields:
        assert EvalConfig.model_fields[name].description.replace("<", "\\<") in shown[name], name
    assert "Default: 0." in shown["seed"] and "Default: amc23,aime24,aime25." in shown["benchmarks"]
    assert "A run directory's eval.n unless given." in shown["n"]


@pytest.mark.parametrize("seeds, why", [
    ("0-", "'0-': expected seeds >= 0, comma-separated, ranges as A-B"),  # once ran seed 0 alone
    ("3-1", "'3-1': a range needs its end at or after its start"),
    ("a-b", "'a-b': expected seeds >= 0, comma-separated, ranges as A-B"),
    ("0,1,", "'': expected seeds >= 0"),
    ("0-2,2", "expected each seed once"),
])
def test_a_malformed_seed_list_is_one_line_exit_2_never_read_as_something_else(seeds, why, tmp_path, capsys):
    out = tmp_path / "s"
    for dry in ([], ["--dry-run"]):
        assert run(["ablate", "ablate_quickstart", "--seeds", seeds, "-o", str(out), *dry]) == 2
        line = _err_line(capsys)
        assert line.startswith(f"error: --seeds '{seeds}': ") and why in line, line
    assert not out.exists()
