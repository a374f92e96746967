"""Benchmark registry: a benchmark is a declarative `Benchmark` entry (data), not a subclass.

Where the data comes from (first that works):
1. ``<data_dir>/<local_file>``: ``data_dir`` is the argument (the CLI's ``--data-dir``), else the
   environment variable ``RBCTL_DATA_DIR``. JSONL, one ``{"id", "problem", "answer"}`` object per
   line (the format of the shared ``benchmarks/`` folder; extra keys are ignored).
2. ``datasets.load_dataset(hf_id, hf_config, split=split)``, fields ``problem_field`` and
   ``answer_field``, then ``answer_transform``. Honours ``HF_HUB_OFFLINE`` /
   ``HF_DATASETS_OFFLINE`` (then only the local HF cache is used); otherwise the Hub is probed
   first with a 3 s TCP connect so that a machine without network fails at once, not after
   minutes of retries.
If neither works, `UserError` says how to get the data.

Custom benchmarks need no code. ``name_or_spec`` may be:
- ``file:PATH`` or a bare path ending in ``.jsonl`` / ``.parquet``, optionally followed by
  ``@PROBLEM_FIELD,ANSWER_FIELD`` (default ``problem,answer``):
  ``file:data/my_test.jsonl@question,final``
- ``hf:DATASET_ID[:CONFIG]:SPLIT[@PROBLEM_FIELD,ANSWER_FIELD]``:
  ``hf:openai/gsm8k:main:test@question,answer``
A field may be a dotted path into nested records (``reward_model.ground_truth``). Problem ids are
the record's ``id`` field when present, else ``<name>-<row index>``.
"""

from __future__ import annotations

import json
import math
import os
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from rbctl.errors import UserError

HUB_PROBE_TIMEOUT_S = 3.0  # a reachable Hub answers a TCP connect in well under a second


@dataclass(frozen=True)
class Problem:
    """One evaluation problem; ``answer`` is the gold answer string given to the grader."""

    id: str
    problem: str
    answer: str


@dataclass(frozen=True)
class Benchmark:
    """Where a benchmark's problems come from and how to read them."""

    name: str  # registry key, used on the command line
    hf_id: str | None = None  # Hugging Face dataset id
    hf_config: str | None = None  # dataset config ("main" for gsm8k); None = default
    split: str = "test"  # dataset split
    problem_field: str = "problem"  # problem text field of the HF records (dotted path allowed)
    answer_field: str = "answer"  # gold answer field of the HF records (dotted path allowed)
    answer_transform: str | None = None  # key of ANSWER_TRANSFORMS applied to HF answers
    local_file: str | None = None  # JSONL file name inside a data dir (keys id, problem, answer)
    description: str = ""  # one line for `--help` and reports
    loader: Callable[[], list[Problem]] | None = None  # code-defined source (e.g. the builtin task)
    # How answers are graded. None: the shared math grader (math-verify, rbctl.grading). A function:
    # the task's own answers (the built-in tasks): it extracts the answer, which is right iff it
    # equals the gold, or iff `check` says so where given.
    extract_answer: Callable[[str], str | None] | None = None
    # The task's verdict where many answers are right (the maze: any moves that reach the goal),
    # (completion, problem) -> correct; None: the extracted answer must equal the gold. Only with
    # extract_answer (which still gives the answer recorded and voted on: equal answers, equal verdicts).
    check: Callable[[str, Problem], bool] | None = None
    # Per-sample categorical labels for analysis, (completion, problem) -> {label: value}, e.g. the
    # fixpoint task's {"strategy": "walk"}: their shares go into summary.json (`labels`) and into the
    # periodic evaluation lines (`label/<label>/<value>`). None: no labels.
    labels: Callable[[str, Problem], dict[str, str]] | None = None

    @property
    def grader(self) -> str:
        if self.extract_answer is None:
            return "rbctl.grading.verify (math-verify)"
        if self.check is not None:
            return f"{self.check.__module__}.{self.check.__qualname__}"
        return f"exact match of {self.extract_answer.__module__}.{self.extract_answer.__qualname__}"

    def task_grade(self, completion: str, problem: Problem) -> tuple[bool, str | None]:
        """(correct, extracted answer) by the task's own grader (a benchmark with `extract_answer`)."""
        extracted = self.extract_answer(completion)
        if self.check is not None:
            return bool(self.check(completion, problem)), extracted
        return extracted is not None and extracted == problem.answer, extracted


