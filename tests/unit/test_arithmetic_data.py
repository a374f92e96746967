"""The real-model demo's task files are the output of scripts/make_arithmetic.py, with a clean split."""

from __future__ import annotations

import json
from scripts import make_arithmetic

DATA = make_arithmetic.OUT


def test_shipped_files_are_the_generator_output() -> None:
    train, test = make_arithmetic.problems()
    assert (DATA / "add1_train.jsonl").read_text() == make_arithmetic.render(train)
    assert (DATA / "add1_test.jsonl").read_text() == make_arithmetic.render(test)


def test_every_sum_once_and_no_held_out_problem_trained_on() -> None:
    train, test = make_arithmetic.problems()
    assert (len(train), len(test)) == (64, 36)
    problems = [r["problem"] for r in train + test]
    assert len(set(problems)) == 100
    assert not {r["problem"] for r in train} & {r["problem"] for r in test}
    for r in train + test:
        a, b = (int(w.rstrip("?")) for w in r["problem"].split() if w.rstrip("?").isdigit())
        assert r["answer"] == str(a + b)
    assert json.loads((DATA / "add1_test.jsonl").read_text().splitlines()[0]).keys() == {"id", "problem", "answer"}
