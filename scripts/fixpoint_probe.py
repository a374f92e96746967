"""Probe a fixpoint policy (warm start dir, or a run dir's checkpoint) on the task's test split.

    python3 -m scripts.fixpoint_probe MODEL_OR_RUN_DIR [--n 8] [--config configs/fixpoint.yaml] [--set k=v ...]

Prints one JSON line: pass@1 (avg@n), pass@n, walk fraction, pass@1 on depth-1 and deeper
problems, walk accuracy, shortcut accuracy, token entropy (response tokens, temperature 1).
"""
import argparse
import json
import time
from pathlib import Path

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--config", default="configs/fixpoint.yaml")
    ap.add_argument("--set", nargs="*", default=[])
    ap.add_argument("--limit", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.set_num_threads(1)
    from rbctl.algo.losses import token_entropy
    from rbctl.config.train import load_train_config
    from rbctl.rollout.base import SamplingParams
    from rbctl.rollout.hf import HFEngine
    from rbctl.rollout.models import load_policy
    from rbctl.tasks import fixpoint as fp
    from rbctl.tasks.fixpoint import check, format_problem
    from rbctl.train.batch import build_batch, response_logits
    from rbctl.train.data import task_spec

    cfg = load_train_config(Path(a.config), a.set)
    spec = task_spec(cfg)
    policy = load_policy(a.model, device="cpu", dtype="float32")  # a run directory: its newest intact checkpoint
    tok, model = policy.tokenizer, policy.model.eval()
    probs = fp.problems(spec, "test")[: a.limit]
    prompts = [tok(format_problem(p.problem))["input_ids"] for p in probs]
    eng = HFEngine(model, tok, max_batch=512)
    t = time.time()
    samples = eng.generate(prompts, SamplingParams(n=a.n, temperature=1.0, max_new_tokens=cfg.rollout.max_new_tokens, seed=a.seed))
    ent_sum = ntok = 0.0
    with torch.no_grad():
        for i in range(0, len(prompts), 32):
            ids, attn, resp, rmask, lp = build_batch(prompts[i:i + 32], samples[i:i + 32], tok.pad_token_id)
            logits = response_logits(model, ids, attn, lp, group_size=a.n)
            ent = token_entropy(logits, 1.0)
            ent_sum += (ent * rmask).sum().item()
            ntok += rmask.sum().item()
    rows = []
    for p, group in zip(probs, samples):
        d = fp.depth_of_problem(p.problem)
        for s in group:
            rows.append((d, fp.is_walk(s.text), check(s.text, p.answer)))
    def mean(xs):
        xs = list(xs)
        return round(sum(xs) / len(xs), 4) if xs else None
    per_prob = [[check(s.text, p.answer) for s in g] for p, g in zip(probs, samples)]
    out = {
        "model": policy.source,  # the checkpoint model folder a run directory resolved to
        "pass@1": mean(c for _, _, c in rows),
        f"pass@{a.n}": mean(any(g) for g in per_prob),
        "walk_frac": mean(w for _, w, _ in rows),
        "pass@1_depth1": mean(c for d, _, c in rows if d == 1),
        "pass@1_deep": mean(c for d, _, c in rows if d > 1),
        "walk_acc": mean(c for _, w, c in rows if w),
        "walk_acc_depth1": mean(c for d, w, c in rows if w and d == 1),
        "walk_acc_deep": mean(c for d, w, c in rows if w and d > 1),
        "shortcut_acc_depth1": mean(c for d, w, c in rows if not w and d == 1),
        "walk_frac_depth1": mean(w for d, w, _ in rows if d == 1),
        "walk_frac_deep": mean(w for d, w, _ in rows if d > 1),
        "entropy": round(ent_sum / ntok, 4),
        "secs": round(time.time() - t, 1),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