def _gsm8k_after_hashes(answer: str) -> str:
    """GSM8K gold: the text after ``####``, trimmed, thousands separators removed (verl's rule)."""
    if "####" not in answer:
        raise ValueError(f"no '####' in GSM8K answer {answer[:60]!r}")
    return answer.split("####")[-1].strip().replace(",", "")


ANSWER_TRANSFORMS: dict[str, Callable[[str], str]] = {
    "gsm8k_after_hashes": _gsm8k_after_hashes,
}

BENCHMARKS: dict[str, Benchmark] = {}


def register(benchmark: Benchmark, replace: bool = False) -> Benchmark:
    """Add ``benchmark`` to the registry under its name (``replace=True`` to overwrite)."""
    if benchmark.name in BENCHMARKS and not replace:
        raise ValueError(f"benchmark {benchmark.name!r} is already registered")
    if benchmark.answer_transform is not None and benchmark.answer_transform not in ANSWER_TRANSFORMS:
        raise ValueError(f"unknown answer_transform {benchmark.answer_transform!r}; known: {sorted(ANSWER_TRANSFORMS)}")
    BENCHMARKS[benchmark.name] = benchmark
    return benchmark


register(Benchmark(
    name="amc23", hf_id="math-ai/amc23", hf_config="default", split="test",
    problem_field="question", answer_field="answer", local_file="amc23.jsonl",
    description="AMC 12A/12B 2023, 40 problems, integer answers",
))
register(Benchmark(
    name="aime24", hf_id="HuggingFaceH4/aime_2024", hf_config="default", split="train",
    problem_field="problem", answer_field="answer", local_file="aime24.jsonl",
    description="AIME 2024 I and II, 30 problems, integer answers 000-999",
))
register(Benchmark(
    name="aime25", hf_id="math-ai/aime25", hf_config="default", split="test",
    problem_field="problem", answer_field="answer", local_file="aime25.jsonl",
    description="AIME 2025 I and II, 30 problems, integer answers 000-999",
))
register(Benchmark(
    name="gsm8k", hf_id="openai/gsm8k", hf_config="main", split="test",
    problem_field="question", answer_field="answer", answer_transform="gsm8k_after_hashes",
    local_file="gsm8k_test.jsonl", description="GSM8K test split, 1319 grade-school word problems",
))


def benchmark_names() -> list[str]:
    return sorted(BENCHMARKS)


def get_benchmark(name: str) -> Benchmark:
    """The registered benchmark ``name``; `UserError` listing the valid names otherwise."""
    if name not in BENCHMARKS:
        raise UserError(
            f"unknown benchmark {name!r}; valid names: {', '.join(benchmark_names())} "
            "(or a custom spec: file:PATH.jsonl[@problem,answer] or hf:ID[:config]:split[@problem,answer])"
        )
    return BENCHMARKS[name]


# ---------------------------------------------------------------------------------------------
# Records -> problems
# ---------------------------------------------------------------------------------------------


def _get_field(record: dict, path: str) -> object:
    """``record["a"]["b"]`` for ``path == "a.b"``; raises KeyError if any step is missing."""
    value: object = record
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            raise KeyError(path)
        value = value[part]
    return value


