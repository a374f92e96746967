"""The metrics reference, docs/metrics.md: every key of metrics.jsonl and eval.jsonl with its formula, (the code: `rbctl.tools.metrics_doc`)."""

from rbctl.tools.metrics_doc import reference_markdown

if __name__ == "__main__":
    print(reference_markdown(), end="")
