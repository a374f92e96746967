"""Write the short-answer task families probed for the SmolLM2-135M testbed as JSONL.

    python studies/reward_budgeting/make_smollm2_tasks.py [--out studies/reward_budgeting/tasks]

Each family is generated from a fixed seed, deduplicated by problem text, and dealt into a training
pool and a held-out split; no held-out problem text is in the training pool
(tests check the shipped files are this script's output). Fields: id, problem, answer.
Phrasing follows lm-evaluation-harness's `arithmetic` tasks ("What is 47 plus 38?").
"""

from __future__ import annotations

import argparse
import json
import random
import string
from pathlib import Path

SEED = 0
N_TEST = 256
OUT = Path(__file__).resolve().parent / "tasks"


def _add2(r: random.Random):
    a, b = r.randint(10, 99), r.randint(10, 99)
    return f"What is {a} plus {b}?", str(a + b)


def _sub2(r: random.Random):
    a, b = r.randint(10, 99), r.randint(10, 99)
    a, b = max(a, b), min(a, b)
    return f"What is {a} minus {b}?", str(a - b)


def _mul12(r: random.Random):
    a, b = r.randint(2, 9), r.randint(10, 99)
    return f"What is {a} times {b}?", str(a * b)


def _comp1(r: random.Random):
    a, b, c = (r.randint(0, 9) for _ in range(3))
    op1, op2 = r.choice("+-"), r.choice("+*")
    inner = a + b if op1 == "+" else a - b
    value = inner + c if op2 == "+" else inner * c
    return f"What is ({a} {op1} {b}) {op2} {c}?", str(value)


def _letters(r: random.Random):
    letter = r.choice("abcdefghij")
    k = r.randint(1, 4)
    others = [x for x in string.ascii_lowercase[:10] if x != letter]
    chars = [letter] * k + [r.choice(others) for _ in range(8 - k)]
    r.shuffle(chars)
    word = "".join(chars)
    return f"How many times does the letter {letter} appear in \"{word}\"?", str(k)


def _cmp2(r: random.Random):
    a, b = r.sample(range(10, 100), 2)
    return f"Which number is larger, {a} or {b}?", str(max(a, b))


FAMILIES = {"add2": _add2, "sub2": _sub2, "mul12": _mul12, "comp1": _comp1, "letters": _letters, "cmp2": _cmp2}
N_PROBLEMS = {"add2": 4096, "sub2": 2048, "mul12": 640, "comp1": 2048, "letters": 4096, "cmp2": 4005}


def family(name: str) -> tuple[list[dict], list[dict]]:
    """(training, held-out) rows of one family."""
    r = random.Random(f"{SEED}:{name}")
    seen: dict[str, str] = {}
    make = FAMILIES[name]
    for _ in range(200_000):
        if len(seen) >= N_PROBLEMS[name]:
            break
        q, a = make(r)
        seen.setdefault(q, a)
    rows = [{"problem": q, "answer": a} for q, a in seen.items()]
    r.shuffle(rows)
    test = [{"id": f"{name}-test-{i}", **x} for i, x in enumerate(rows[:N_TEST])]
    train = [{"id": f"{name}-train-{i}", **x} for i, x in enumerate(rows[N_TEST:])]
    return train, test


def render(rows: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--families", nargs="*", default=list(FAMILIES))
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.families:
        for split, rows in zip(("train", "test"), family(name)):
            (args.out / f"{name}_{split}.jsonl").write_text(render(rows))
            print(f"{args.out / name}_{split}.jsonl: {len(rows)} problems")


if __name__ == "__main__":
    main()
