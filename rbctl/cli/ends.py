"""What the commands do after parsing their options and print at their end: a sweep run to its end
(`run_ablate`, then `ablate_end`), a report's end (`report_end`: the calls last), the output folder's
check shared by every command that writes one, and a run's precision for its evaluation."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer

from rbctl.cli.options import resume_command
from rbctl.console import table_console
from rbctl.errors import UserError


def run_ablate(ctx: typer.Context, path: str, sweep_dir: Path, t0: float, *, jobs: Optional[int], force: bool,
               quiet: bool, launcher: str, seed_offset: int, no_report: bool, selection: dict) -> None:
    """`rbctl ablate` past its dry run: the sweep, then `ablate_end`; after a Ctrl-C, what is done and the
    command that finishes it (exit 130)."""
    from rbctl.sweep.ablate import run_sweep, summarize_state
    from rbctl.sweep.local import Interrupted
    from rbctl.sweep.plan import sweep_estimate

    estimate = sweep_estimate(path, sweep_dir, jobs, seed_offset, **selection)  # what --dry-run states, for the end
    try:
        state = run_sweep(path, sweep_dir, jobs=jobs, force=force, progress=not quiet, launcher=launcher,
                          seed_offset=seed_offset, **selection)
    except (Interrupted, KeyboardInterrupt):
        from rbctl.store.read import read_sweep_state
        from rbctl.store.rundir import SWEEP_STATE

        done, total, _ = summarize_state({"runs": read_sweep_state(sweep_dir)})
        again = resume_command(ctx, drop=("force", "no_report", "quiet"), pin={"out": sweep_dir})
        typer.secho(f"interrupted: {done}/{total} runs done, the rest recorded in {sweep_dir / SWEEP_STATE} "
                    f"(partial runs keep their checkpoints); finish with: {again}", err=True)
        raise typer.Exit(130)
    ablate_end(sweep_dir, state, time.perf_counter() - t0, estimate, no_report)


def ablate_end(sweep_dir: Path, state: dict, seconds: float, estimate, no_report: bool) -> None:
    """What `rbctl ablate` prints when its runs are over: the time beside --dry-run's estimate, each arm's
    final held-out score, the failed runs, then the report's end (`report_end`: the calls last); exit 1
    where a run failed."""
    from rbctl.store.rundir import REPORT_DIR
    from rbctl.sweep.ablate import arm_final_lines, summarize_state
    from rbctl.sweep.plan import time_line

    done, total, failed = summarize_state(state)
    typer.echo(f"sweep finished: {done}/{total} runs done in {seconds / 60:.1f} min -> {sweep_dir}")
    typer.echo(time_line(seconds, estimate))
    for line in arm_final_lines(sweep_dir, state):
        typer.echo(line)
    for key, err in failed:
        typer.secho(f"  failed: {key}: {err}", fg=typer.colors.RED)
    if no_report:
        typer.echo(f"calls: not computed (--no-report); rbctl report {sweep_dir} prints them")
    else:
        from rbctl.report.render.report import build_report

        report_end(*build_report([sweep_dir], sweep_dir / REPORT_DIR), scores=False)
    if failed:
        raise typer.Exit(1)


def report_end(path: Path, data, scores: bool = True) -> None:
    """What `rbctl report` and `rbctl ablate` print after writing a report: the final scores (`scores`),
    what could not be scored, where the report and its summary are, and the calls, last."""
    from rbctl.report import final_scores_table
    from rbctl.report.render.report import incomplete_lines
    from rbctl.report.render.terminal import calls_table, report_paths

    console = table_console()  # piped, a table keeps its width (not Rich's 80 columns)
    table = final_scores_table(path.parent) if scores else None
    if table is not None:
        console.print(table)
    for line in incomplete_lines(data):  # a run the report could not score is said here, not only in report.md
        typer.secho(line, fg=typer.colors.YELLOW)
    from rbctl.report.render.looks import decided_lines, next_lines

    for line in decided_lines(data) + next_lines(data):  # a sequential design: each comparison's look, what to run next
        typer.echo(line)
    for line in report_paths(path):
        typer.echo(line)
    table = calls_table(data)
    if table is not None:
        console.print(table)


def check_out_folder(out: Optional[Path], access: bool = True) -> None:
    """-o OUT of a command that writes a folder: a file on its path is the same one-line error (exit 2)
    in report, eval, train and ablate; ``access``: so is a folder it cannot write in (eval says that
    itself, with the errno, before the first sample)."""
    from rbctl.train.preflight import writable_problem

    problem = writable_problem(out) if out is not None else None
    if problem is not None and (access or problem.endswith("is a file, not a folder")):
        raise UserError(problem)



def run_precision(cfg):
    """A run's training precision (its autocast while generating), for an evaluation of a run; else None."""
    if cfg.precision is None:
        return None
    from rbctl.rollout.models import resolve_device
    from rbctl.train.precision import resolve_precision

    return resolve_precision(cfg.precision, resolve_device(cfg.device))
