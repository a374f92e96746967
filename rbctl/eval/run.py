"""`rbctl eval MODEL`: load a model (hub id, folder, GGUF file, run directory, or `builtin`),
evaluate it with `rbctl.eval.pipeline`, print the table, say where the results are."""

from __future__ import annotations

from pathlib import Path

from rbctl.config.eval import BUILTIN_MAX_NEW_TOKENS, EvalConfig
from rbctl.errors import UserError
from rbctl.eval.pipeline import evaluate_policy, load_problems, sanitize
from rbctl.rollout.factory import engine_class
from rbctl.store.rundir import final_eval_dir, is_run_dir


def default_out_dir(model: str, step: int | None) -> Path:
    """``RUN_DIR/eval/step_XXXXXX`` for a run directory (where `rbctl report` looks), else
    ``runs/eval/<model name>``."""
    path = Path(model).expanduser()
    if is_run_dir(path):
        if step is None:
            raise UserError(f"cannot tell the checkpoint step of {model}; pass --out")
        return final_eval_dir(path, step)
    name = path.name.removesuffix(".gguf") if path.exists() else model
    return Path("runs") / "eval" / sanitize(name.replace("/", "_"))


def results_table(results: dict[str, dict]):
    """A rich Table, one column per benchmark and one row per metric (percent, 95% interval)."""
    from rich.table import Table

    table = Table(title="rbctl eval: % correct [95% bootstrap CI over problems]")
    table.add_column("metric")
    for name in results:
        table.add_column(name, justify="right")
    table.add_row("problems × n", *(f"{s['num_problems']} × {s['n']}" for s in results.values()))
    metric_names = dict.fromkeys(m for s in results.values() for m in s["metrics"])
    for m in metric_names:
        cells = []
        for s in results.values():
            v = s["metrics"].get(m)
            cells.append(f"{100 * v['value']:.1f} [{100 * v['ci_low']:.1f}, {100 * v['ci_high']:.1f}]" if v else "-")
        table.add_row(m, *cells)
    return table


def run_eval(
    model: str, cfg: EvalConfig, out_dir: Path | None = None, step: int | None = None, console=None
) -> dict[str, dict]:
    """Load ``model`` (hub id, dir, GGUF file, run directory, or ``builtin``) and evaluate it.

    For a run directory, ``step`` picks the checkpoint (default: the newest whose files verify as
    they are read; a corrupted one is skipped with a warning) and the default ``out_dir`` is
    ``RUN_DIR/eval/step_XXXXXX``. The checkpoint is chosen once, here, and handed to the loader.
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from rbctl.rollout.models import load_first_intact, load_policy, run_checkpoints
    from rbctl.tasks.builtin import task_spec_of

    console = console or Console()
    engine_class(cfg.engine)
    path = Path(model).expanduser()
    candidates = run_checkpoints(path, step, log=console.print) if model != "builtin" and is_run_dir(path) else []
    # the task a built-in policy records (a small marker file), so that bad benchmark names and data
    # fail before the model loads
    policy_dir = candidates[0].model_dir if candidates else path if model != "builtin" and path.is_dir() else None
    task_spec = task_spec_of(policy_dir) if policy_dir is not None else None
    if task_spec is not None and cfg.max_new_tokens is None:  # room for the task's longest answer (the maze's)
        from rbctl.tasks.builtin import module_of

        longest = module_of(task_spec).max_answer_tokens(task_spec)
        cfg = cfg.model_copy(update={"max_new_tokens": max(BUILTIN_MAX_NEW_TOKENS, longest)})
    problems = load_problems(cfg, task_spec)
    opts = dict(device=cfg.device, dtype=cfg.dtype, log=console.print)
    ckpt_step = None
    if candidates:
        ck, policy = load_first_intact(candidates, **opts)
        ckpt_step = ck.step
    else:
        policy = load_policy(model, **opts)
    out_dir = Path(out_dir) if out_dir is not None else default_out_dir(model, ckpt_step)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        results = evaluate_policy(policy, cfg, out_dir, progress=progress, step=ckpt_step, problems=problems)
    console.print(results_table(results))
    console.print(f"results in {out_dir}")
    return results
