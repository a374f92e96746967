"""`rbctl eval MODEL`: choose the protocol (a run directory's own, else the published defaults),
load a model (hub id, folder, GGUF file, run directory, a checkpoint folder of a run, or `builtin`),
evaluate it with `rbctl.eval.pipeline`, print the table with the protocol it used and what to doubt,
say where the results are.

A checkpoint folder inside a run (``RUN/checkpoints/step_N`` or its ``model/``) is evaluated as the
run at step N (`eval_target`): the run's task (its config's ``data.builtin``, whose test split and
grader `builtin` names), protocol, seed, threads, device and precision, and the run's folders, so
that it gives the run's own result, through the same engine path. Results are kept per protocol
(`rbctl.eval.protocols`): ``RUN/eval/step_N/protocol_X/BENCH/``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rbctl.console import PlainProgress
from rbctl.config.eval import BUILTIN_MAX_NEW_TOKENS, DEFAULT_MAX_NEW_TOKENS, EvalConfig, build_config
from rbctl.errors import UserError
from rbctl.eval import protocols
from rbctl.eval.imported import imported_checkpoint, where_line
from rbctl.eval.pipeline import evaluate_policy, load_problems, protocol_text, sanitize, summary_warnings
from rbctl.eval.reuse import existing_results, kept_text, refuse_other_protocol
from rbctl.rollout.factory import engine_class
from rbctl.store.atomic import check_writable
from rbctl.store.rundir import (BUILTIN_MARKER, CHECKPOINTS, CONFIG, EVAL_DIR, MODEL, RUNS_ROOT, final_eval_dir,
                                is_run_dir, protocol_dir_name, protocol_eval_dir, step_of)

# What `rbctl eval` takes from a run directory's training config (its periodic evaluation, `for_run`)
# when the command line does not say otherwise: so that the score and the run's curve are measured
# alike, on the same problems (`limit`: the curve's subset; --limit overrides it).
RUN_PROTOCOL_KEYS = ("benchmarks", "n", "temperature", "top_p", "max_new_tokens", "template", "instruction", "extraction", "limit")
# ... and how the run computed: its seed, torch threads (torch's default, one thread per core,
# spins on a busy machine: `rbctl eval` of the fixpoint run took 34 s against 14 s at the run's 1
# thread), device, Linear kernel, and precision (`run_settings`).
RUN_SETTING_KEYS = ("seed", "threads", "device", "cpu_linear", "dtype", "precision")
PUBLISHED_DEFAULTS = ("greedy at n=1, else temperature 0.6 and top-p 0.95 (DeepSeek-R1); "
                      f"at most {DEFAULT_MAX_NEW_TOKENS} new tokens ({BUILTIN_MAX_NEW_TOKENS} for the built-in policy)")


def eval_config(model: str, options: dict) -> tuple[EvalConfig, str]:
    """The config of `rbctl eval MODEL` given `options` (only those set on the command line), and a
    line saying where the rest came from. A run directory with a training config is evaluated with
    its periodic-evaluation protocol (`RUN_PROTOCOL_KEYS`) where no option says otherwise; anything
    else with the published defaults (`EvalConfig`)."""
    from rbctl.rollout.models import expand_model_name

    path = Path(expand_model_name(model)).expanduser()
    cfg_path = path / CONFIG
    if model == "builtin" or not is_run_dir(path) or not cfg_path.is_file():
        return build_config(**options), f"protocol: the published defaults where not given: {PUBLISHED_DEFAULTS}"
    from rbctl.config.train import for_run, read_run_config

    try:
        run_cfg = read_run_config(cfg_path)
    except UserError as e:
        first = str(e).splitlines()[0]
        return build_config(**options), f"protocol: the published defaults where not given ({cfg_path} unreadable: {first})"
    periodic = for_run(run_cfg.eval, run_cfg)
    taken = [k for k in RUN_PROTOCOL_KEYS if k not in options]
    settings = {k: v for k, v in run_settings(run_cfg).items() if k not in options}
    if "dtype" in options:  # weights in the dtype asked for, without the run's autocast
        settings.pop("precision", None)
    cfg = build_config(**{k: getattr(periodic, k) for k in taken}, **settings, **options)
    note = (f"protocol: the run's periodic evaluation ({cfg_path}, eval:) for {', '.join(taken)}; "
            "options given on the command line override it") if taken else "protocol: as given on the command line"
    if settings:
        note += "\n" + "settings: the run's " + ", ".join(f"{k} {v}" for k, v in settings.items())
    return cfg, note


def eval_target(model: str, step: int | None, options: dict) -> tuple[str, int | None, EvalConfig, str]:
    """(model, step, config, note) of `rbctl eval MODEL [--step N]` given `options`: a checkpoint
    folder inside a run is the run at that step (`enclosing_run`), a TRL or verl checkpoint the model
    folder it holds (`rbctl.eval.imported`), then `eval_config`."""
    model, step, where = enclosing_run(model, step)
    ck = imported_checkpoint(Path(model)) if where is None and model != "builtin" else None
    if ck is not None:
        if step is not None and step != ck.step:
            raise UserError(f"{model} is checkpoint {ck.step} of a {ck.framework} run; --step {step} names another (drop --step)")
        model, step, where = str(ck.model), ck.step, where_line(ck)
    cfg, note = eval_config(model, options)
    return model, step, cfg, f"{where}\n{note}" if where else note


def enclosing_run(model: str, step: int | None) -> tuple[str, int | None, str | None]:
    """A checkpoint folder inside a run directory (``RUN/checkpoints/step_N`` or its ``model/``) as
    (RUN, N, a line saying so); anything else as it is given (no line). A --step naming another
    checkpoint than the folder's is a one-line error."""
    path = Path(model).expanduser()
    if model == "builtin" or not path.is_dir():
        return model, step, None
    ck = path.parent if path.name == MODEL else path
    n, run = step_of(ck.name), ck.parent.parent
    if n is None or ck.parent.name != CHECKPOINTS or not is_run_dir(run):
        return model, step, None
    if step is not None and step != n:
        raise UserError(f"{model} is checkpoint {n} of run {run}; --step {step} names another (drop --step)")
    return str(run), n, f"{model}: checkpoint {n} of run {run}, evaluated as the run's (its task, protocol and settings)"


