"""Every metric rbctl logs, defined once: its key, what it is (the formula), the function that
computes it and when it is logged. docs/metrics.md is generated from these tables
(`python scripts/metrics_doc.py > docs/metrics.md`); tests/integration/test_metrics_doc.py checks
that the file is current, that every key a run logs is here and that every function named exists.

Notation: a step has P prompts × G rollouts; `mask` is 1 on response tokens up to and including
EOS, 0 on padding and the prompt; "token mean" is Σ over masked tokens / their number in the
batch (all ranks); a prompt is *mixed* when its rollouts' rewards are not all equal. A key may
hold a placeholder in angle brackets (`pass@<k>`), which stands for one path segment.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rbctl.algo import registry as methods


@dataclass(frozen=True)
class Metric:
    key: str  # as logged; <name> = a placeholder for one path segment
    meaning: str  # the formula, or what it counts
    source: str  # dotted path of the function that computes it
    when: str = "every step"

    def matches(self, key: str) -> bool:
        pattern = "".join("[^/]+" if part.startswith("<") else re.escape(part)
                          for part in re.split(r"(<[^>]+>)", self.key) if part)
        return re.fullmatch(pattern, key) is not None


def _when(m: methods.Method) -> str:
    return f"with `algo.{m.kind}: {m.name}`" if m.kind in methods.SELECTED else f"with `{m.config_key}`"


# The metrics the registered methods add (rbctl.algo.registry), each computed by its method's function.
METHOD_METRICS = tuple(Metric(d.key, d.meaning, m.source, _when(m)) for m in methods.METHODS.values() for d in m.metrics)

STEP = "rbctl.train.step.train_step"
BATCH = "rbctl.train.step_metrics.batch_metrics"
UPDATE = "rbctl.train.update.update"
PPO_STEPS = "the ppo_epochs × M optimizer steps of the step (M = P / algo.ppo_mini_batch_size)"

# RUN_DIR/metrics.jsonl: one line per optimizer step (rollout batch).
STEP_METRICS: tuple[Metric, ...] = (
    Metric("step", "the training step (one rollout batch), from 1", "rbctl.train.loop.train"),
    Metric("reward/mean", "mean of the graded reward r over the P×G rollouts (before any reward transform)", BATCH),
    Metric("acc/mean", "fraction of rollouts whose answer is correct (equal to `reward/mean` for binary rewards)", BATCH),
    Metric("kappa", "mean over mixed prompts of (mean A of the rollouts with r above the group mean − mean A of "
           "those below) / (mean r above − mean r below); null if no prompt is mixed", "rbctl.algo.sharpness.kappa"),
    Metric("kappa_eff", "`kappa` with d_i = Σ_t (log π_new − log π_old)(y_i) in place of A_i, from a forward pass "
           "after the step's last optimizer step (`rbctl.train.update.logratio_sums`); null where not "
           "measured or no prompt is mixed, or every optimizer step was skipped",
           "rbctl.algo.sharpness.kappa_eff", "every `kappa_eff_every` steps (else null)"),
    Metric("adv/gap", "mean over mixed prompts of (mean A of correct rollouts − mean A of wrong ones); equal to "
           "`kappa` for binary rewards", "rbctl.algo.sharpness.advantage_gap"),
    Metric("adv/abs_mean", "mean of |A| over the P×G rollouts", BATCH),
    Metric("groups/frac_all_correct", "fraction of prompts whose G rollouts are all correct",
           "rbctl.algo.sharpness.group_stats"),
    Metric("groups/frac_all_wrong", "fraction of prompts whose G rollouts are all wrong",
           "rbctl.algo.sharpness.group_stats"),
    Metric("groups/frac_mixed", "fraction of mixed prompts (the ones that carry a learning signal)",
           "rbctl.algo.sharpness.group_stats"),
    Metric("response/len_mean", "mean response length in tokens (EOS included)", BATCH),
    Metric("response/frac_truncated", "fraction of rollouts that reached `rollout.max_new_tokens` without EOS", BATCH),
    Metric("rollout/generated", "rollouts sampled this step, every round included (P·G without a sampling hook): "
           "what equal compute is counted in when arms use a sampling hook", "rbctl.train.sampling.collect_groups"),
    Metric("rollout/logprob_diff", "Σ_t m_t·|log π_engine(y_t) − log π_trainer(y_t)| / Σ_t m_t: the sampler's "
           "log-probs against the trainer's behaviour log-probs (float noise for the hf engine in the training "
           "precision; larger with `rollout.dtype: bfloat16` or vLLM, which `algo.tis_cap` corrects)",
           "rbctl.rollout.logprobs.logprob_mismatch", "when the engine returns log-probs (the hf engine in training, vLLM)"),
    Metric("entropy", "token mean of H_t = −Σ_v π(v|ctx) log π(v|ctx) over the full vocabulary, logits ÷ the "
           "sampling temperature, of the policy before the step's first optimizer step (not the sampled-token NLL)",
           "rbctl.algo.losses.entropy_of_logprobs"),
    Metric("kl", "token mean of the k3 estimator exp(q) − q − 1, q = log π_ref − log π_θ, against the frozen "
           "initial policy, before the update; null when no reference is kept (`algo.log_kl: false` and "
           "`algo.kl_coef: 0`)", "rbctl.algo.losses.k3_kl"),
    Metric("clip/frac_low", "fraction of valid tokens with ρ < 1 − ε_low and A < 0 (the lower PPO clip binds; ρ = "
           "π_θ/π_old per token, GSPO's sequence ratio on each of its tokens), mean over the ppo_epochs passes "
           "(each deals the whole batch into its mini-batches once); 0 for a policy loss without a PPO clip. Not verl's "
           "`pg_clipfrac_lower`, which is the dual clip's fraction (`clip/frac_dual`); verl's `pg_clipfrac` is "
           "`clip/frac_low` + `clip/frac_high`",
           "rbctl.algo.policy_losses.clip_loss"),
    Metric("clip/frac_high", "fraction of valid tokens with ρ > 1 + ε_high and A > 0 (the upper clip binds), as "
           "`clip/frac_low`", "rbctl.algo.policy_losses.clip_loss"),
    Metric("clip/frac_dual", "fraction of valid tokens with A < 0 and ρ > c = `algo.clip_ratio_c` (the dual clip "
           "binds: the loss is −A·c there; verl's `pg_clipfrac_lower`), as `clip/frac_low`; 0 when "
           "`algo.clip_ratio_c` is null and for the policy losses without one (as verl)",
           "rbctl.algo.policy_losses.clip_loss"),
    *METHOD_METRICS,
    Metric("loss/total", f"the aggregated loss (policy loss + kl_coef·KL − α·H), mean over {PPO_STEPS} "
           "(a skipped one counts 0)", UPDATE),
    Metric("entropy/alpha", "the entropy-bonus coefficient α used this step (0 when `algo.entropy.mode` is none; "
           "adaptive: α ← clip(α + δ·sign(H* − H), α_min, α_max) after the step)",
           "rbctl.algo.losses.adaptive_alpha"),
    Metric("grad_norm", f"global L2 norm of the gradient before clipping, mean over {PPO_STEPS} that were taken; "
           "null if every one was skipped", UPDATE),
    Metric("nonfinite/skipped", f"how many of {PPO_STEPS} were skipped because the loss or the gradient was "
           "not finite", UPDATE),
    Metric("grader/failures", "rollouts whose math-grader call timed out or errored this step (scored wrong, never "
           "string-compared); 0 for the built-in tasks' checker", "rbctl.train.training_data.reward_function"),
    Metric("grader/unevaluated", "rollouts whose answer was a computation left undone where a number is asked "
           "(`40 + 32` for 72: scored wrong, status `unevaluated`); a policy learning to restate the question shows "
           "here; 0 for the built-in tasks' checker", "rbctl.train.training_data.reward_function"),
    Metric("lr", "the learning rate of this step's optimizer steps", STEP),
    Metric("time/step_s", "wall seconds of the step (rollout + update + κ_eff)", STEP),
    Metric("time/rollout_s", "wall seconds of the step's sampling and grading", STEP),
    Metric("time/train_s", "wall seconds of the step's update", STEP),
    Metric("time/kappa_eff_s", "wall seconds of the step's κ_eff forward pass", STEP),
    Metric("time/eval_s", "wall seconds of the periodic evaluation", "rbctl.train.evaluation.PeriodicEvaluation",
           "on steps with a periodic evaluation (`eval.every`)"),
    Metric("throughput/tokens_per_s", "generated response tokens / `time/step_s`", STEP),
)

EVAL_LINE = "rbctl.eval.pipeline.periodic_eval_line"
# RUN_DIR/eval.jsonl: one line per (periodic evaluation, benchmark); the same values as that
# evaluation's summary.json (RUN_DIR/eval/periodic/...), without the intervals.
EVAL_METRICS: tuple[Metric, ...] = (
    Metric("step", "the training step evaluated (0 = the initial policy)", EVAL_LINE, "every `eval.every` steps"),
    Metric("benchmark", "the benchmark's name", EVAL_LINE, "every `eval.every` steps"),
    Metric("n", "samples per problem", EVAL_LINE, "every `eval.every` steps"),
    Metric("avg@n", "mean over problems of (correct samples / n): pass@1 estimated from n samples (the key is "
           "literally `avg@n`)", "rbctl.grading.metrics.avg_at_n", "every `eval.every` steps"),
    Metric("pass@<k>", "mean over problems of the unbiased 1 − C(n − c, k)/C(n, k) (c correct of n), for k = 1, 2, "
           "4, … ≤ n", "rbctl.grading.metrics.pass_at_k", "every `eval.every` steps"),
    Metric("maj@<k>", "fraction of problems whose majority answer among the first k samples is correct "
           "(math-verify-equivalent answers vote together; unanswered samples do not vote)",
           "rbctl.grading.metrics.maj_at_k", "every `eval.every` steps"),
    Metric("label/<name>/<value>", "share of the samples whose label `name` is `value` (the fixpoint task labels "
           "each sample's strategy: walk or shortcut)", "rbctl.eval.pipeline.label_shares",
           "for a benchmark that labels its samples"),
)
