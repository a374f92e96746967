"""Write the single-digit addition task of the real-model demo as JSONL (a benchmark is data).

    python -m scripts.make_arithmetic [--out configs/data]

Every sum a + b of two digits (0-9), phrased as lm-evaluation-harness's `arithmetic` tasks phrase
theirs ("What is 6 plus 7?"), dealt by a fixed seed into a training pool of 64 problems
(`add1_train.jsonl`) and 36 held-out ones (`add1_test.jsonl`): no held-out pair is trained on,
and its mirror (b + a) may be. Fields: id, problem, answer. The files under configs/data are this
script's output (tests/unit/test_arithmetic_data.py checks that they are).
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

SEED = 0
N_TRAIN = 64
OUT = Path(__file__).resolve().parents[1].joinpath("configs", "data")  # beside the configs that name the files


def problems() -> tuple[list[dict], list[dict]]:
    """(training, held-out) rows."""
    rows = [{"problem": f"What is {a} plus {b}?", "answer": str(a + b)} for a in range(10) for b in range(10)]
    random.Random(SEED).shuffle(rows)
    train = [{"id": f"add1-train-{i}", **r} for i, r in enumerate(rows[:N_TRAIN])]
    test = [{"id": f"add1-test-{i}", **r} for i, r in enumerate(rows[N_TRAIN:])]
    return train, test


def render(rows: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name, rows in zip(("add1_train", "add1_test"), problems()):
        (args.out / f"{name}.jsonl").write_text(render(rows))
        print(f"{args.out / name}.jsonl: {len(rows)} problems")


if __name__ == "__main__":
    raise SystemExit(main())