def _run_config(run_dir: Path):
    """The run's validated training config, or None where it has none or it does not validate."""
    from rbctl.config.train import read_run_config

    try:
        return read_run_config(Path(run_dir) / CONFIG) if (Path(run_dir) / CONFIG).is_file() else None
    except UserError:
        return None


def run_task(run_dir: Path | None, policy_dir: Path | None, benchmarks: list[str]) -> tuple:
    """(the built-in task's `TaskSpec` a policy is evaluated on, whose test split is `builtin`; the
    task kind of the policy's own prompt format where it is a built-in policy), each or both None.
    The task: a run's own (its config's ``data.builtin``: what its periodic evaluation used), else
    the one its folder's marker records. The policy is built in where its folder has the marker or
    its run trained `builtin` (a checkpoint that lost its marker). A checkpoint whose marker names
    another task than its run's config, or whose task cannot be told where `builtin` is asked for
    (no readable config, no marker), is refused in one line: another task's test split and grader
    would measure something else."""
    from rbctl.tasks.builtin import specs_from_config, task_spec_of

    marked = task_spec_of(policy_dir) if policy_dir is not None else None
    has_marker = policy_dir is not None and (Path(policy_dir) / BUILTIN_MARKER).is_file()
    run_cfg = _run_config(run_dir) if run_dir is not None else None
    if run_cfg is not None and run_cfg.data.source == "builtin":
        spec = specs_from_config(run_cfg.data.builtin)[0]
        if marked is not None and marked.kind != spec.kind:
            raise UserError(f"{policy_dir}/{BUILTIN_MARKER} records the {marked.kind} task, its run's "
                            f"{Path(run_dir) / CONFIG} the {spec.kind} task: cannot tell which to evaluate")
        return spec, spec.kind if has_marker or run_cfg.model.name == "builtin" else None
    if run_dir is not None and run_cfg is None and "builtin" in benchmarks and policy_dir is not None and not has_marker:
        raise UserError(f"benchmark builtin: cannot tell which built-in task {policy_dir} was trained on "
                        f"({Path(run_dir) / CONFIG} is missing or invalid and it has no {BUILTIN_MARKER}); "
                        f"restore the run's {CONFIG} or name the benchmarks (-b)")
    return marked, marked.kind if marked is not None else None


