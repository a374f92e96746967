"""The `rbctl` command line. Each command parses options, builds a validated config and calls one
library function; no algorithm lives here."""

from __future__ import annotations

import errno
import os
import sys
import time
from pathlib import Path
from typing import List, Optional

import typer

from rbctl.cli.options import (DEBUG, Command, DebugOpt, Group, SetOpt, eval_help, int_list, package_version, resume_command,
                               typed_argv)
from rbctl.cli.ends import check_out_folder, report_end, run_ablate, run_precision
from rbctl.console import quiet_libraries, table_console
from rbctl.errors import UserError


app = typer.Typer(
    cls=Group,
    help="rbctl: RL training of LLM reasoning with reward budgeting — train, eval, ablate, report.\n\n"
    "Examples (a config is a YAML file or a shipped preset's name; `rbctl presets` lists them):\n\n"
    "- `rbctl train fixpoint -o runs/first`: one run, about a minute on a CPU\n"
    "- `rbctl eval runs/first`: its held-out score (reused where training has it)\n"
    "- `rbctl train fixpoint -o runs/budget --set algo.budget=1.0`: the same with reward budgeting\n"
    "- `rbctl report runs/first runs/budget -o runs/cmp`: the two compared\n"
    "- `rbctl ablate ablate_quickstart --dry-run`: a sweep's plan, power and time; runs nothing\n"
    "- `rbctl config quickstart`: a config with every default filled in",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Markdown joins a docstring's wrapped lines into paragraphs (the "rich" mode keeps every source
    # line break, so help broke lines mid-sentence). Placeholders are in capitals, never <angle
    # brackets>, which Markdown would take for HTML tags.
    rich_markup_mode="markdown",
)

def _version(value: bool) -> bool:
    if value:
        typer.echo(f"rbctl {package_version()}")
        raise typer.Exit(0)
    return value


@app.callback()
def _root(
    debug: bool = DebugOpt,
    version: bool = typer.Option(False, "--version", help="Print rbctl's version and exit.", callback=_version,
                                 is_eager=True),
) -> None:
    pass


