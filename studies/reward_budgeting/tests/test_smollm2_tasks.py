"""The SmolLM2 testbed's task files: the generator's output, and no held-out problem trained on."""

from __future__ import annotations

import json

import pytest

from studies.reward_budgeting import make_smollm2_tasks as tasks


@pytest.mark.parametrize("name", list(tasks.FAMILIES))
def test_the_shipped_files_are_the_generators_output_and_disjoint(name, tmp_path):
    tasks.main(["--out", str(tmp_path), "--families", name])
    for split in ("train", "test"):
        shipped = (tasks.OUT / f"{name}_{split}.jsonl").read_text()
        assert shipped == (tmp_path / f"{name}_{split}.jsonl").read_text()
    train = [json.loads(x) for x in (tasks.OUT / f"{name}_train.jsonl").read_text().splitlines()]
    test = [json.loads(x) for x in (tasks.OUT / f"{name}_test.jsonl").read_text().splitlines()]
    assert len(test) == tasks.N_TEST and len(train) + len(test) == len({r["problem"] for r in train + test})
    assert not {r["problem"] for r in test} & {r["problem"] for r in train}


def test_answers_are_right():
    rows = [json.loads(x) for x in (tasks.OUT / "add2_test.jsonl").read_text().splitlines()]
    for r in rows:
        a, b = (int(w.rstrip("?")) for w in r["problem"].split() if w.rstrip("?").isdigit())
        assert int(r["answer"]) == a + b and 10 <= a <= 99 and 10 <= b <= 99
    comp = [json.loads(x) for x in (tasks.OUT / "comp1_test.jsonl").read_text().splitlines()]
    for r in comp:
        expr = r["problem"].removeprefix("What is ").removesuffix("?")
        assert int(r["answer"]) == eval(expr)  # noqa: S307 (a shipped arithmetic string)
