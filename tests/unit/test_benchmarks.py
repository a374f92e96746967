"""Tests of rbctl.tasks.benchmarks. The Hugging Face Hub is never contacted: its loader is replaced."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from rbctl.tasks import benchmarks
from rbctl.tasks.benchmarks import Benchmark, Problem, load_benchmark, register
from rbctl.errors import UserError
from rbctl.grading.verify import grade_detailed
from tests.conftest import SHARED_BENCHMARKS as SHARED, SHARED_MISSING

needs_shared = pytest.mark.skipif(
    not (SHARED / "amc23.jsonl").is_file(),
    reason=SHARED_MISSING,
)


@pytest.fixture(autouse=True)
def _no_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test may reach the Hub: it is unreachable and its loader fails."""

    def refuse(hf_id, config, split):
        raise ConnectionError(f"no network in tests ({hf_id})")

    monkeypatch.setattr(benchmarks, "hub_reachable", lambda timeout_s=0: False)
    monkeypatch.setattr(benchmarks, "load_hf_records", refuse)
    monkeypatch.delenv("RBCTL_DATA_DIR", raising=False)


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@needs_shared
@pytest.mark.parametrize(("name", "count"), [("amc23", 40), ("aime24", 30), ("aime25", 30)])
def test_shared_files_load_and_gold_answers_parse(name: str, count: int) -> None:
    import sympy
    from math_verify import parse

    problems = load_benchmark(name, data_dir=str(SHARED))
    assert len(problems) == count
    assert problems[0].id == f"{name}-0"
    assert len({p.id for p in problems}) == count
    for p in problems:
        assert p.problem.strip()
        parsed = parse("\\boxed{" + p.answer + "}", parsing_timeout=None)
        assert parsed and isinstance(parsed[0], sympy.Basic), (p.id, p.answer)
        # every gold of these sets is an integer: the model writing it plainly must be graded right
        plain = str(int(p.answer.replace("^\\circ", "")))
        assert grade_detailed(f"\\boxed{{{plain}}}", p.answer).correct, (p.id, p.answer)


@needs_shared
def test_known_gold_quirks() -> None:
    aime24 = {p.id: p.answer for p in load_benchmark("aime24", data_dir=str(SHARED))}
    aime25 = {p.id: p.answer for p in load_benchmark("aime25", data_dir=str(SHARED))}
    assert "025" in aime24.values()  # leading zeros kept from the source data
    assert aime25["aime25-19"] == "336^\\circ"


@needs_shared
def test_gsm8k_loads_from_env_data_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RBCTL_DATA_DIR", str(SHARED))
    problems = load_benchmark("gsm8k")
    assert len(problems) == 1319
    assert problems[0] == Problem("gsm8k-test-0", problems[0].problem, "18")
    assert len(load_benchmark("gsm8k", limit=5)) == 5


def test_missing_data_says_how_to_get_it(tmp_path: Path) -> None:
    with pytest.raises(UserError) as err:
        load_benchmark("aime24", data_dir=str(tmp_path))
    msg = str(err.value)
    assert "\n" not in msg
    assert "--data-dir" in msg and "aime24.jsonl" in msg and "HuggingFaceH4/aime_2024" in msg