def _answer_str(value: object) -> str:
    """Gold answers as strings; whole floats (AI-MO stores ``27.0``) become ``"27"``."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return str(int(value))
    return str(value).strip()


def _records_to_problems(
    records: list[dict],
    problem_field: str,
    answer_field: str,
    source: str,
    id_prefix: str,
    transform: Callable[[str], str] | None = None,
) -> list[Problem]:
    problems = []
    for i, rec in enumerate(records):
        missing = []
        for f in (problem_field, answer_field):
            try:
                _get_field(rec, f)
            except KeyError:
                missing.append(f)
        if missing:
            raise UserError(
                f"{source}: record {i} lacks field(s) {', '.join(missing)}; "
                f"it has: {', '.join(map(str, rec)) or '(none)'}"
            )
        answer = _answer_str(_get_field(rec, answer_field))
        if transform is not None:
            try:
                answer = transform(answer)
            except ValueError as exc:
                raise UserError(f"{source}: record {i}: {exc}") from None
        rid = rec.get("id")
        problems.append(Problem(
            id=str(rid) if rid is not None else f"{id_prefix}-{i}",
            problem=str(_get_field(rec, problem_field)),
            answer=answer,
        ))
    return problems


def read_jsonl(path: Path) -> list[dict]:
    """JSON objects of a JSONL file; blank lines are skipped, a bad line is a `UserError`."""
    records = []
    try:
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                text = line.rstrip("\r\n")  # a line cut short fails at its end, not at "column 1 of the next line"
                try:
                    rec = json.loads(text)
                except json.JSONDecodeError as exc:
                    raise UserError(f"{path}:{lineno}: malformed JSON ({exc.msg} at column {exc.pos + 1})") from None
                if not isinstance(rec, dict):
                    raise UserError(f"{path}:{lineno}: expected a JSON object, got {type(rec).__name__}")
                records.append(rec)
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}") from None
    return records


def _read_records(path: Path) -> list[dict]:
    if path.suffix == ".parquet":
        import pandas as pd

        try:
            return pd.read_parquet(path).to_dict(orient="records")
        except (OSError, ValueError) as exc:
            raise UserError(f"cannot read parquet file {path}: {exc}") from None
    return read_jsonl(path)


# ---------------------------------------------------------------------------------------------
# Hugging Face Hub
# ---------------------------------------------------------------------------------------------


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def hf_offline() -> bool:
    return _env_true("HF_HUB_OFFLINE") or _env_true("HF_DATASETS_OFFLINE")


def hub_reachable(timeout_s: float = HUB_PROBE_TIMEOUT_S) -> bool:
    """Whether a TCP connection to the Hub endpoint (``HF_ENDPOINT``) opens within ``timeout_s``."""
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname or "huggingface.co", port), timeout=timeout_s):
            return True
    except OSError:
        return False


def load_hf_records(hf_id: str, config: str | None, split: str) -> list[dict]:
    """Rows of a Hub dataset split as dicts (``datasets.load_dataset``)."""
    import datasets

    return list(datasets.load_dataset(hf_id, config, split=split))


def _hub_records_or_reason(hf_id: str, config: str | None, split: str) -> tuple[list[dict] | None, str]:
    """(records, "") on success, else (None, why the Hub could not be used)."""
    if not hf_offline() and not hub_reachable():
        return None, "the Hub is unreachable"
    try:
        return load_hf_records(hf_id, config, split), ""
    except Exception as exc:  # datasets raises many types (ConnectionError, DatasetNotFoundError, ...)
        return None, f"load_dataset failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------

_FIELDS_SUFFIX = re.compile(r"@([\w.\-]+),([\w.\-]+)$")


def _split_fields(spec: str) -> tuple[str, str, str]:
    """``"x@q,a"`` -> ``("x", "q", "a")``; without a suffix the fields are problem, answer."""
    m = _FIELDS_SUFFIX.search(spec)
    if m is None:
        return spec, "problem", "answer"
    return spec[: m.start()], m.group(1), m.group(2)


def _load_file_spec(spec: str) -> list[Problem]:
    path_str, pf, af = _split_fields(spec.removeprefix("file:"))
    path = Path(path_str).expanduser()
    if not path.is_file():
        raise UserError(f"benchmark file {path} does not exist")
    return _records_to_problems(_read_records(path), pf, af, str(path), path.stem)


def _load_hf_spec(spec: str) -> list[Problem]:
    body, pf, af = _split_fields(spec.removeprefix("hf:"))
    parts = body.split(":")
    if len(parts) == 2:
        hf_id, config, split = parts[0], None, parts[1]
    elif len(parts) == 3:
        hf_id, config, split = parts
    else:
        raise UserError(f"bad spec {spec!r}; expected hf:DATASET_ID[:config]:split[@problem_field,answer_field]")
    records, reason = _hub_records_or_reason(hf_id, config, split)
    if records is None:
        raise UserError(
            f"cannot load Hugging Face dataset {hf_id} ({reason}); download it to JSONL and use file:PATH.jsonl"
        )
    return _records_to_problems(records, pf, af, f"hf:{hf_id}", hf_id.split("/")[-1])


def _load_registered(bench: Benchmark, data_dir: str | None) -> list[Problem]:
    if bench.loader is not None:
        return bench.loader()
    data_dir = data_dir or os.environ.get("RBCTL_DATA_DIR") or None
    if data_dir and bench.local_file:
        path = Path(data_dir).expanduser() / bench.local_file
        if path.is_file():
            return _records_to_problems(read_jsonl(path), "problem", "answer", str(path), bench.name)
    reason = "no Hugging Face dataset is declared"
    if bench.hf_id is not None:
        records, reason = _hub_records_or_reason(bench.hf_id, bench.hf_config, bench.split)
        if records is not None:
            transform = ANSWER_TRANSFORMS[bench.answer_transform] if bench.answer_transform else None
            return _records_to_problems(
                records, bench.problem_field, bench.answer_field, f"hf:{bench.hf_id}", bench.name, transform
            )
    raise UserError(_no_data(bench, data_dir, reason))


def _no_data(bench: Benchmark, data_dir: str | None, reason: str) -> str:
    """The one line of a registered benchmark whose data is found nowhere (`data_dir` resolved)."""
    where = f"{data_dir}/{bench.local_file} not found" if data_dir else "no data dir given"
    return (f"no data for benchmark {bench.name!r} ({where}; {reason}): give a folder DIR holding "
            f"DIR/{bench.local_file} (JSONL with id, problem, answer) by RBCTL_DATA_DIR=DIR, `rbctl eval --data-dir "
            f"DIR`, or a config's eval.data_dir (`rbctl train ... --set eval.data_dir=DIR`), "
            f"or give network access to the Hugging Face dataset {bench.hf_id}")


def _hub_problem(hf_id: str, config: str | None, split: str) -> str:
    """Why `_hub_records_or_reason` would find no records, downloading nothing: "" where the Hub is
    reachable (the run downloads the dataset then) or, offline, where the local cache holds it (read
    from there, as the run reads it); else the reason it would give."""
    if not hf_offline():
        return "" if hub_reachable() else "the Hub is unreachable"
    return _hub_records_or_reason(hf_id, config, split)[1]


def data_problem(name_or_spec: str, data_dir: str | None = None) -> str | None:
    """Why `load_benchmark(name_or_spec, data_dir)` would find no data, or None where it would find
    some: the same sources in the same order (module docstring), read without downloading anything,
    so that a dry run and the start of a run refuse what the evaluation would fail on, before any
    directory is made. An unknown name is `get_benchmark`'s line."""
    spec = name_or_spec.strip()
    if spec.startswith("file:") or _split_fields(spec)[0].endswith((".jsonl", ".parquet")):
        path = Path(_split_fields(spec.removeprefix("file:"))[0]).expanduser()
        return None if path.is_file() else f"benchmark file {path} does not exist"
    if spec.startswith("hf:"):
        parts = _split_fields(spec.removeprefix("hf:"))[0].split(":")
        if len(parts) not in (2, 3):
            return f"bad spec {spec!r}; expected hf:DATASET_ID[:config]:split[@problem_field,answer_field]"
        hf_id, config, split = (parts[0], None, parts[1]) if len(parts) == 2 else parts
        reason = _hub_problem(hf_id, config, split)
        return f"cannot load Hugging Face dataset {hf_id} ({reason}); download it to JSONL and use file:PATH.jsonl" if reason else None
    try:
        bench = get_benchmark(spec)
    except UserError as e:
        return str(e)
    if bench.loader is not None:
        return None
    data_dir = data_dir or os.environ.get("RBCTL_DATA_DIR") or None
    if data_dir and bench.local_file and (Path(data_dir).expanduser() / bench.local_file).is_file():
        return None
    reason = "no Hugging Face dataset is declared" if bench.hf_id is None else _hub_problem(bench.hf_id, bench.hf_config, bench.split)
    return _no_data(bench, data_dir, reason) if reason else None


