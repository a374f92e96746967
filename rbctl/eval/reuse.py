"""What an evaluation folder already holds, read before `rbctl eval` evaluates anything: a run's
complete results under the protocol asked for (`existing_results`, `same_protocol`: reused rather
than evaluated again), a folder holding another protocol's complete result (`refuse_other_protocol`:
refused, it would be replaced), and what an interrupted evaluation kept (`kept_text`)."""

from __future__ import annotations

import json
from pathlib import Path

from rbctl.config.eval import DEFAULT_MAX_NEW_TOKENS, EvalConfig
from rbctl.errors import UserError
from rbctl.eval import protocols
from rbctl.eval.partial import kept_problems
from rbctl.eval.pipeline import bench_dir_name, protocol_text
from rbctl.store.read import read_json
from rbctl.store.rundir import EVAL_PARTIAL, SUMMARY, final_eval_dir, periodic_eval_dir, protocol_eval_dir


def kept_text(out_dir: Path, cfg: EvalConfig, problems: dict, protocol: dict) -> str:
    """What an interrupted evaluation under `protocol` left in `out_dir`, in words: "kept amc23
    complete, 48 of 256 gsm8k problems graded under n=4, … in OUT", one clause per benchmark started
    under this protocol (a benchmark folder holding another protocol's samples is not counted)."""
    parts = []
    for name, probs in problems.items():
        bench = Path(out_dir) / bench_dir_name(name)
        if not bench.is_dir() or not _holds(bench, protocol):
            continue
        kept = kept_problems(bench, cfg.n)
        parts.append(f"{name} complete" if kept is None else f"{min(kept, len(probs))} of {len(probs)} {name} problems graded")
    return f"kept {', '.join(parts) or 'nothing yet'} under {protocols.words(protocol)} in {out_dir}"


def _holds(bench: Path, protocol: dict) -> bool:
    """Whether a benchmark folder holds samples of `protocol`: its partial evaluation's key, else its
    summary, records it."""
    try:
        if (bench / EVAL_PARTIAL).is_file():
            return protocols.summary_matches(json.loads((bench / EVAL_PARTIAL).read_text())["key"], protocol)
        return protocols.summary_matches(json.loads((bench / SUMMARY).read_text()), protocol)
    except (OSError, ValueError, KeyError, TypeError):
        return False


def same_protocol(summary: dict, cfg: EvalConfig, step: int, problems: list) -> bool:
    """Whether a benchmark's complete `summary` measured what evaluating checkpoint `step` with `cfg`
    on `problems` would: the same step, problems, sampling (n, temperature, top-p, token limit,
    seed), engine, prompt and answer extraction, and the dtype and device where `cfg` names them.
    Threads, batch limits and library versions are not compared: they change how fast, not what, is
    measured (up to kernel rounding)."""
    p = summary.get("protocol") or {}
    max_new = cfg.max_new_tokens or DEFAULT_MAX_NEW_TOKENS
    checks = (
        summary.get("step") == step,
        [x.get("id") for x in summary.get("per_problem", [])] == [q.id for q in problems],
        (p.get("n"), p.get("temperature"), p.get("top_p"), p.get("max_new_tokens"), p.get("seed"))
        == (cfg.n, cfg.temperature, cfg.top_p, max_new, cfg.seed),
        p.get("engine") == cfg.engine and p.get("answer_extraction") == cfg.extraction,
        p.get("grader_timeout_s") == cfg.grader_timeout_s,
        cfg.template in ("auto", p.get("template")),
        p.get("instruction") in (None, cfg.instruction),  # None: a template without one (the built-in tasks')
        cfg.dtype == "auto" or p.get("dtype") == cfg.dtype,
        cfg.device == "auto" or str(p.get("device", "")).startswith(cfg.device),
    )
    return all(checks)


def existing_results(run_dir: Path, step: int, cfg: EvalConfig, problems: dict,
                     protocol: dict | None = None) -> dict[str, tuple[dict, Path]]:
    """{benchmark: (summary, its folder)} of each benchmark the run already holds a complete result of
    for checkpoint `step` under `cfg`'s protocol (`same_protocol`): a sweep's final evaluation (or an
    older `rbctl eval`'s, RUN_DIR/eval/step_N/), an earlier `rbctl eval` of `protocol` (its folder
    RUN_DIR/eval/step_N/protocol_X/), or the run's own periodic evaluation at that step
    (RUN_DIR/eval/periodic/step_N/: the last step's is the final held-out score training printed)."""
    found = {}
    places = [final_eval_dir(run_dir, step), periodic_eval_dir(run_dir, step)]
    if protocol is not None:
        places.insert(1, protocol_eval_dir(final_eval_dir(run_dir, step), protocol))
    for name, probs in problems.items():
        for where in places:
            bench = where / bench_dir_name(name)
            if not (bench / SUMMARY).is_file() or (bench / EVAL_PARTIAL).exists():
                continue
            try:
                summary = read_json(bench / SUMMARY)
            except Exception:  # an unreadable summary: evaluated again
                continue
            if summary.get("benchmark") == name and same_protocol(summary, cfg, step, probs):
                found[name] = (summary, bench)
                break
    return found


def refuse_other_protocol(out_dir: Path, problems: dict, protocol: dict) -> None:
    """A benchmark folder of `out_dir` holding another protocol's complete result is a one-line error:
    evaluating into it would replace that result."""
    for name in problems:
        bench = out_dir / bench_dir_name(name)
        if (bench / SUMMARY).is_file() and kept_problems(bench, 1) is None and not _holds(bench, protocol):
            try:
                theirs = protocol_text(json.loads((bench / SUMMARY).read_text()))
            except (OSError, ValueError, KeyError, TypeError):
                theirs = "unreadable"
            raise UserError(f"{bench} holds a complete evaluation under another protocol ({theirs}); this one "
                            f"({protocols.words(protocol)}) would replace it: write elsewhere (--out) or pass --force")