def test_hub_rows_use_declared_fields_and_transform(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def fake(hf_id, config, split):
        calls.append((hf_id, config, split))
        return [{"question": "Q?", "answer": "steps...\n#### 1,080"}]

    monkeypatch.setattr(benchmarks, "load_hf_records", fake)
    monkeypatch.setattr(benchmarks, "hub_reachable", lambda timeout_s=0: True)
    assert load_benchmark("gsm8k") == [Problem("gsm8k-0", "Q?", "1080")]
    assert calls == [("openai/gsm8k", "main", "test")]


def test_offline_env_tries_the_local_hf_cache_without_probing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(benchmarks, "hub_reachable", lambda timeout_s=0: pytest.fail("probed the Hub"))
    monkeypatch.setattr(benchmarks, "load_hf_records", lambda *a: [{"id": "x1", "question": "Q", "answer": 27.0}])
    assert load_benchmark("amc23") == [Problem("x1", "Q", "27")]  # AI-MO style float answers


def test_unknown_name_lists_valid_names() -> None:
    with pytest.raises(UserError) as err:
        load_benchmark("aime2024")
    for name in ("amc23", "aime24", "aime25", "gsm8k"):
        assert name in str(err.value)


def test_file_spec_with_fields(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "mine.jsonl", [{"q": "1+1?", "a": "2"}, {"q": "2+2?", "a": 4}])
    expected = [Problem("mine-0", "1+1?", "2"), Problem("mine-1", "2+2?", "4")]
    assert load_benchmark(f"file:{path}@q,a") == expected
    assert load_benchmark(f"{path}@q,a") == expected  # bare .jsonl path
    assert load_benchmark(f"file:{path}@q,a", limit=1) == expected[:1]


def test_file_spec_default_fields_nested_fields_and_parquet(tmp_path: Path) -> None:
    rows = [{"id": "p7", "problem": "P", "answer": "5"}]
    assert load_benchmark(str(write_jsonl(tmp_path / "a.jsonl", rows))) == [Problem("p7", "P", "5")]
    nested = [{"prompt": "P", "reward_model": {"ground_truth": "336^\\circ"}}]
    path = write_jsonl(tmp_path / "b.jsonl", nested)
    assert load_benchmark(f"file:{path}@prompt,reward_model.ground_truth")[0].answer == "336^\\circ"
    pq = tmp_path / "c.parquet"
    pd.DataFrame({"problem": ["P1", "P2"], "answer": ["1", "2"]}).to_parquet(pq)
    assert [p.answer for p in load_benchmark(f"file:{pq}")] == ["1", "2"]


def test_hf_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(benchmarks, "hub_reachable", lambda timeout_s=0: True)
    seen = []
    monkeypatch.setattr(
        benchmarks, "load_hf_records", lambda *a: seen.append(a) or [{"Problem": "P", "Answer": 204}]
    )
    assert load_benchmark("hf:Maxwell-Jia/AIME_2024:train@Problem,Answer") == [Problem("AIME_2024-0", "P", "204")]
    load_benchmark("hf:openai/gsm8k:main:test@Problem,Answer")
    assert seen == [("Maxwell-Jia/AIME_2024", None, "train"), ("openai/gsm8k", "main", "test")]
    with pytest.raises(UserError, match="expected hf:"):
        load_benchmark("hf:just-an-id")


def test_hf_spec_without_network_is_a_user_error() -> None:
    with pytest.raises(UserError, match="unreachable"):
        load_benchmark("hf:openai/gsm8k:main:test@question,answer")


def test_malformed_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"problem": "P", "answer": "1"}\n\n{"problem": "Q", "answer": \n', encoding="utf-8")
    with pytest.raises(UserError) as err:
        load_benchmark(f"file:{path}")
    assert f"{path}:3:" in str(err.value)  # line 2 is blank; line 3 is cut off


@pytest.mark.parametrize("line, column", [
    ('{"problem": "Q", "answer": ', 28),  # cut off: the error is at the line's end, not column 1 of a next line
    ('{"problem": "Q",, "answer": "1"}', 17),  # the second comma
    ('{"problem": "Q", "answer": "1"} x', 33),  # extra data after the object
])
def test_malformed_line_names_the_column(tmp_path: Path, line: str, column: int) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"problem": "P", "answer": "1"}\n' + line + "\n", encoding="utf-8")
    with pytest.raises(UserError) as err:
        benchmarks.read_jsonl(path)
    assert f"{path}:2:" in str(err.value) and str(err.value).endswith(f"at column {column})")


def test_missing_fields_are_named_with_the_existing_ones(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "x.jsonl", [{"question": "Q", "solution": "S"}])
    with pytest.raises(UserError) as err:
        load_benchmark(f"file:{path}")
    msg = str(err.value)
    assert "problem, answer" in msg and "question, solution" in msg


def test_missing_file_and_bad_limit(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="does not exist"):
        load_benchmark(f"file:{tmp_path / 'nope.jsonl'}")
    with pytest.raises(UserError, match="limit"):
        load_benchmark("amc23", limit=0)


def test_register_with_loader(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(benchmarks, "BENCHMARKS", dict(benchmarks.BENCHMARKS))
    toy = Benchmark(name="toy", loader=lambda: [Problem("t-0", "1+2?", "3"), Problem("t-1", "2+2?", "4")])
    register(toy)
    assert load_benchmark("toy", limit=1) == [Problem("t-0", "1+2?", "3")]
    with pytest.raises(ValueError):
        register(toy)
    register(toy, replace=True)
    with pytest.raises(ValueError):
        register(Benchmark(name="odd", answer_transform="nope"))