def run_settings(run_cfg) -> dict:
    """How a run computed, as `rbctl eval` options (`RUN_SETTING_KEYS`): its seed, threads, device,
    Linear kernel and precision. The weights load as the trainer kept them: float32 master weights
    (every precision but bf16-pure; a LoRA run's merged base in model.dtype), generation under the
    precision's autocast (bf16-mixed on CUDA), as the run's own evaluations ran."""
    m = run_cfg.model
    master_fp32 = m.precision != "bf16-pure" and m.lora is None
    return {"seed": run_cfg.seed, "threads": run_cfg.threads, "device": m.device, "cpu_linear": m.cpu_linear,
            "dtype": "float32" if master_fp32 else m.dtype, "precision": m.precision}


def check_model(model: str) -> None:
    """Refuse, in one line, a MODEL that names nothing: a missing local path (one that starts with
    ``.``, ``/`` or ``~``, has more than one ``/``, or lies in an existing folder), or a Hub id that is
    neither in the local Hugging Face cache nor reachable. Runs before the benchmarks' data is looked
    for, so that a wrong MODEL is reported as such and not as the benchmarks' missing data."""
    from rbctl.rollout.models import resolve_source

    path = Path(model).expanduser()
    if model == "builtin":
        return
    if path.exists():
        if not is_run_dir(path):  # a run directory's checkpoints are chosen once, by run_eval
            resolve_source(model)  # a file that is no GGUF, a folder that is no model nor run directory
        return
    first = Path(model.split("/")[0]).expanduser()
    if model.startswith((".", "/", "~")) or model.count("/") > 1 or ("/" in model and first.is_dir()):
        raise UserError(f"model {model}: not a run directory, a model directory or a GGUF file ({path} does not exist)")
    from rbctl.tasks.benchmarks import hf_offline, hub_reachable

    if _hub_cached(model) or (not hf_offline() and hub_reachable()):
        return
    raise UserError(f"model {model}: not a local path, a run directory or a model in the Hugging Face cache, "
                    "and the Hub is unreachable (give a run directory, a model directory or a GGUF file)")


def _hub_cached(repo_id: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except Exception:  # an id the Hub library refuses (bad characters): not cached
        return False


class EvalInterrupted(KeyboardInterrupt):
    """Ctrl-C during `run_eval`; its text says what was kept on disk."""


def samples_bytes(cfg: EvalConfig, problems: dict) -> int:
    """A generous estimate of the bytes an evaluation writes: every sample's line at up to 8 bytes a
    token of text, 512 bytes of fields, and 1 MiB of summaries."""
    tokens = cfg.max_new_tokens or DEFAULT_MAX_NEW_TOKENS
    return sum(len(p) for p in problems.values()) * cfg.n * (8 * tokens + 512) + (1 << 20)


def default_out_dir(model: str, step: int | None, protocol: dict) -> Path:
    """The folder of `protocol` (`rbctl.store.rundir.protocol_eval_dir`) in ``RUN_DIR/eval/step_XXXXXX``
    for a run directory, else in ``runs/eval/<model name>``."""
    path = Path(model).expanduser()
    if is_run_dir(path):
        if step is None:
            raise UserError(f"cannot tell the checkpoint step of {model}; pass --out")
        return protocol_eval_dir(final_eval_dir(path, step), protocol)
    ck = imported_checkpoint(path) if model != "builtin" else None
    if ck is not None:  # into the run's checkpoints folder, where its manifest's report reads it
        return protocol_eval_dir(final_eval_dir(ck.folder, ck.step), protocol)
    name = path.name.removesuffix(".gguf") if path.exists() else model
    return protocol_eval_dir(Path(RUNS_ROOT) / EVAL_DIR / sanitize(name.replace("/", "_")), protocol)


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
    model: str, cfg: EvalConfig, out_dir: Path | None = None, step: int | None = None, console=None,
    note: str | None = None, force: bool = False, precision=None,
) -> dict[str, dict]:
    """Load ``model`` (hub id, dir, GGUF file, run directory, or ``builtin``) and evaluate it.

    For a run directory, ``step`` picks the checkpoint (default: the newest whose files verify as
    they are read; a corrupted one is skipped with a warning) and the default ``out_dir`` is the
    protocol's folder ``RUN_DIR/eval/step_XXXXXX/protocol_X`` (`default_out_dir`; a model outside a
    run: ``runs/eval/NAME/protocol_X``), with its protocol.json (`rbctl.eval.protocols.record`).
    The checkpoint is chosen once, here, and handed to the loader; the task is the run's
    (`run_task`). ``note``: where the protocol came from (`eval_config`), printed once the
    benchmarks are known to exist; then, for a run, whether this is its own declared protocol or a
    side evaluation. After the table: the protocol of each score and a warning per benchmark whose
    samples were often cut off or answerless (`summary_warnings`).

    A run directory evaluated into its default folder reuses, and says so, each benchmark the run
    already holds with the same protocol at that step (`existing_results`: its training's own
    evaluation, or an earlier one); ``force`` evaluates every benchmark again, from the start. An
    ``out_dir`` given that holds another protocol's complete result of a benchmark is refused
    before the model loads (``force``: replaced).
    ``precision``: a run's training precision (`rbctl.train.precision.Precision` of ``cfg.precision``,
    resolved by the caller: training is a layer above evaluation), under whose autocast generation
    runs; None: none.
    """
    import torch
    from rich.console import Console

    from rbctl.rollout.models import expand_model_name

    model = expand_model_name(model)  # a package's file (pkg:PACKAGE/FILE): its path here
    console = console or Console()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    engine_class(cfg.engine)
    t = _target(model, cfg, step, console)
    if out_dir is not None:  # a folder that cannot take the results fails before the model loads, too
        check_writable(out_dir, samples_bytes(t.cfg, t.problems))
        if not force:
            refuse_other_protocol(Path(out_dir), t.problems, t.protocol)
    if note:
        console.print(note, highlight=False)
    record = _protocol_record(t.path, t.in_run, t.protocol, t.builtin)
    if t.in_run and (t.path / CONFIG).is_file():
        console.print(_role_line(record, t.cfg.benchmarks), highlight=False)
    reused = _reused(t, console) if t.candidates and out_dir is None and not force else {}
    results = {name: summary for name, (summary, _) in reused.items()}
    todo = {name: probs for name, probs in t.problems.items() if name not in reused}
    if todo:
        out_dir, evaluated = _evaluate_loaded(model, t.cfg, out_dir, t.candidates, todo, console, not force, precision,
                                              t.protocol, record, t.kind)
        results.update(evaluated)
    results = {name: results[name] for name in t.problems}  # in the benchmarks' order
    folders = [where.parent for _, where in reused.values()] + ([Path(out_dir)] if todo else [])
    _print_results(console, results, folders)
    return results


