"""The `rbctl` command line. Each command parses options, builds a validated config and calls one
library function; no algorithm lives here."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from rbctl.errors import UserError

app = typer.Typer(
    help="rbctl: RL training of LLM reasoning with reward budgeting — train, eval, ablate, report.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

_DEBUG = {"on": False}


@app.callback()
def _root(debug: bool = typer.Option(False, "--debug", help="Show full tracebacks for errors.")) -> None:
    _DEBUG["on"] = debug


def _quiet_libraries() -> None:
    """Progress bars and advice from transformers/datasets would drown rbctl's own display."""
    import os
    import warnings

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    warnings.filterwarnings("ignore", category=UserWarning)
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    except ImportError:
        pass


SetOpt = typer.Option(None, "--set", "-s", help="Override a config value: key.path=value (repeatable).")


@app.command()
def train(
    config: Path = typer.Argument(..., help="Training config YAML (e.g. configs/quickstart.yaml)."),
    out: Path = typer.Option(..., "--out", "-o", help="Run directory; an existing one is resumed."),
    set_: Optional[List[str]] = SetOpt,
    force: bool = typer.Option(False, "--force", help="Use a run directory whose config differs."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
) -> None:
    """Train a policy with a GRPO-family estimator, optionally with reward budgeting and an entropy bonus.

    Writes RUN_DIR/config.yaml, provenance.json, metrics.jsonl (one line per step), samples.jsonl,
    eval.jsonl (periodic held-out evaluation) and checkpoints/. Re-running on the same RUN_DIR
    resumes from its last checkpoint."""
    from rbctl.config import load_train_config
    from rbctl.trainer import train as run_training

    cfg = load_train_config(config, set_ or [])
    run_training(cfg, out, force=force, progress=not quiet)


@app.command("eval")
def eval_(
    model: str = typer.Argument(..., help="Hub id, local model dir, GGUF file, or rbctl run directory."),
) -> None:
    """Evaluate a model on AMC23, AIME24, AIME25, GSM8K or the built-in task."""
    raise UserError("rbctl eval is not implemented yet")


@app.command()
def ablate(
    sweep: Optional[Path] = typer.Argument(None, help="Sweep YAML; default configs/ablate_quickstart.yaml."),
) -> None:
    """Run a declared grid of arms × seeds (and evaluate each run), resumable."""
    raise UserError("rbctl ablate is not implemented yet")


@app.command()
def report(
    dirs: List[Path] = typer.Argument(..., help="Run or sweep directories."),
) -> None:
    """Comparison plots and tables from run and sweep directories."""
    raise UserError("rbctl report is not implemented yet")


def main() -> None:
    _quiet_libraries()
    try:
        app(standalone_mode=False)
    except UserError as e:
        if _DEBUG["on"]:
            raise
        typer.secho(f"error: {e}", err=True, fg=typer.colors.RED)
        sys.exit(2)
    except KeyboardInterrupt:
        typer.secho("interrupted; completed steps and checkpoints are kept on disk", err=True)
        sys.exit(130)
    except SystemExit:
        raise
    except Exception as e:  # click usage errors are handled below, everything else is a bug: show it
        import click

        if isinstance(e, click.exceptions.ClickException):
            e.show()
            sys.exit(2)
        if isinstance(e, (click.exceptions.Abort,)):
            sys.exit(1)
        raise


if __name__ == "__main__":
    main()