@app.command(cls=Command)
def train(
    ctx: typer.Context,
    config: str = typer.Argument(..., metavar="CONFIG", help="Training config: a YAML file, or a shipped preset by name (`rbctl presets`), e.g. quickstart."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", metavar="RUN_DIR", help="Run directory; an existing one is resumed. Required but with --dry-run."),
    set_: Optional[List[str]] = SetOpt,
    force: bool = typer.Option(False, "--force", help="Use a run directory whose config differs (the previous config is kept as RUN_DIR/config.step_N.yaml)."),
    extend: bool = typer.Option(False, "--extend", help="Resume a run with another `steps` (refused without it): a cosine schedule keeps its first horizon; steps past it keep the lr of its last step."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
    nproc: int = typer.Option(1, "--nproc", help="Data-parallel processes on this machine (runs torchrun; one per GPU, or gloo on CPU)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Validate the config, resolve what can be resolved offline, print the plan and a cost estimate; train nothing. Then make the start's own checks (benchmark data, RUN_DIR when given): exit 2 where the start would refuse; what this machine lacks (CUDA, vLLM) is stated in the plan."),
    debug: bool = DebugOpt,
) -> None:
    """Train a policy with a GRPO-family estimator, optionally with reward budgeting and an entropy bonus.

    Writes RUN_DIR/config.yaml, provenance.json, metrics.jsonl (one line per step), samples.jsonl,
    eval.jsonl (periodic held-out evaluation) and checkpoints/. Re-running on the same RUN_DIR
    resumes from its last checkpoint. Ends with the final held-out score of each benchmark (the
    last periodic evaluation); output that is not a terminal gets plain progress lines. A start that
    cannot go ahead (an unknown benchmark or one whose data is reachable nowhere, a missing model or
    data path, an engine or device this machine lacks, a RUN_DIR it cannot write or of another config,
    another `steps` without --extend) is refused before anything is written; --dry-run makes the same
    checks. Ctrl-C ends the step in progress and saves it: a rerun resumes there.

    Examples: `rbctl train fixpoint -o runs/first`; `rbctl train quickstart -o runs/b --set algo.budget=1.0`;
    `rbctl train paper_llama32_3b -o runs/p --dry-run` (the plan and cost, offline)."""
    from rbctl.config.train import load_train_config
    from rbctl.train.preflight import check_start

    cfg = load_train_config(config, set_ or [])
    if dry_run:
        _train_plan(cfg, config)
        check_start(cfg, out, force=force, extend=extend, dry_run=True)  # the start's own checks: 2 where it refuses
        return
    if out is None:
        raise UserError("rbctl train needs --out/-o RUN_DIR, the run directory (only --dry-run goes without one)")
    check_start(cfg, out, force=force, extend=extend)  # before the run directory is made: a start refused leaves nothing
    if nproc > 1:
        from rbctl.cli.options import command_argv
        from rbctl.train.distributed import launch

        argv = command_argv(ctx, drop=("nproc",))
        raise typer.Exit(launch(nproc, argv + (["--debug"] if DEBUG["on"] and "--debug" not in argv else [])))
    from rbctl.train.evaluation import final_heldout_lines
    from rbctl.train.loop import train as run_training

    try:
        run_training(cfg, out, force=force, extend=extend, progress=not quiet)
    except KeyboardInterrupt:
        from rbctl.store.checkpoint import last_good_checkpoint

        step, _ = last_good_checkpoint(out)
        saved = f"the last checkpoint is step {step}" if step else "no checkpoint yet"
        typer.secho(f"interrupted: {saved}; resume with: {resume_command(ctx, drop=('quiet',))}", err=True)
        raise typer.Exit(130)
    for line in final_heldout_lines(out):
        typer.echo(line)


def _train_plan(cfg, source: str) -> None:
    """Print `rbctl train --dry-run`'s plan, reading caches only (HF_HUB_OFFLINE for its duration)."""
    from rbctl.train.dry_run import dry_run as plan

    was = os.environ.get("HF_HUB_OFFLINE")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # belt and braces: the plan reads caches only
    try:
        typer.echo(plan(cfg, source=str(source)), nl=False)
    finally:  # the setting is the plan's, not the caller's (a process that runs more afterwards)
        if was is None:
            os.environ.pop("HF_HUB_OFFLINE", None)


@app.command("eval", cls=Command)
def eval_(
    ctx: typer.Context,
    model: str = typer.Argument(..., metavar="MODEL", help="Hub id, local model dir, GGUF file, rbctl run directory (or a checkpoint folder of one), a TRL checkpoint-N or verl global_step_N folder (results go beside it, where a runs manifest's report reads them), or 'builtin'."),
    benchmarks: Optional[str] = typer.Option(None, "--benchmarks", "-b",
                                             help="Comma-separated. " + eval_help("benchmarks", "eval.benchmarks")),
    n: Optional[int] = typer.Option(None, "--n", help=eval_help("n", "eval.n")),
    out: Optional[Path] = typer.Option(
        None, "--out", "-o",
        help="Output folder (default: the protocol's folder RUN_DIR/eval/step_XXXXXX/protocol_X for a run directory, "
        "else runs/eval/MODEL/protocol_X; one folder per protocol, so none replaces another).",
    ),
    step: Optional[int] = typer.Option(None, "--step", help="Checkpoint step of a run directory (default: latest)."),
    temperature: Optional[float] = typer.Option(None, "--temperature", help=eval_help("temperature", "eval.temperature")),
    top_p: Optional[float] = typer.Option(None, "--top-p", help=eval_help("top_p", "eval.top_p")),
    max_new_tokens: Optional[int] = typer.Option(
        None, "--max-new-tokens", help=eval_help("max_new_tokens", "eval.max_new_tokens (or rollout.max_new_tokens)")),
    seed: Optional[int] = typer.Option(None, "--seed", help=eval_help("seed", "seed")),
    template: Optional[str] = typer.Option(None, "--template", help=eval_help("template", "data.template")),
    instruction: Optional[str] = typer.Option(None, "--instruction", help=eval_help("instruction", "data.instruction")),
    extraction: Optional[str] = typer.Option(None, "--extraction", help=eval_help("extraction", "data.extraction")),
    limit: Optional[int] = typer.Option(None, "--limit", help=eval_help("limit", "eval.limit")),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", envvar="RBCTL_DATA_DIR", help=eval_help("data_dir")),
    engine: Optional[str] = typer.Option(None, "--engine", help=eval_help("engine")),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help=eval_help("batch_size")),
    max_batch_tokens: Optional[int] = typer.Option(None, "--max-batch-tokens", help=eval_help("max_batch_tokens")),
    threads: Optional[int] = typer.Option(None, "--threads", help=eval_help("threads", "threads")),
    device: Optional[str] = typer.Option(None, "--device", help=eval_help("device", "model.device")),
    dtype: Optional[str] = typer.Option(
        None, "--dtype", help=eval_help("dtype", "weights as it trained them (float32 master weights, generation under "
                                                  "its model.precision's autocast)")),
    cpu_linear: Optional[str] = typer.Option(None, "--cpu-linear", help=eval_help("cpu_linear", "model.cpu_linear")),
    force: bool = typer.Option(
        False, "--force", help="Evaluate again where the run directory already holds this protocol's result for the "
        "step (its training's last evaluation, or an earlier one), and start over what an interrupted one kept.",
    ),
    debug: bool = DebugOpt,
) -> None:
    """Evaluate a model on AMC23, AIME24, AIME25, GSM8K or the built-in task.

    A run directory is evaluated with its own periodic-evaluation protocol (benchmarks, n,
    temperature, top-p, max new tokens, template, instruction, extraction and limit from its config), so that
    the score compares with the run's curve, and with its seed, threads, device and precision; any other
    model with the published defaults (greedy at n=1; temperature 0.6, top-p 0.95 at n>1). Options override
    either. Where the run already holds a result of the same protocol for the step (the evaluation training
    ran at its last step, or an earlier `rbctl eval`), it is reused and said so; `--force` evaluates again. A
    checkpoint folder of a run (RUN/checkpoints/step_N/model) is evaluated as the run at step N: its task,
    protocol and settings. Another protocol than the run's own is a side evaluation, kept in its own folder
    and never the run's final score. Writes
    OUT/BENCHMARK/summary.json (avg@n, pass@k, maj@k with 95% intervals, protocol) and
    OUT/BENCHMARK/samples.jsonl (appended as samples are graded), and prints a table with the
    protocol of its scores. OUT is checked for write access and space before the first sample. An
    interrupted evaluation (Ctrl-C) keeps what it graded: the same command resumes it (benchmarks
    already complete with the same protocol are kept) and gives the result of an uninterrupted one.

    Examples: `rbctl eval runs/first`; `rbctl eval runs/first --n 16 --force`;
    `rbctl eval Qwen/Qwen2.5-Math-1.5B -b gsm8k --limit 100`."""
    _eval(ctx, model, step, out, force)


def _eval(ctx: typer.Context, model: str, step: int | None, out: Path | None, force: bool) -> None:
    """`rbctl eval`: its options named as EvalConfig's fields, as given (None: the run's protocol or
    the default), then the evaluation; after a Ctrl-C, what it kept and the command that resumes it."""
    from rbctl.eval.imported import split_benchmarks
    from rbctl.eval.run import EvalInterrupted, eval_target, run_eval

    options = {k: v for k, v in ctx.params.items() if k not in ("model", "out", "step", "force", "debug") and v is not None}
    if "benchmarks" in options:
        options["benchmarks"] = split_benchmarks(options["benchmarks"])
    if "data_dir" in options:
        options["data_dir"] = str(options["data_dir"])
    check_out_folder(out, access=False)
    model, step, cfg, note = eval_target(model, step, options)
    try:
        run_eval(model, cfg, out_dir=out, step=step, note=note, force=force, precision=run_precision(cfg),
                 console=table_console())
    except KeyboardInterrupt as e:  # EvalInterrupted once sampling began: it says what was kept
        kept = str(e) if isinstance(e, EvalInterrupted) else "nothing sampled yet"
        typer.secho(f"interrupted: {kept}; resume with: {resume_command(ctx, drop=('force',))}", err=True)
        raise typer.Exit(130)


@app.command(cls=Command)
def ablate(
    ctx: typer.Context,
    sweep: Optional[str] = typer.Argument(None, metavar="SWEEP", help="Sweep file: a YAML file, or a shipped preset by name (`rbctl presets`). Default: ablate_fixpoint (the main job), then a report."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Sweep directory (default: runs/SWEEP_NAME, the sweep file's name without .yaml)."),
    jobs: Optional[int] = typer.Option(None, "--jobs", "-j", help="Runs in parallel (default: the sweep's `jobs`)."),
    force: bool = typer.Option(False, "--force", help="Reuse a sweep directory made by a different sweep (refused where any of its runs was made with another config: a changed sweep goes to another -o)."),
    no_report: bool = typer.Option(False, "--no-report", help="Do not write the report at the end."),
    launcher: str = typer.Option("local", "--launcher", help="local (worker processes here) or submitit (Slurm, or submitit's local mode; settings from the sweep's `launcher:` section)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display."),
    seed_offset: int = typer.Option(0, "--seed-offset", help="Add N to every seed: the same sweep on a disjoint set of seeds (default output runs/SWEEP_NAME_seedsN)."),
    arms: Optional[str] = typer.Option(None, "--arms", metavar="ARM,ARM", help="Run only these arms (comma-separated); the stated comparisons keep the pairs among them."),
    seeds: Optional[str] = typer.Option(None, "--seeds", metavar="SEEDS", help="Run these seeds instead of the sweep's: comma-separated, ranges allowed (0,1,2 or 0-5)."),
    set_: Optional[List[str]] = typer.Option(None, "--set", "-s", metavar="KEY=VALUE", help="Override a training-config value of every arm, after the arm's own overrides (repeatable)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Validate the sweep and every arm, print the plan (arms × seeds, each arm's difference from the base, the design's power, an estimated wall time); run nothing, write nothing."),
    debug: bool = DebugOpt,
) -> None:
    """Run a declared grid of arms × seeds, each run followed by its evaluation; resumable.

    Re-running on the same directory skips finished runs and resumes partial ones. With no SWEEP
    argument it runs the default sweep (configs/ablate_fixpoint.yaml, the main job: the fixpoint task,
    3 arms × 24 seeds from a shipped warm start) and writes its report. Ends with the time it took
    beside --dry-run's estimate, each arm's final held-out score (the mean over its seeds), the
    report's paths and the calls of the declared comparisons. A selection of a sweep (`--arms`,
    `--seeds`) runs in its directory. `--force` takes a directory of another sweep only where none of
    its runs was made with another config (a changed sweep is another sweep: give it another -o).

    Examples: `rbctl ablate ablate_quickstart --dry-run` (the plan, power and time);
    `rbctl ablate ablate_quickstart --arms grpo,grpo_budget --seeds 0,1 --set steps=40 -o runs/small`."""
    from rbctl.store.rundir import RUNS_ROOT
    from rbctl.sweep.ablate import DEFAULT_SWEEP

    path = sweep or DEFAULT_SWEEP
    sweep_dir = out or Path(RUNS_ROOT) / (Path(path).stem + (f"_seeds{seed_offset}" if seed_offset else ""))
    t0 = time.perf_counter()
    if launcher not in ("local", "submitit"):
        raise UserError(f"--launcher must be 'local' or 'submitit', got '{launcher}'")
    if jobs is not None and jobs < 1:
        raise UserError(f"--jobs must be at least 1 (runs in parallel), got {jobs}")
    selection = dict(arms=[a.strip() for a in arms.split(",") if a.strip()] if arms else None,
                     seeds=int_list(seeds, "--seeds") if seeds is not None else None, overrides=set_ or [])
    if dry_run:
        from rbctl.report import power
        from rbctl.sweep.plan import sweep_plan

        typer.echo(sweep_plan(path, sweep_dir, power, jobs=jobs, seed_offset=seed_offset, force=force, **selection), nl=False)
        return
    run_ablate(ctx, path, sweep_dir, t0, jobs=jobs, force=force, quiet=quiet, launcher=launcher,
               seed_offset=seed_offset, no_report=no_report, selection=selection)


@app.command(cls=Command)
def report(
    ctx: typer.Context,
    dirs: List[Path] = typer.Argument(..., metavar="DIR... | MANIFEST.yaml | STUDY.yaml", help="Run or sweep directories, runs manifests or folders of runs trained elsewhere (TRL, verl, W&B, MLflow, TensorBoard: docs/your_runs.md), or one study file."),
    out: Optional[Path] = typer.Option(
        None, "--out", "-o", help="Output folder [default: DIR/report for a single run or sweep directory, runs/NAME for a manifest, a folder of runs trained elsewhere or a study file; required for several inputs]."
    ),
    declare: bool = typer.Option(False, "--declare", help="With a study file: record its version in every sweep directory it names (study_history/), as reporting it does, and write no document: a study declared before its sweeps run. With runs manifests: record each one's version beside it (as its first report does), before its runs exist."),
    init_manifest: bool = typer.Option(False, "--init-manifest", help="Given one folder of runs another framework wrote (TRL, verl, W&B, MLflow, TensorBoard): write a runs manifest of the runs found, to edit (-o FILE; default runs_NAME.yaml here), and no report."),
    debug: bool = DebugOpt,
) -> None:
    """Comparison plots and tables from run and sweep directories, or a study's claims document.

    Writes OUT/report.md and OUT/report.html (first the question and the calls, then the details),
    OUT/summary.md and OUT/summary.tex (one page to paste into a paper), `OUT/tables/*.{csv,md,tex}`,
    `OUT/figures/*.{png,svg}` and `OUT/data/*.csv`; prints the final scores, the report's paths and, last, the
    calls of the declared comparisons. Given a study file (configs/study_quickstart.yaml), writes OUT/claims.md: each
    claim of the study tested on its sweeps, after recording the study file's version in each sweep directory it
    names (`--declare`: only that), and prints each claim's call."""
    from rbctl.report.study import is_study_file, load_study
    from rbctl.report.study.claims_document import write_study_report
    from rbctl.report.render.report import build_report
    from rbctl.report.render.terminal import study_claims_table

    import shlex

    from rbctl.report.declaration import declare_study_file

    if not init_manifest:
        check_out_folder(out)
    if len(dirs) == 1 and is_study_file(dirs[0]):
        written = declare_study_file(dirs[0], create=declare)  # recorded before any of its results is read
        if declare:
            typer.echo("\n".join(f"declared: {p}" for p in written) or f"{dirs[0]}: this version is recorded already")
            return
        study = load_study(dirs[0])
        typer.echo(f"claims: {write_study_report(study, out, command=shlex.join(['rbctl', *typed_argv(ctx)]))}")
        table = study_claims_table(study)
        if table is not None:  # the answer last: each claim's call
            table_console().print(table)
        return
    from rbctl.report.sources import is_manifest
    from rbctl.report.sources.declare import declare_manifests

    if init_manifest:
        from rbctl.report.sources.init_manifest import write_init_manifest

        if len(dirs) != 1:
            raise UserError("--init-manifest takes one folder of runs")
        written = write_init_manifest(dirs[0], out)
        typer.echo(f"wrote {written}: name each run's arm and seed, say what each arm is, state the comparisons, "
                   f"then `rbctl report {written}`")
        return
    if declare and not all(is_manifest(d) for d in dirs):
        raise UserError("--declare records a study file's version, or runs manifests': pass one study file (STUDY.yaml) "
                        "or runs manifests, not run or sweep directories")
    declared = declare_manifests(dirs)  # a manifest's first report is its declaration, before its results are read
    if declare:
        typer.echo("\n".join(declared))
        return
    report_end(*build_report(dirs, out))


@app.command(cls=Command)
def presets(debug: bool = DebugOpt) -> None:
    """List the shipped configs: each preset's name, the command that runs it, and what it is for.

    A preset's name goes anywhere a config path goes: `rbctl train fixpoint -o runs/first`,
    `rbctl ablate ablate_quickstart --dry-run`, `rbctl config quickstart`, a sweep file's `base:`."""
    from rbctl.config.presets import preset_names, preset_summary, presets_dir

    rows = [preset_summary(name) for name in preset_names()]
    width = max(len(name) for name, _, _ in rows)
    typer.echo(f"presets in {presets_dir()} (run one with its command: rbctl train NAME -o RUN, rbctl ablate NAME):")
    for name, command, purpose in rows:
        typer.echo(f"  {name:<{width}}  {command:<6}  {purpose}")


@app.command("config", cls=Command)
def config_(
    config: str = typer.Argument(..., metavar="CONFIG", help="A training config or sweep file: a YAML file, or a shipped preset by name."),
    set_: Optional[List[str]] = SetOpt,
    arm: Optional[str] = typer.Option(None, "--arm", help="Of a sweep file: print this arm's resolved training config."),
    debug: bool = DebugOpt,
) -> None:
    """Print a config resolved: every default filled in, `--set` applied, validated (what a run records as RUN_DIR/config.yaml).

    A sweep file prints as resolved (its defaults filled in); with `--arm ARM`, that arm's training
    config (the base, the sweep's `set:`, the arm's overrides, then `--set`). Examples:
    `rbctl config fixpoint`, `rbctl config quickstart --set algo.budget=1`,
    `rbctl config ablate_quickstart --arm grpo_budget`."""
    from rbctl.config.base import dump_config, read_yaml, validate
    from rbctl.config.presets import is_sweep, resolve_config

    path = resolve_config(config)
    if not is_sweep(read_yaml(path)):
        if arm is not None:
            raise UserError(f"--arm applies to a sweep file; {path} is a training config")
        from rbctl.config.train import load_train_config

        typer.echo(f"# {path}, resolved (rbctl train {config} -o RUN)")
        typer.echo(dump_config(load_train_config(path, set_ or [])), nl=False)
        return
    from rbctl.sweep.ablate import load_sweep

    sweep, configs = load_sweep(path, overrides=set_ or [])
    if arm is None:
        from rbctl.config.sweep import SweepConfig

        typer.echo(f"# {path}, resolved (rbctl ablate {config}; an arm's training config: --arm ARM)")
        typer.echo(dump_config(validate(SweepConfig, read_yaml(path), str(path))), nl=False)
        return
    if arm not in configs:
        raise UserError(f"{path} has no arm '{arm}' (its arms: {', '.join(configs)})")
    typer.echo(f"# {path}, arm '{arm}', resolved")
    typer.echo(dump_config(configs[arm]), nl=False)


def run(argv: Optional[List[str]] = None) -> int:
    """Run the CLI and return its exit code: 0 ok, 2 bad input (one line on stderr; with --debug the
    traceback first, same exit code; a write refused for permissions is one too), 1 failed runs."""
    try:  # typer >= 0.20 vendors click as typer._click
        from typer._click import exceptions as click_exc
    except ImportError:  # pragma: no cover
        from click import exceptions as click_exc

    try:
        from typer.exceptions import Abort as _Abort
    except ImportError:  # pragma: no cover
        _Abort = click_exc.Abort
    DEBUG["on"] = False
    try:  # the commands find the arguments as typed in `obj` (rbctl.cli.options.typed_argv)
        rc = app(args=argv, standalone_mode=False, obj={"argv": sys.argv[1:] if argv is None else list(argv)})
        return rc if isinstance(rc, int) else 0
    except UserError as e:
        if DEBUG["on"]:  # --debug shows where it came from; the outcome (exit code 2) is the same
            import traceback

            traceback.print_exc()
        typer.secho(f"error: {e}", err=True, fg=typer.colors.RED)
        return 2
    except click_exc.ClickException as e:  # usage errors: click's own one-line message
        e.show()
        return 2
    except _Abort:
        return 1
    except OSError as e:  # a full or failing disk, a denied write: what and where, in one line (written files are never torn)
        if DEBUG["on"]:
            import traceback

            traceback.print_exc()
        from rbctl.store.atomic import os_error_advice

        where = f"{e.filename}: " if e.filename else ""
        denied = e.errno in (errno.EACCES, errno.EPERM, errno.EROFS)  # a path the user chose: bad input, not a fault
        typer.secho(f"error: {where}{e.strerror or e} ({errno.errorcode.get(e.errno, e.errno)}); "
                    f"{os_error_advice(e.errno)}" + ("" if denied else ", then rerun the same command to resume"),
                    err=True, fg=typer.colors.RED)
        return 2 if denied else 1
    except KeyboardInterrupt:
        typer.secho("interrupted; completed steps and checkpoints are kept on disk", err=True)
        return 130


def main() -> None:
    quiet_libraries()
    sys.exit(run())


if __name__ == "__main__":
    main()
