"""The metrics reference, docs/metrics.md: every key of metrics.jsonl and eval.jsonl with its formula,
the function that computes it and when it is logged, generated from rbctl/train/metric_names.py.

    python scripts/metrics_doc.py > docs/metrics.md

`tests/integration/test_metrics_doc.py` checks that docs/metrics.md is current.
"""

from __future__ import annotations



from rbctl.train import metric_names
from rbctl.store.rundir import (CHECKPOINTS, EVAL_DIR, EVAL_LINES, METRICS, MODEL, PERIODIC_DIR, PROTOCOL_FILE,
                                PROTOCOL_PREFIX, RUNS_ROOT, SAMPLES, STEP_PREFIX, SUMMARY)
from rbctl.train.metric_names import EVAL_METRICS, STEP_METRICS, Metric

HEAD = """# Metrics

Generated from `rbctl/train/metric_names.py` by `python scripts/metrics_doc.py > docs/metrics.md`;
`tests/integration/test_metrics_doc.py` checks that this file is current, that every key a run logs
is listed and that every function named exists. The formulas follow [method.md](method.md).

"""

_STEP = f"{STEP_PREFIX}N"
_PROTOCOL = f"{PROTOCOL_PREFIX}XXXXXXXXXX"
EVAL_RESULTS = f"""## Evaluation results (`rbctl eval`, `RUN_DIR/{EVAL_DIR}/`)

An evaluation's identity is its protocol: n, temperature, top-p, the token limit, the seed, the
answer extraction, the prompt template and instruction, the problem limit, the engine, the weights'
dtype, the device and the precision (`rbctl.eval.protocols`), for one checkpoint and benchmark.
Results of different protocols live side by side and never replace one another:

| folder | what it holds | the run's final score? |
|---|---|---|
| `RUN_DIR/{EVAL_DIR}/{PERIODIC_DIR}/{_STEP}/BENCHMARK/` | the periodic evaluation training ran (the config's `eval:`) | at the run's last step, for a run `rbctl train` made |
| `RUN_DIR/{EVAL_DIR}/{_STEP}/BENCHMARK/` | a sweep run's final evaluation (the sweep file's `eval:`, written by `rbctl ablate`) | yes, for a sweep's run |
| `RUN_DIR/{EVAL_DIR}/{_STEP}/{_PROTOCOL}/BENCHMARK/` | `rbctl eval` of checkpoint N under one protocol; `{PROTOCOL_FILE}` beside the benchmarks names it (`protocol`, `text`) and says whether it is the run's own declared protocol (`run_protocol`, `run_benchmarks`) | only the run's own protocol at its last step, on the benchmarks its config declares (where training left no periodic evaluation there) |
| `{RUNS_ROOT}/{EVAL_DIR}/MODEL/{_PROTOCOL}/BENCHMARK/` | `rbctl eval` of a model outside a run | no |

`XXXXXXXXXX` is the first 10 hex digits of the SHA-256 of the protocol
(`rbctl.store.rundir.protocol_dir_name`). Any other evaluation of a run is a side evaluation:
`rbctl eval` says so when it starts, and the report's Runs table names it in the run's notes
("side evaluation at step N (benchmarks; protocol): not scored"); it never replaces the run's final
score or its comparisons. A run directory of the older layout, where `rbctl eval` wrote
`RUN_DIR/{EVAL_DIR}/{_STEP}/BENCHMARK/` for every protocol, still reads: for a run `rbctl train`
made, such a summary counts only at the run's last step, on a benchmark and n its config declares.
`-o OUT` writes `OUT/BENCHMARK/` as given, and refuses (one line, exit 2) to replace a complete
result of another protocol there unless `--force`. A checkpoint folder of a run
(`RUN_DIR/{CHECKPOINTS}/{_STEP}/{MODEL}`) is evaluated as `rbctl eval RUN_DIR --step N`: the run's
task (`builtin` is its test split, graded by its task's grader), protocol, seed, threads, device
and precision, so that it gives the run's own result through the same engine path
(`protocol.sampler`: the hf engine's own sampling loop, or transformers' `generate`).

`OUT/BENCHMARK/{SUMMARY}` holds the `{EVAL_LINES}` metrics (`avg@n`, `pass@<k>`, `maj@<k>`), each
with a 95% percentile-bootstrap interval over problems (2000 resamples; the report resamples seeds
and problems together across seeds), `labels` (the label shares), `grader` (counts of grading
statuses: `ok`, `no_answer`, `timeout`, `error`) and `extraction` (how answers were found: `boxed`,
`phrase`, `none`, `task`; method.md, "Answer extraction"); each line of `{SAMPLES}` carries its
own `status` and `extraction`. The estimators, aggregations and arms the training metrics refer
to: method.md, "Advantage estimators", "Loss aggregation" and "Other arms"; their config keys:
[config.md](config.md).
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def table(metrics: tuple[Metric, ...]) -> str:
    lines = ["| key | meaning | computed by | logged |", "|---|---|---|---|"]
    lines += [f"| `{m.key}` | {_cell(m.meaning)} | `{m.source}` | {_cell(m.when)} |" for m in metrics]
    return "\n".join(lines) + "\n"


def reference_markdown() -> str:
    notation = metric_names.__doc__.split("\n\n", 1)[1].strip()
    return (HEAD + notation + f"\n\n## Training steps (`RUN_DIR/{METRICS}`)\n\nOne line per step.\n\n"
            + table(STEP_METRICS)
            + f"\n## Periodic evaluation (`RUN_DIR/{EVAL_LINES}`)\n\nOne line per (evaluation, benchmark), from step 0 "
              "(the initial policy) every `eval.every` steps and at the last step.\n\n"
            + table(EVAL_METRICS) + "\n" + EVAL_RESULTS)


if __name__ == "__main__":
    print(reference_markdown(), end="")