@dataclass(frozen=True)
class _Target:
    """What `run_eval` evaluates, settled before the model loads."""

    path: Path  # the model's path (meaningless for a Hub id or `builtin`)
    in_run: bool  # a run directory
    candidates: list  # its checkpoints, newest first (`run_checkpoints`); [] outside a run
    kind: str | None  # the task kind of a built-in policy's prompt format (`run_task`)
    builtin: bool  # a built-in policy
    cfg: EvalConfig  # with the token limit a built-in task's longest answer needs
    problems: dict  # {benchmark: problems} (`load_problems`)
    protocol: dict  # `rbctl.eval.protocols.identity`


def _target(model: str, cfg: EvalConfig, step: int | None, console) -> _Target:
    """The `_Target` of `run_eval`: bad model names, benchmark names and data fail here, before the
    model loads. A run's checkpoint is chosen once, here."""
    from rbctl.store.checkpoint import run_checkpoints

    check_model(model)
    path = Path(model).expanduser()
    in_run = model != "builtin" and is_run_dir(path)
    candidates = run_checkpoints(path, step, log=console.print) if in_run else []
    # the task of a built-in policy (its run's, or a small marker file), so that bad benchmark names
    # and data fail before the model loads
    policy_dir = candidates[0].model_dir if candidates else path if model != "builtin" and path.is_dir() else None
    task_spec, kind = run_task(path if in_run else None, policy_dir, cfg.benchmarks)
    builtin = model == "builtin" or kind is not None or (policy_dir is not None and (policy_dir / BUILTIN_MARKER).is_file())
    if builtin and cfg.max_new_tokens is None:  # room for the task's longest answer (the maze's)
        from rbctl.tasks.builtin import module_of

        longest = module_of(task_spec).max_answer_tokens(task_spec) if task_spec is not None else 0
        cfg = cfg.model_copy(update={"max_new_tokens": max(BUILTIN_MAX_NEW_TOKENS, longest)})
    problems = load_problems(cfg, task_spec)
    return _Target(path, in_run, candidates, kind, builtin, cfg, problems, protocols.identity(cfg, builtin))


