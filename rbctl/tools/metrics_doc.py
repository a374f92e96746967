"""The metrics reference, docs/metrics.md: every key of metrics.jsonl and eval.jsonl with its formula,
the function that computes it and when it is logged, generated from rbctl/train/metric_names.py.

    python scripts/metrics_doc.py > docs/metrics.md

`tests/integration/test_metrics_doc.py` checks that docs/metrics.md is current.
"""

from __future__ import annotations



from rbctl.train import metric_names
from rbctl.store.rundir import EVAL_DIR, EVAL_LINES, METRICS, SAMPLES, SUMMARY
from rbctl.train.metric_names import EVAL_METRICS, STEP_METRICS, Metric

HEAD = """# Metrics

Generated from `rbctl/train/metric_names.py` by `python scripts/metrics_doc.py > docs/metrics.md`;
`tests/integration/test_metrics_doc.py` checks that this file is current, that every key a run logs
is listed and that every function named exists. The formulas follow [method.md](method.md).

"""

EVAL_RESULTS = f"""## Evaluation results (`rbctl eval`, `RUN_DIR/{EVAL_DIR}/`)

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
