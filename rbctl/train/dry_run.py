"""A training recipe's plan, offline: what would run, and what one step costs, without a GPU.

`dry_run(cfg)` resolves what it can from local files and the Hugging Face cache (never the
network: `try_to_load_from_cache` / `scan_cache_dir` only) and returns a printable plan:
model, data, estimator, budget, P, G, steps, engine, and per step

    tokens          T = P · G · (mean prompt tokens + max_new_tokens)       (upper bound)
    rollout FLOPs   2 · N · T                                                (forward only)
    training FLOPs  6 · N · T · ppo_epochs                                   (forward + backward)
    extra forwards  2 · N · T for the reference model (kl_coef > 0, log_kl, or a method that needs it),
                    2 · N · T / kappa_eff_every for κ_eff,
                    2 · N · T for the behaviour policy's log-probs with several mini-batches

N counts every parameter (the usual 2N / 6N rule; attention's L² term is left out). Where each
number comes from is printed beside it: N from the cached model config (exact count on the meta
device), else the shipped config.json fields of the models the recipes name
(`rbctl.train.footprint.KNOWN_ARCHITECTURES`), counted the same way; prompt tokens from the cached tokenizer on cached data,
else ≈ 4 characters per token of the cached data, else a stated assumption.

    rbctl train configs/paper_qwen3_8b.yaml --dry-run [--set key=value ...]
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rbctl.config.train import TrainConfig
from rbctl.train.footprint import plan_rows, training_state_line
from rbctl.train.objective import keeps_reference
from rbctl.train.plan_inputs import Resolved, prompt_tokens, resolve_data, resolve_model


def _sci(x: float) -> str:
    return f"{x:.2e}"


@dataclass(frozen=True)
class StepCost:
    """Per-step token and FLOP estimates (upper bounds: every response runs to max_new_tokens)."""

    prompt_tokens: float
    tokens: float
    rollout_flops: float | None
    train_flops: float | None
    ref_flops: float | None
    kappa_flops: float | None
    old_flops: float | None = None  # the behaviour policy's no-grad pass (M > 1 mini-batches)

    @property
    def total_flops(self) -> float | None:
        parts = (self.rollout_flops, self.train_flops, self.ref_flops, self.kappa_flops, self.old_flops or 0.0)
        return None if self.rollout_flops is None else sum(parts)


def step_cost(cfg: TrainConfig, prompt_tokens: float, n_params: float | None) -> StepCost:
    ro, a = cfg.rollout, cfg.algo
    tokens = ro.prompts_per_step * ro.group_size * (prompt_tokens + ro.max_new_tokens)
    if n_params is None:
        return StepCost(prompt_tokens, tokens, None, None, None, None)
    has_ref = keeps_reference(a)
    several = a.ppo_mini_batch_size is not None and a.ppo_mini_batch_size < ro.prompts_per_step
    return StepCost(
        prompt_tokens, tokens,
        rollout_flops=2 * n_params * tokens,
        train_flops=6 * n_params * tokens * a.ppo_epochs,
        ref_flops=2 * n_params * tokens if has_ref else 0.0,
        kappa_flops=2 * n_params * tokens / cfg.kappa_eff_every if cfg.kappa_eff_every else 0.0,
        old_flops=2 * n_params * tokens if several else 0.0,
    )


def _machine_line(cfg: TrainConfig) -> str:
    """Where the run trains here (model.device resolved) and, when this machine cannot run it, why
    (`rbctl.train.preflight.machine_problems`, each naming its fix)."""
    import torch

    from rbctl.train.preflight import machine_problems, resolved_device

    problems = machine_problems(cfg)
    if problems:
        return "cannot run it (plan only): " + "; ".join(problems)
    if resolved_device(cfg) == "cpu":
        why = " (model.device auto: CUDA is not available)" if cfg.model.device == "auto" else ""
        return f"trains on the CPU{why}, engine {cfg.rollout.engine}"
    return f"trains on CUDA ({torch.cuda.get_device_name(0)}), engine {cfg.rollout.engine}"


def _memory_rows(cfg: TrainConfig, r: Resolved, c: StepCost, prompt_tokens: float) -> list[tuple[str, str]]:
    """A CPU run's training-state line; a GPU run's memory per GPU and time (rbctl.train.footprint), its
    warnings added to `r.warnings`."""
    if cfg.model.device == "cpu" or r.arch is None:
        return [("memory", training_state_line(cfg, r.n_params))]
    extra = c.ref_flops + c.kappa_flops + (c.old_flops or 0.0)
    rows, warned = plan_rows(cfg, r.n_params, r.arch, prompt_tokens, extra, builtin=cfg.model.name == "builtin")
    r.warnings += warned
    return rows


def dry_run(cfg: TrainConfig, *, source: str | None = None, cache_dir: str | Path | None = None) -> str:
    """The printable plan of a validated training config, resolved offline (nothing is downloaded).
    `cache_dir` is the Hugging Face hub cache to look in (default: the user's). A config no machine
    could run (an unknown benchmark, a missing local model or data file:
    `rbctl.train.preflight.config_problems`) is refused with a `UserError` naming every problem."""
    from rbctl.errors import UserError
    from rbctl.train.preflight import config_problems

    if problems := config_problems(cfg):
        raise UserError("; ".join(problems))
    r = Resolved()
    resolve_model(cfg, r, cache_dir)
    resolve_data(cfg, r, cache_dir)
    ptok, ptok_src = prompt_tokens(cfg, r)
    c = step_cost(cfg, ptok, r.n_params)
    ro, a, o = cfg.rollout, cfg.algo, cfg.optim
    P, G = ro.prompts_per_step, ro.group_size

    lines = [f"rbctl dry run{': ' + source if source else ''} (offline: nothing downloaded, nothing trained)", ""]

    def row(label: str, text: str) -> None:
        lines.append(f"{label:<14}{text}")

    row("model", f"{cfg.model.name}: {r.model_note}")
    if r.n_params is not None:
        row("", f"N ≈ {_sci(r.n_params)} parameters ({r.n_source}); dtype {cfg.model.dtype}, device {cfg.model.device}"
                + (", gradient checkpointing" if cfg.model.gradient_checkpointing else ""))
    row("data", r.data_note)
    if cfg.data.source != "builtin":
        row("", f"fields problem='{cfg.data.problem_field}', answer='{cfg.data.answer_field}'; template {cfg.data.template}")
    budget = f"budget B = {a.budget:g}, shift c = {a.shift:g}" if a.budget is not None else "no budget"
    row("algorithm", f"{a.estimator}, {budget}; loss {a.loss_agg}; clip ε {a.clip_low:g}/{a.clip_high:g}; "
                     f"KL coef {a.kl_coef:g}{' (logged)' if a.log_kl else ''}; entropy bonus {a.entropy.mode}")
    row("rollout", f"engine {ro.engine}; P = {P} prompts × G = {G} rollouts; max_new_tokens {ro.max_new_tokens}; "
                   f"temperature {ro.temperature:g}, top_p {ro.top_p:g}")
    kappa = f"κ_eff every {cfg.kappa_eff_every} steps" if cfg.kappa_eff_every else "κ_eff never"
    mb = a.ppo_mini_batch_size or P
    row("schedule", f"{cfg.steps} steps × {a.ppo_epochs} PPO epoch(s) × {P // mb} mini-batch(es) of {mb} prompts; lr {o.lr:g} ({o.schedule}, warm-up {o.warmup_steps}); "
                    f"{kappa}; checkpoint every {cfg.save_every}")
    ev = cfg.eval
    row("eval", f"every {ev.every} steps on {', '.join(ev.benchmarks)} (n {ev.n}, temperature {ev.temperature:g})"
        if ev.every else "no periodic evaluation")
    lines += ["", "per step (upper bound: every response runs to max_new_tokens)"]
    row("  prompt", f"{ptok:.0f} tokens per prompt ({ptok_src})")
    row("  tokens", f"P·G·(prompt + max_new) = {P}·{G}·({ptok:.0f} + {ro.max_new_tokens}) = {_sci(c.tokens)}")
    if c.total_flops is not None:
        row("  rollout", f"2·N·tokens = {_sci(c.rollout_flops)} FLOPs")
        row("  training", f"6·N·tokens·ppo_epochs = {_sci(c.train_flops)} FLOPs")
        row("  extra", f"reference {_sci(c.ref_flops)} + κ_eff {_sci(c.kappa_flops)} + behaviour log-probs "
                       f"{_sci(c.old_flops)} FLOPs (forward passes)")
        row("  total", f"{_sci(c.total_flops)} FLOPs per step, {_sci(c.total_flops * cfg.steps)} for {cfg.steps} steps")
        for label, text in _memory_rows(cfg, r, c, ptok):
            row(label, text)
    else:
        row("  FLOPs", "unknown (no parameter count)")
    row("this machine", _machine_line(cfg))
    if r.warnings:
        lines += ["", "warnings"] + [f"  - {w}" for w in r.warnings]
    return "\n".join(lines) + "\n"
