"""Training data and rewards: the prompt pool and the reward function."""

from __future__ import annotations

from pathlib import Path

from rbctl.config.train import TrainConfig
from rbctl.tasks import builtin


def load_training_problems(cfg: TrainConfig):
    from rbctl.tasks import benchmarks

    d = cfg.data
    if d.source == "builtin":
        spec = task_spec(cfg)
        return builtin.module_of(spec).problems(spec, "train")
    fields = f"@{d.problem_field},{d.answer_field}"
    if d.source.endswith((".jsonl", ".parquet")) or Path(d.source).exists():
        return benchmarks.load_benchmark(f"file:{d.source}{fields}")
    cfg_part = f":{d.hf_config}" if d.hf_config else ""
    return benchmarks.load_benchmark(f"hf:{d.source}{cfg_part}:{d.split}{fields}")


def task_spec(cfg: TrainConfig):
    """The built-in task's settings (`data.builtin`), as its task module's `TaskSpec`."""
    return builtin.specs_from_config(cfg.data.builtin)[0]


def warm_start_spec(cfg: TrainConfig):
    """The built-in policy's warm-start settings (`data.builtin`), as its task module's `WarmStartSpec`."""
    return builtin.specs_from_config(cfg.data.builtin)[1]


def base_model(cfg: TrainConfig, log=print) -> str:
    """What `model.name` loads: a hub id or path as given, or for `builtin` the directory of the
    built-in task's warm-started policy (`data.builtin`: shipped, cached, or trained once)."""
    if cfg.model.name != "builtin":
        return cfg.model.name
    return str(builtin.warm_started(task_spec(cfg), warm_start_spec(cfg), log=log, shipped=cfg.data.builtin.warm_start))


def reward_function(cfg: TrainConfig):
    """(completions, problems) -> (correct flags, grader failures, unevaluated answers), one problem per
    completion. Binary reward: 1 if correct.

    The built-in task is graded by its evaluation grader (its benchmark `builtin`:
    `Benchmark.task_grade`); everything else goes through the shared math grader, in parallel worker
    processes, and its time-outs and errors are counted (as wrong), as are its answers that are a
    computation left undone (`rbctl.grading.extract.unevaluated_computation`, wrong: a policy that
    learns to restate the question shows there)."""
    if cfg.data.source == "builtin":
        bench = builtin.benchmark(task_spec(cfg))
        return lambda completions, problems: ([bench.task_grade(c, p)[0] for c, p in zip(completions, problems)], 0, 0)
    from rbctl.grading.verify import grade_many

    def fn(completions: list[str], problems: list) -> tuple[list[bool], int, int]:
        results = grade_many(completions, [p.answer for p in problems], extraction=cfg.data.extraction)
        return ([r.correct for r in results], sum(r.status in ("timeout", "error") for r in results),
                sum(r.status == "unevaluated" for r in results))

    return fn
