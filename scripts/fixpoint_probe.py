"""Probe a fixpoint policy (a warm start folder, or a run directory's newest checkpoint) on the task's
test split: n samples per problem at temperature 1 from the hf engine.

    python3 -m scripts.fixpoint_probe MODEL_OR_RUN_DIR [--n 8] [--config configs/fixpoint.yaml] [--set k=v ...]

`probe` is the measurement the shipped warm starts record as their `properties`
(rbctl/tasks/warm_starts/index.json; `scripts/warm_starts.py` and the tests call it); the command
prints those and a finer breakdown as one JSON line: pass@1 (avg@n), pass@n, the walk's share,
pass@1 on depth-1 and deeper problems, the walk's and the shortcut's accuracy, and the token entropy
(nats/token over response tokens, EOS included, full vocabulary). It sits in scripts/, above the
package, because it uses the trainer's batch helpers on a task's problems.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path



@dataclass(frozen=True)
class Probe:
    """Per sample (depth of its problem, walks, correct), per problem its samples' correctness, and
    the token entropy."""

    rows: list[tuple[int, bool, bool]]
    per_problem: list[list[bool]]
    entropy: float


def sample(model, tokenizer, spec, n: int = 8, seed: int = 0, max_new_tokens: int = 20, limit: int | None = None) -> Probe:
    import torch

    from rbctl.algo.losses import token_entropy
    from rbctl.rollout.base import SamplingParams
    from rbctl.rollout.hf import HFEngine
    from rbctl.tasks import fixpoint as fp
    from rbctl.train.batch import build_batch, response_logits

    probs = fp.problems(spec, "test")[:limit]
    prompts = [tokenizer(fp.format_problem(p.problem))["input_ids"] for p in probs]
    model.eval()
    samples = HFEngine(model, tokenizer, max_batch=512).generate(
        prompts, SamplingParams(n=n, temperature=1.0, max_new_tokens=max_new_tokens, seed=seed))
    ent_sum = n_tok = 0.0
    with torch.no_grad():
        for i in range(0, len(prompts), 32):
            ids, attn, _, rmask, lp = build_batch(prompts[i:i + 32], samples[i:i + 32], tokenizer.pad_token_id)
            ent = token_entropy(response_logits(model, ids, attn, lp, group_size=n), 1.0)
            ent_sum += (ent * rmask).sum().item()
            n_tok += rmask.sum().item()
    rows = [(fp.depth_of_problem(p.problem), fp.is_walk(s.text), fp.check(s.text, p.answer))
            for p, group in zip(probs, samples) for s in group]
    per_problem = [[fp.check(s.text, p.answer) for s in group] for p, group in zip(probs, samples)]
    return Probe(rows, per_problem, round(ent_sum / max(n_tok, 1), 4))


def _mean(xs) -> float | None:
    xs = list(xs)
    return round(sum(xs) / len(xs), 4) if xs else None


def probe(model, tokenizer, spec, n: int = 8, seed: int = 0, max_new_tokens: int = 20) -> dict:
    """The properties a shipped warm start records: pass@1 (avg@n), pass@n, the share of samples
    that walk, the shortcut's accuracy on depth-1 problems, the walk's accuracy on depth-1 and
    deeper problems, and the token entropy."""
    p = sample(model, tokenizer, spec, n, seed, max_new_tokens)
    rows = p.rows
    return {
        "pass@1": _mean(c for _, _, c in rows),
        f"pass@{n}": _mean(any(g) for g in p.per_problem),
        "walk_share": _mean(w for _, w, _ in rows),
        "shortcut_acc_depth1": _mean(c for d, w, c in rows if d == 1 and not w),
        "walk_acc_depth1": _mean(c for d, w, c in rows if d == 1 and w),
        "walk_acc_deep": _mean(c for d, w, c in rows if d > 1 and w),
        "entropy": p.entropy,
    }


def breakdown(p: Probe, n: int) -> dict:
    """The command's finer breakdown of one probe."""
    rows = p.rows
    return {
        "pass@1": _mean(c for _, _, c in rows),
        f"pass@{n}": _mean(any(g) for g in p.per_problem),
        "walk_frac": _mean(w for _, w, _ in rows),
        "pass@1_depth1": _mean(c for d, _, c in rows if d == 1),
        "pass@1_deep": _mean(c for d, _, c in rows if d > 1),
        "walk_acc": _mean(c for _, w, c in rows if w),
        "walk_acc_depth1": _mean(c for d, w, c in rows if w and d == 1),
        "walk_acc_deep": _mean(c for d, w, c in rows if w and d > 1),
        "shortcut_acc_depth1": _mean(c for d, w, c in rows if not w and d == 1),
        "walk_frac_depth1": _mean(w for d, w, _ in rows if d == 1),
        "walk_frac_deep": _mean(w for d, w, _ in rows if d > 1),
        "entropy": p.entropy,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--config", default="configs/fixpoint.yaml")
    ap.add_argument("--set", nargs="*", default=[])
    ap.add_argument("--limit", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    import torch

    from rbctl.config.train import load_train_config
    from rbctl.rollout.models import load_policy
    from rbctl.train.training_data import task_spec

    torch.set_num_threads(1)
    cfg = load_train_config(Path(a.config), a.set)
    policy = load_policy(a.model, device="cpu", dtype="float32")  # a run directory: its newest intact checkpoint
    t = time.time()
    p = sample(policy.model, policy.tokenizer, task_spec(cfg), a.n, a.seed, cfg.rollout.max_new_tokens, a.limit)
    print(json.dumps({"model": policy.source, **breakdown(p, a.n), "secs": round(time.time() - t, 1)}))


if __name__ == "__main__":
    raise SystemExit(main())