def _reused(t: _Target, console) -> dict[str, tuple[dict, Path]]:
    """The results the run already holds under this protocol at the chosen checkpoint
    (`existing_results`), each said to be reused."""
    step = t.candidates[0].step
    reused = existing_results(t.path, step, t.cfg, t.problems, t.protocol)
    for name, (_, where) in reused.items():
        console.print(f"{name}: the run already holds this protocol's result for step {step} "
                      f"({where}): reused; --force evaluates again", highlight=False)
    return reused


def _print_results(console, results: dict[str, dict], folders: list[Path]) -> None:
    """The table, the protocol that measured each score, the warnings, and where the results are."""
    from rich.markup import escape

    console.print(results_table(results))
    for line in dict.fromkeys(protocol_text(s) for s in results.values()):  # what measured the scores above
        console.print(f"protocol: {line}", highlight=False)
    for summary in results.values():
        for line in summary_warnings(summary):
            console.print(f"[bold yellow]warning:[/] {escape(line)}", highlight=False)
    console.print(f"results in {', '.join(dict.fromkeys(map(str, folders)))}")


def _protocol_record(path: Path, in_run: bool, protocol: dict, builtin: bool) -> dict:
    """protocol.json of this evaluation's folder: whether `protocol` is the run's own declared one
    (the protocol `eval_config` takes from the run with no option given)."""
    declared = None
    if in_run and (path / CONFIG).is_file():
        own_cfg, _ = eval_config(str(path), {})
        if not own_cfg.max_new_tokens and builtin:
            own_cfg = own_cfg.model_copy(update={"max_new_tokens": protocol["max_new_tokens"]})
        declared = own_cfg if protocols.identity(own_cfg, builtin) == protocol else None
    return protocols.record(protocol, protocol_dir_name(protocol), declared is not None,
                            declared.benchmarks if declared is not None else [])


def _role_line(record: dict, benchmarks: list[str]) -> str:
    """Whether an evaluation of a run is its own declared one (what the report scores at its last
    step) or a side evaluation (kept beside it, never its final score)."""
    own = [b for b in benchmarks if b in record["run_benchmarks"]]
    side = [b for b in benchmarks if b not in own]
    if not side:
        return "the run's own evaluation protocol (its config's eval:)"
    what = ", ".join(side) + (" (benchmarks its config does not declare)" if record["run_protocol"] else "")
    return (f"side evaluation of {what}: kept under its protocol ({record['text']}), beside the run's own; "
            "the run's final score stays its own evaluation")


def _evaluate_loaded(model: str, cfg: EvalConfig, out_dir: Path | None, candidates: list, problems: dict, console,
                     resume: bool, precision, protocol: dict, record: dict, kind: str | None) -> tuple[Path, dict[str, dict]]:
    """Load the model (the first intact of a run's `candidates`, else `model`) and evaluate it on
    `problems` into `out_dir` (default: `default_out_dir`, with its protocol.json `record`), as a
    built-in policy of task `kind` where it is one (`run_task`); returns the folder and the summaries."""
    from dataclasses import replace

    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from rbctl.rollout.models import load_first_intact, load_policy
    from rbctl.store.write import write_protocol
    from rbctl.tasks import builtin

    opts = dict(device=cfg.device, dtype=cfg.dtype, cpu_linear=cfg.cpu_linear, log=console.print)
    ck = imported_checkpoint(Path(model)) if model != "builtin" else None
    ckpt_step = ck.step if ck is not None else None
    if candidates:
        ck, policy = load_first_intact(candidates, **opts)
        ckpt_step = ck.step
    else:
        policy = load_policy(str(builtin.default_warm_start(console.print)) if model == "builtin" else model, **opts)
    if kind is not None and policy.builtin != kind:  # a checkpoint without its marker: the run's task
        policy = replace(policy, builtin=kind)
    if out_dir is None:
        out_dir = default_out_dir(model, ckpt_step, protocol)
        check_writable(out_dir, samples_bytes(cfg, problems))  # before the first sample: where it all goes
        write_protocol(out_dir, record)
    out_dir = Path(out_dir)
    columns = (TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(), TextColumn("{task.fields[detail]}"),
               TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn())
    display = Progress(*columns, console=console, transient=True) if console.is_terminal else PlainProgress(out=console.file)
    try:
        with display as progress:
            results = evaluate_policy(policy, cfg, out_dir, progress=progress, step=ckpt_step, problems=problems,
                                      precision=precision, resume=resume,
                                      log=lambda line: console.print(line, highlight=False))
    except KeyboardInterrupt:
        raise EvalInterrupted(kept_text(out_dir, cfg, problems, protocol)) from None
    return out_dir, results
