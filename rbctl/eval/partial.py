"""A benchmark's evaluation kept as it is computed, so that an interrupted `rbctl eval` resumes.

``OUT/<benchmark>/`` holds, while a benchmark is evaluated:
- ``partial.json`` (`EVAL_PARTIAL`, written atomically before the first sample): what decides the
  samples (`resume_key`: benchmark, model, step, the problems, the protocol but its batch limits)
  and the prompts of each generation call (`prompts_per_call`: call c is seeded ``seed + c``);
- ``samples.jsonl``: the graded samples of every call done, appended and flushed call by call.

When the benchmark is complete its ``summary.json`` is written and ``partial.json`` removed. A
rerun with the same key (`resumable`) keeps the samples of the calls done (a torn last line and
the lines of a call cut short are dropped) and samples the rest with the same calls and seeds: its
result is the one of an uninterrupted evaluation. A benchmark already complete with the same key
(`complete_summary`) is kept as it is. Anything else (another model, protocol or problem set) starts
the benchmark over, with a notice.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from rbctl.store.atomic import write_atomic
from rbctl.store.jsonl import CorruptLog, append_lines, read_log
from rbctl.store.read import read_json
from rbctl.store.rundir import EVAL_PARTIAL, EVAL_SAMPLES, SUMMARY

# Protocol keys that do not decide the samples: the batch limits only bound the calls, whose
# prompts per call (what decides the seeds) `partial.json` records itself.
RESUME_IGNORES = ("batch_size", "max_batch_tokens")


def resume_key(name: str, source: str, step: int | None, probs, protocol: dict) -> dict:
    """What must be equal for samples of an earlier evaluation to be kept."""
    digest = hashlib.sha256(json.dumps([[p.id, p.answer] for p in probs], ensure_ascii=False).encode()).hexdigest()
    return {"benchmark": name, "model": source, "step": step, "num_problems": len(probs), "problems": digest,
            "protocol": {k: v for k, v in protocol.items() if k not in RESUME_IGNORES}}


def _differs(a: dict, b: dict, prefix: str = "") -> list[str]:
    out = []
    for k in sorted(set(a) | set(b)):
        if isinstance(a.get(k), dict) and isinstance(b.get(k), dict):
            out += _differs(a[k], b[k], f"{prefix}{k}.")
        elif a.get(k) != b.get(k):
            out.append(prefix + k)
    return out


def complete_summary(bench_dir: Path, key: dict, probs) -> dict | None:
    """The summary of a benchmark already evaluated completely with `key`, else None."""
    path = Path(bench_dir) / SUMMARY
    if (Path(bench_dir) / EVAL_PARTIAL).exists() or not path.is_file():
        return None
    try:
        summary = read_json(path)
        protocol = {k: v for k, v in summary["protocol"].items() if k not in RESUME_IGNORES}
        same = ([p["id"] for p in summary["per_problem"]] == [p.id for p in probs]
                and (summary["benchmark"], summary["model"], summary["step"], protocol)
                == (key["benchmark"], key["model"], key["step"], key["protocol"]))
    except Exception:  # an unreadable or older summary: evaluated again
        return None
    return summary if same else None


@dataclass
class Partial:
    """What an interrupted evaluation kept: the sample lines of its first `problems` problems
    (whole generation calls), and the prompts per call it was sampled with."""

    lines: list[dict]
    problems: int
    prompts_per_call: int


def start(bench_dir: Path, key: dict, prompts_per_call: int) -> None:
    """Begin a benchmark from scratch: its marker first, then an empty samples file (a summary of an
    earlier evaluation is removed: it would not describe the samples that follow)."""
    bench_dir = Path(bench_dir)
    bench_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(bench_dir / EVAL_PARTIAL, json.dumps({"key": key, "prompts_per_call": prompts_per_call}, indent=1,
                                                      ensure_ascii=False))
    write_atomic(bench_dir / EVAL_SAMPLES, "")
    (bench_dir / SUMMARY).unlink(missing_ok=True)


def resumable(bench_dir: Path, key: dict, probs, n: int, prompts_per_call: int, log) -> Partial | None:
    """The part of an interrupted evaluation of `key` in `bench_dir` that can be kept, or None (then
    the caller starts over; `log` says why, where there was something to resume)."""
    bench_dir = Path(bench_dir)
    marker = bench_dir / EVAL_PARTIAL
    if not marker.is_file():
        return None
    try:
        recorded = json.loads(marker.read_text())
        old_key, per_call = recorded["key"], int(recorded["prompts_per_call"])
    except (OSError, ValueError, KeyError, TypeError):
        log(f"notice: {marker} is unreadable; evaluating {key['benchmark']} from the start")
        return None
    if old_key != key:
        log(f"notice: the partial evaluation in {bench_dir} was made with another "
            f"{', '.join(_differs(old_key, key)[:4])}; evaluating {key['benchmark']} from the start")
        return None
    if per_call > prompts_per_call:
        log(f"notice: the partial evaluation in {bench_dir} sampled {per_call} prompts per call, the batch limits "
            f"now allow {prompts_per_call}; evaluating {key['benchmark']} from the start")
        return None
    path = bench_dir / EVAL_SAMPLES
    try:
        read = read_log(path)
    except CorruptLog as e:
        log(f"notice: {e}; evaluating {key['benchmark']} from the start")
        return None
    lines, whole = read.records, 0
    for i, p in enumerate(probs):  # problems whose n samples are all there, in order
        mine = lines[i * n:(i + 1) * n]
        if len(mine) < n or any(x.get("id") != p.id or x.get("sample") != j for j, x in enumerate(mine)):
            break
        whole = i + 1
    kept = whole if whole == len(probs) else whole - whole % per_call  # whole calls only
    if kept * n != len(lines) or read.torn is not None:  # a call cut short: its lines go
        write_atomic(path, "".join(sample_line(x) for x in lines[:kept * n]))
    return Partial(lines[:kept * n], kept, per_call)


def sample_line(record: dict) -> str:
    """One line of ``samples.jsonl``."""
    return json.dumps(record, ensure_ascii=False) + "\n"


def append(bench_dir: Path, records: list[dict]) -> None:
    """The graded samples of one generation call, appended and flushed to disk."""
    append_lines(Path(bench_dir) / EVAL_SAMPLES, "".join(sample_line(r) for r in records))


def finish(bench_dir: Path, summary: dict) -> None:
    """The benchmark is complete: its summary, then the marker goes."""
    write_atomic(Path(bench_dir) / SUMMARY, json.dumps(summary, indent=2, ensure_ascii=False) + "\n", kind="eval_summary")
    (Path(bench_dir) / EVAL_PARTIAL).unlink(missing_ok=True)


def kept_problems(bench_dir: Path, n: int) -> int | None:
    """What an interrupted evaluation kept in `bench_dir`: the problems whose n samples are on disk,
    None when the benchmark is complete (its summary written)."""
    bench_dir = Path(bench_dir)
    if (bench_dir / SUMMARY).is_file() and not (bench_dir / EVAL_PARTIAL).exists():
        return None
    try:
        return len(read_log(bench_dir / EVAL_SAMPLES).records) // max(n, 1)
    except (CorruptLog, OSError):
        return 0
