"""`rbctl eval`: sample n completions per problem, grade them, and write metrics with 95% intervals.

For each benchmark, ``OUT/<benchmark>/`` receives:
- ``summary.json`` (written atomically, last): ``benchmark, model, step, n, num_problems``; ``metrics`` = ``avg@n`` (the key is
  literally ``avg@n``; ``n`` is stored beside it), ``pass@K`` and ``maj@K`` for K = 1, 2, 4, … ≤ n,
  each ``{value, ci_low, ci_high}`` (docs/method.md, "Evaluation metrics"; rbctl.grading.metrics);
  ``per_problem`` (correct samples per problem, for intervals across seeds); ``grader`` status
  counts; ``extraction`` counts of how answers were found (``boxed``, ``phrase``, ``none`` for the
  math grader; ``task``, ``none`` for a benchmark with its own extractor); ``labels`` (share of each
  value of the benchmark's per-sample labels, where it has any, e.g. the fixpoint task's
  ``{"strategy": {"walk": 0.16, "shortcut": 0.84}}``); ``protocol`` (everything that decides the
  figures: engine and its ``sampler`` (the hf engine's own sampling loop, or transformers'
  ``generate``), sampling, template and an example prompt, the grader and its ``extraction``
  policy, versions, device, dtype, threads); ``time_s``, ``tokens_per_s``.
- ``samples.jsonl``: one line per sample (problem id, sample index, completion, extracted answer
  and how it was found, gold, correct, grade status, finished), appended and flushed as each
  generation call is graded; while the benchmark is incomplete ``partial.json`` beside it says
  what resumes it (`rbctl.eval.partial`: an interrupted `rbctl eval` keeps what it graded).

Grading: each benchmark's own grader (``Benchmark.extract_answer``, and ``Benchmark.check`` where many
answers are right): the built-in tasks' answers are the task's own and vote by string equality; every
other benchmark goes through ``rbctl.grading.verify`` (math-verify) and votes with ``answers_equivalent``.

Engines: an `Engine` (rbctl.rollout.base) built by `build_engine` from ``cfg.engine``: ``hf`` is
``rbctl.rollout.hf.HFEngine``, bounded per call by ``cfg.batch_size`` sequences and
``cfg.max_batch_tokens`` sequence-tokens (defaults: `default_batch_size`,
`default_max_batch_tokens`); ``vllm`` is ``rbctl.rollout.vllm.VLLMEngine`` (it loads
``policy.source`` and syncs the in-memory weights). A trainer passes its own vLLM engine instead
(rbctl.train.loop). Prompts go to the engine in calls of `Engine.prompts_per_call` prompts, call c
seeded ``seed + c``.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections import Counter
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from rbctl.config.eval import BUILTIN_MAX_NEW_TOKENS, DEFAULT_MAX_NEW_TOKENS, EvalConfig
from rbctl.rollout.base import Engine, SamplingParams
from rbctl.rollout.factory import build_engine, default_batch_size, default_max_batch_tokens
from rbctl.tasks.benchmarks import benchmark_for, is_custom_spec

if TYPE_CHECKING:
    from rich.progress import Progress

    from rbctl.tasks.benchmarks import Problem
    from rbctl.grading.verify import GradeResult
    from rbctl.rollout.models import LoadedPolicy

GRADE_CHUNK = 64  # samples graded between progress updates
# Above this share of samples cut off at max_new_tokens, or with no answer found, `rbctl eval` warns:
# such a score says more about the length limit or the answer format than about the policy.
WARN_SHARE = 0.10


def load_problems(cfg: EvalConfig, task_spec=None) -> dict[str, list[Problem]]:
    """Problems of every benchmark in ``cfg``, in order; unknown names and missing data fail here.

    ``task_spec``: the built-in task's settings of the policy under evaluation (default settings
    when None), so that ``builtin`` is the test split of the task the policy was trained on."""
    from rbctl.tasks import builtin
    from rbctl.tasks.benchmarks import get_benchmark, load_benchmark

    builtin.register_benchmark(task_spec)  # so that `builtin` is also listed among the valid names
    for name in cfg.benchmarks:  # every name is checked before any data is read
        if not is_custom_spec(name):
            get_benchmark(name)
    return {name: load_benchmark(name, data_dir=cfg.data_dir, limit=cfg.limit) for name in cfg.benchmarks}


# ---------------------------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------------------------


def evaluate_policy(
    policy: LoadedPolicy,
    cfg: EvalConfig,
    out_dir: Path,
    progress: Progress | None = None,
    step: int | None = None,
    engine: Engine | None = None,
    problems: dict[str, list[Problem]] | None = None,
    precision=None,
    resume: bool = False,
    log=None,
) -> dict[str, dict]:
    """Evaluate an in-memory policy on ``cfg.benchmarks``; returns ``{benchmark: summary}``.

    Writes ``out_dir/<benchmark>/summary.json`` and ``samples.jsonl``, the samples appended as each
    generation call is graded (`rbctl.eval.partial`). ``progress``: a running rich Progress to add
    tasks to (None: silent). ``engine``: reuse an engine (the trainer's vLLM); by default one of
    ``cfg.engine`` is built. ``problems``: already loaded by `load_problems`. ``precision``: the
    training precision of a policy evaluated during its run (generation then runs in
    `Engine.sampling_context`); None for a policy loaded to be evaluated. ``resume``: keep what an
    interrupted evaluation of the same model, step, problems and protocol left in ``out_dir`` (a
    complete benchmark is kept as it is, a partial one continued with the same calls and seeds);
    else every benchmark is evaluated from the start. ``log``: where notices go (None: nowhere).
    """
    import torch

    from rbctl.tasks.prompting import resolve_template

    problems = problems if problems is not None else load_problems(cfg)
    device = next(policy.model.parameters()).device
    batch_size = max_batch_tokens = None
    if cfg.engine == "hf":
        batch_size = cfg.batch_size or default_batch_size(device.type)
        max_batch_tokens = cfg.max_batch_tokens or default_max_batch_tokens(policy.model, device)
    if engine is None:
        engine = build_engine(cfg.engine, policy.model, policy.tokenizer, source=policy.source,
                              batch_size=batch_size, max_batch_tokens=max_batch_tokens, seed=cfg.seed)
    template = resolve_template(policy.tokenizer, cfg.template, policy.builtin is not None)
    instruction = None if template == "builtin" else cfg.instruction
    params = SamplingParams(
        n=cfg.n, temperature=cfg.temperature, top_p=cfg.top_p, seed=cfg.seed,
        max_new_tokens=cfg.max_new_tokens or (BUILTIN_MAX_NEW_TOKENS if policy.builtin is not None else DEFAULT_MAX_NEW_TOKENS),
    )
    param = next(policy.model.parameters())
    protocol = {
        "engine": engine.name, "sampler": getattr(engine, "sampler", engine.name),
        "n": params.n, "temperature": params.temperature, "top_p": params.top_p,
        "max_new_tokens": params.max_new_tokens, "seed": params.seed, "batch_size": batch_size,
        "max_batch_tokens": max_batch_tokens,
        "template": template, "instruction": instruction, "answer_extraction": cfg.extraction,
        "grader_timeout_s": cfg.grader_timeout_s,
        "versions": _versions(), "device": str(device), "dtype": str(param.dtype).removeprefix("torch."),
        "threads": torch.get_num_threads(),
    }
    run = _Benchmarks(policy, engine, params, protocol, cfg.grader_timeout_s, Path(out_dir), step, progress, precision,
                      resume, log or (lambda *a: None))
    return {name: run.evaluate(name, probs) for name, probs in problems.items()}


class _Benchmarks:
    """One evaluation's settings, and the evaluation of one benchmark under them (`evaluate`)."""

    def __init__(self, policy, engine, params, protocol, timeout_s, out_dir, step, progress, precision, resume, log):
        self.policy, self.engine, self.params, self.protocol = policy, engine, params, protocol
        self.timeout_s, self.out_dir, self.step, self.progress = timeout_s, out_dir, step, progress
        self.precision, self.resume, self.log = precision, resume, log

    def evaluate(self, name: str, probs: list[Problem]) -> dict:
        """Evaluate benchmark `name` on `probs` into its folder; returns its summary. Under `resume`, a
        complete result of the same protocol is kept as it is and a partial one continued."""
        from rbctl.eval import partial
        from rbctl.tasks.prompting import encode_prompts

        t0 = time.perf_counter()
        policy, params = self.policy, self.params
        bench_dir = self.out_dir / bench_dir_name(name)
        protocol = self._bench_protocol(name, probs)
        key = partial.resume_key(name, policy.source, self.step, probs, protocol)
        if self.resume:
            kept = partial.complete_summary(bench_dir, key, probs)
            if kept is not None:
                self.log(f"{name}: already evaluated in {bench_dir} with this protocol; kept")
                return kept
        prompts = encode_prompts(policy.tokenizer, [p.problem for p in probs], protocol["template"],
                                 protocol["instruction"] or "", policy.builtin or "links")
        per_call = self.engine.prompts_per_call(max(map(len, prompts), default=0), params) or max(1, len(prompts))
        done = partial.resumable(bench_dir, key, probs, params.n, per_call, self.log) if self.resume else None
        if done is None:
            partial.start(bench_dir, key, per_call)
            records, first = [], 0
        else:
            per_call, records, first = done.prompts_per_call, done.lines, done.problems
            if first:
                self.log(f"{name}: resuming in {bench_dir}: {first} of {len(probs)} problems already graded")
        gen_s, new_tokens = self._generate(name, probs, prompts, per_call, first, bench_dir, records)
        summary = _summarize(name, probs, records, params.n, policy.source, self.step, protocol)
        summary["time_s"] = round(time.perf_counter() - t0, 3)
        summary["tokens_per_s"] = round(new_tokens / gen_s, 2) if gen_s > 0 else None
        partial.finish(bench_dir, summary)
        return summary

    def _bench_protocol(self, name: str, probs: list[Problem]) -> dict:
        """The evaluation's protocol with what is the benchmark's own: an example prompt, its grader
        and how its answers are found."""
        from rbctl.tasks.prompting import render_prompt

        template, instruction = self.protocol["template"], self.protocol["instruction"]
        task = self.policy.builtin or "links"  # the `builtin` template of a policy that is not built in: links
        return {
            **self.protocol,
            "example_prompt": render_prompt(self.policy.tokenizer, probs[0].problem, template, instruction or "", task),
            "grader": benchmark_for(name).grader,
            "extraction": _extraction_policy(name, self.protocol["answer_extraction"]),
        }

    def _generate(self, name: str, probs: list[Problem], prompts: list, per_call: int, first: int, bench_dir: Path,
                  records: list[dict]) -> tuple[float, int]:
        """Generate and grade the problems from `first` on, in calls of `per_call` prompts, appending
        each call's sample lines to the benchmark's folder and to `records`; returns (seconds spent
        generating, new tokens)."""
        from dataclasses import replace

        from rbctl.eval import partial

        params = self.params
        meter = _Meter(self.progress, name, len(probs) * params.n, params.max_new_tokens, first * params.n)
        gen_s, new_tokens = 0.0, 0
        # call c holds problems c·per_call … and samples with seed + c; calls before `first` were kept
        # from the interrupted evaluation (whole calls)
        starts = [start for start in range(0, len(prompts), per_call) if start >= first]
        calls = [(prompts[start:start + per_call], replace(params, seed=None if params.seed is None else params.seed + start // per_call))
                 for start in starts]
        with self.engine.sampling_context(self.precision) if self.precision is not None else contextlib.nullcontext():
            outs = self.engine.generate_calls(calls, progress=meter.advance_tokens)
            for start, (chunk, _) in zip(starts, calls):
                t = time.perf_counter()
                out = next(outs)
                gen_s += time.perf_counter() - t
                owners = probs[start:start + per_call]
                if len(out) != len(chunk) or any(len(per) != params.n for per in out):
                    counts = [len(per) for per in out]
                    raise RuntimeError(f"engine returned {counts} samples for {len(chunk)} prompts, n={params.n} each")
                meter.generated(len(out) * params.n)
                new_tokens += sum(len(s.token_ids) for per in out for s in per)
                grades = _grade(name, owners, out, self.timeout_s, meter.graded, self.protocol["answer_extraction"])
                lines = _sample_lines(owners, out, grades)
                partial.append(bench_dir, lines)
                records += lines
        return gen_s, new_tokens


class _Meter:
    """The progress of one benchmark: a generating task over sample-token slots (it moves while
    decoding) and a grading task over samples; both start at what a resumed evaluation kept."""

    def __init__(self, progress, name: str, total: int, max_new_tokens: int, kept: int):
        self.progress, self.total, self.done, self.marked = progress, total, kept, kept
        if progress:
            self.gen = progress.add_task(f"{name}: generating", total=total * max_new_tokens,
                                         completed=kept * max_new_tokens, detail=f"{kept}/{total} samples")
            self.grade = progress.add_task(f"{name}: grading", total=total, completed=kept,
                                           detail=f"{kept}/{total} samples")

    def advance_tokens(self, k: int) -> None:
        if self.progress:
            self.progress.advance(self.gen, k)

    def generated(self, k: int) -> None:
        self.done += k
        if self.progress:
            self.progress.update(self.gen, detail=f"{self.done}/{self.total} samples")

    def graded(self, k: int) -> None:
        self.marked += k
        if self.progress:
            self.progress.advance(self.grade, k)
            self.progress.update(self.grade, detail=f"{self.marked}/{self.total} samples")


def _extraction_policy(name: str, mode: str) -> dict[str, str] | str:
    """How answers are found for benchmark ``name``: the math grader's policy in extraction
    ``mode``, or the docstring of the benchmark's own extractor."""
    from rbctl.grading.extract import extraction_policy

    extract = benchmark_for(name).extract_answer
    if extract is None:
        return extraction_policy(mode)
    return (extract.__doc__ or extract.__qualname__).strip()


def _grade(name: str, probs, samples, timeout_s: float, advance, extraction: str = "final") -> list[list[GradeResult]]:
    """Grades ``[P][n]`` in the order of ``samples``, by the benchmark's own grader (the math
    grader in extraction mode ``extraction``); ``advance(k)`` is told of every `GRADE_CHUNK`
    samples graded."""
    from rbctl.grading.verify import GradeResult, grade_many

    bench = benchmark_for(name)

    texts = [s.text for per in samples for s in per]
    owners = [p for p, per in zip(probs, samples) for _ in per]
    flat: list[GradeResult] = []
    for start in range(0, len(texts), GRADE_CHUNK):
        t, o = texts[start:start + GRADE_CHUNK], owners[start:start + GRADE_CHUNK]
        if bench.extract_answer is not None:  # the task's own answers
            for text, problem in zip(t, o):
                correct, extracted = bench.task_grade(text, problem)
                found = extracted is not None
                flat.append(GradeResult(correct, extracted, "ok" if found else "no_answer",
                                        extraction="task" if found else "none"))
        else:
            flat += grade_many(t, [p.answer for p in o], timeout_s=timeout_s, extraction=extraction)
        advance(len(t))
    n = len(samples[0])
    return [flat[i * n:(i + 1) * n] for i in range(len(samples))]


def _sample_lines(probs, samples, grades) -> list[dict]:
    """The lines of ``samples.jsonl`` of graded samples ``[P][n]``."""
    return [{"id": p.id, "sample": j, "completion": s.text, "extracted": g.extracted, "extraction": g.extraction,
             "gold": p.answer, "correct": bool(g.correct), "status": g.status, "finished": bool(s.finished),
             "num_tokens": len(s.token_ids)}
            for p, per_s, per_g in zip(probs, samples, grades) for j, (s, g) in enumerate(zip(per_s, per_g))]


def _summarize(name, probs, lines, n, source, step, protocol) -> dict:
    """A benchmark's summary from its graded sample lines (`_sample_lines`, problem-major): the
    same whether they were graded now or kept from an interrupted evaluation."""
    import numpy as np
    from types import SimpleNamespace

    from rbctl.grading.metrics import summarize
    from rbctl.grading.extract import extraction_kinds
    from rbctl.grading.verify import STATUSES, answers_equivalent

    rows = [lines[i * n:(i + 1) * n] for i in range(len(probs))]
    correct = np.array([[x["correct"] for x in per] for per in rows], dtype=bool)  # [P, n]
    answers = [[x["extracted"] for x in per] for per in rows]
    if benchmark_for(name).extract_answer is not None:  # exact answers vote by string equality
        equivalent = str.__eq__
        kinds = ("task", "none")
    else:
        kinds = extraction_kinds(protocol.get("answer_extraction", "final"))
        timeout = protocol["grader_timeout_s"]
        equivalent = lambda a, b: answers_equivalent(a, b, timeout_s=timeout)  # noqa: E731
    metrics = summarize(correct, answers, equivalent=equivalent)
    metrics = {("avg@n" if k.startswith("avg@") else k): v for k, v in metrics.items()}
    counts = Counter(x["status"] for x in lines)
    found = Counter(x["extraction"] for x in lines)
    summary = {
        "benchmark": name,
        "model": source,
        "step": step,
        "n": n,
        "num_problems": len(probs),
        "metrics": metrics,
        "per_problem": [{"id": p.id, "n": n, "correct": int(c)} for p, c in zip(probs, correct.sum(axis=1))],
        "grader": {s: counts.get(s, 0) for s in STATUSES},
        "extraction": {k: found.get(k, 0) for k in kinds},
        "truncated": float(np.mean([not x["finished"] for x in lines])),
        "mean_new_tokens": float(np.mean([x["num_tokens"] for x in lines])),
        "protocol": protocol,
    }
    if benchmark_for(name).labels is not None:
        texts = [[SimpleNamespace(text=x["completion"]) for x in per] for per in rows]
        summary["labels"] = label_shares(benchmark_for(name).labels, probs, texts)
    return summary


def protocol_text(summary: dict) -> str:
    """What a score was measured with, in words: n, sampling, the token limit, the engine."""
    p = summary["protocol"]
    sampling = "greedy" if p["temperature"] == 0 else f"temperature {float(p['temperature'])}, top-p {float(p['top_p'])}"
    return f"n={p['n']}, {sampling}, at most {p['max_new_tokens']} new tokens, engine {p['engine']}"


def summary_warnings(summary: dict) -> list[str]:
    """One line per reason to doubt a benchmark's score: more than `WARN_SHARE` of its samples cut
    off at max_new_tokens (`truncated`), or with no answer found (`extraction` 'none')."""
    name, total = summary["benchmark"], summary["num_problems"] * summary["n"]
    out = []
    if summary["truncated"] > WARN_SHARE:
        out.append(f"{name}: {summary['truncated']:.0%} of samples were cut off at max_new_tokens "
                   f"{summary['protocol']['max_new_tokens']} before they ended; raise --max-new-tokens")
    none = summary["extraction"].get("none", 0) / total if total else 0.0
    if none > WARN_SHARE:
        out.append(f"{name}: {none:.0%} of samples gave no answer the grader could find (extraction 'none')")
    return out


def label_shares(labels, probs, samples) -> dict[str, dict[str, float]]:
    """Share of each value of each per-sample label over all samples: {label: {value: share}}."""
    counts: dict[str, Counter] = {}
    total = 0
    for p, per in zip(probs, samples):
        for s in per:
            total += 1
            for key, value in labels(s.text, p).items():
                counts.setdefault(key, Counter())[value] += 1
    return {k: {v: c / total for v, c in sorted(cnt.items())} for k, cnt in counts.items()}


def bench_dir_name(benchmark: str) -> str:
    """A folder name for a benchmark or custom spec (``file:data/x.jsonl@q,a`` -> ``x``,
    ``hf:openai/gsm8k:main:test`` -> ``gsm8k_main_test``)."""
    if is_custom_spec(benchmark):
        body = benchmark.removeprefix("file:").removeprefix("hf:").split("@")[0]
        benchmark = re.sub(r"\.(jsonl|parquet)$", "", body.rstrip("/").split("/")[-1]).replace(":", "_")
    return sanitize(benchmark)


def sanitize(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "model"


def _versions() -> dict[str, str | None]:
    out = {}
    for dist in ("rbctl", "torch", "transformers", "math-verify"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


# ---------------------------------------------------------------------------------------------
# Periodic evaluation lines (RUN_DIR/eval.jsonl) and the command
# ---------------------------------------------------------------------------------------------


def periodic_eval_line(summary: dict, step: int) -> dict:
    """One flat line of ``RUN_DIR/eval.jsonl`` from one benchmark's summary:
    ``{"step", "benchmark", "avg@n", "pass@1", …, "maj@K", "n"}`` (values only, no intervals), plus
    ``label/<label>/<value>`` shares where the benchmark labels its samples."""
    line = {"step": step, "benchmark": summary["benchmark"]}
    line.update({k: v["value"] for k, v in summary["metrics"].items()})
    line["n"] = summary["n"]
    for key, shares in summary.get("labels", {}).items():
        line.update({f"label/{key}/{value}": share for value, share in shares.items()})
    return line


def periodic_eval_lines(results: dict[str, dict], step: int) -> list[dict]:
    """`periodic_eval_line` for every benchmark of an `evaluate_policy` result."""
    return [periodic_eval_line(s, step) for s in results.values()]