def load_benchmark(name_or_spec: str, data_dir: str | None = None, limit: int | None = None) -> list[Problem]:
    """Problems of a registered benchmark or a custom spec (see the module docstring).

    ``limit`` keeps the first ``limit`` problems (file order).
    """
    if limit is not None and limit < 1:
        raise UserError(f"limit must be a positive number of problems, got {limit}")
    spec = name_or_spec.strip()
    if spec.startswith("file:") or _split_fields(spec)[0].endswith((".jsonl", ".parquet")):
        problems = _load_file_spec(spec)
    elif spec.startswith("hf:"):
        problems = _load_hf_spec(spec)
    else:
        problems = _load_registered(get_benchmark(spec), data_dir)
    if not problems:
        raise UserError(f"benchmark {name_or_spec!r} has no problems")
    return problems[:limit] if limit is not None else problems


def benchmark_for(name: str) -> Benchmark:
    """The registered benchmark, or for a custom spec (`file:…`, `hf:…`) an entry that grades with
    the math grader."""
    if is_custom_spec(name):
        return Benchmark(name=name, description="custom benchmark")
    return get_benchmark(name)


def is_custom_spec(name: str) -> bool:
    """``file:…``, ``hf:…`` or a path to a .jsonl/.parquet file."""
    return name.startswith(("file:", "hf:")) or name.split("@")[0].endswith((".jsonl", ".parquet"))
