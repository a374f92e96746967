"""Each method's settings as its own config block, and the rules that tie a block to its function.

A method (an estimator, a policy loss, an optional method such as the entropy mask) has one block,
the `algo` field named as the method (`algo.clip_cov`), whose keys are exactly its function's
keyword-only parameters, with the defaults declared in the block only: the functions in
rbctl.algo declare none (`check_method_blocks`, run when rbctl.config.train is imported). A block
of a selected method (`algo.estimator`, `algo.policy_loss`) is null unless that method is
selected; an optional method's block is null = off. Adding a method is its registry entry (or its
entry in `ADDED_METHODS`), its block here, an `algo` field for it (rbctl.config.train) and its test.
"""

from __future__ import annotations

import inspect
from typing import Callable, get_args

from pydantic import BaseModel, Field, model_validator

from rbctl import algo
from rbctl.config.base import Section


class PasskCfg(Section):
    """Pass@k Training (algo.estimator passk; rbctl.algo.passk)."""

    k: int = Field(..., ge=1, description="k of pass@k (1 <= k <= rollout.group_size); required with algo.estimator passk.")


class ClipCovCfg(Section):
    """Clip-Cov (algo.policy_loss clip_cov; rbctl.algo.policy_losses.clip_cov_loss); its PPO clip is algo.clip_low/clip_high."""

    ratio: float = Field(2e-4, gt=0.0, le=1.0, description="Fraction of valid tokens whose gradient is detached (verl's clip_cov_ratio).")
    lb: float = Field(1.0, description="Lower bound of the covariance window of candidate tokens (verl's clip_cov_lb).")
    ub: float = Field(5.0, description="Upper bound of the covariance window of candidate tokens (verl's clip_cov_ub).")

    @model_validator(mode="after")
    def _window(self):
        if self.lb >= self.ub:
            raise ValueError(f"algo.clip_cov.lb must be < algo.clip_cov.ub, got {self.lb} and {self.ub}")
        return self


class KlCovCfg(Section):
    """KL-Cov (algo.policy_loss kl_cov; rbctl.algo.policy_losses.kl_cov_loss)."""

    ratio: float = Field(2e-4, gt=0.0, le=1.0, description="Fraction of valid tokens (largest covariance) that get the KL penalty (verl's kl_cov_ratio).")
    coef: float = Field(1.0, ge=0.0, description="Coefficient β of |log π − log π_old| (verl's ppo_kl_coef).")


class GspoCfg(Section):
    """GSPO (algo.policy_loss gspo; rbctl.algo.policy_losses.gspo_loss): its own ε of the sequence
    ratio, in place of algo.clip_low/clip_high."""

    clip_low: float = Field(3e-4, ge=0.0, lt=1.0, description="ε_low of the sequence ratio (the paper's 3e-4).")
    clip_high: float = Field(4e-4, ge=0.0, description="ε_high of the sequence ratio (the paper's 4e-4).")


class EntropyMaskCfg(Section):
    """The high-entropy token mask ("80/20"; rbctl.algo.high_entropy_mask)."""

    rho: float = Field(0.2, gt=0.0, le=1.0, description="ρ: the policy-gradient loss is kept on the top ρ fraction of valid tokens by entropy, per micro-batch (the paper's 0.2).")


class UnlikelinessCfg(Section):
    """The unlikeliness reward (rbctl.algo.unlikeliness_rewards)."""

    beta: float = Field(0.25, gt=0.0, le=1.0, description="β: r ← r·(1 − β·rank/G), rank by the sampler's mean token log-prob (the authors' release: 0.25).")


# The choices whose selected entry brings its settings block: key -> its registry.
SELECTORS = {"estimator": algo.ESTIMATORS, "policy_loss": algo.POLICY_LOSSES}
# Optional methods (null = off): block -> its function.
ADDED_METHODS = {"entropy_mask": algo.high_entropy_mask, "unlikeliness": algo.unlikeliness_rewards}
# Parameters a method's function takes that are not its own settings: the PPO clip range of the losses
# that clip, from algo.clip_low/clip_high unless the block has its own (gspo), and the dual clip
# algo.clip_ratio_c of the loss that has one (clip); and what the trainer passes per call (clip_cov's
# seeded `generator`).
SHARED_PARAMS = ("clip_low", "clip_high", "clip_ratio_c")
RUNTIME_PARAMS = ("generator",)


def method_functions() -> dict[str, Callable]:
    """Every method that can have a settings block (the `algo` field of its name): estimators,
    policy losses and the optional methods, each with its function."""
    return {**{n: e.fn for n, e in algo.ESTIMATORS.items()}, **{n: p.fn for n, p in algo.POLICY_LOSSES.items()},
            **ADDED_METHODS}


def _block(schema: type[BaseModel], name: str) -> type[BaseModel] | None:
    field = schema.model_fields.get(name)
    if field is None:
        return None
    return next((a for a in (field.annotation, *get_args(field.annotation))
                 if isinstance(a, type) and issubclass(a, BaseModel)), None)


def check_method_blocks(schema: type[BaseModel], functions: dict[str, Callable] | None = None) -> None:
    """Raise TypeError unless every method's block holds exactly its function's own keyword-only
    parameters (all but `SHARED_PARAMS` it does not override and `RUNTIME_PARAMS`), and the defaults
    are declared once: in the block, not in the function."""
    problems = []
    for name, fn in (functions or method_functions()).items():
        params = algo.keyword_params(fn)
        block = _block(schema, name)
        keys = set(block.model_fields) if block is not None else set()
        where = f"algo.{name} ({block.__name__})" if block is not None else f"algo.{name} (no block)"
        if extra := sorted(keys - set(params)):
            problems.append(f"{where} has {', '.join(extra)}, which {fn.__name__} does not take")
        if missing := [p for p in params if p not in keys and p not in SHARED_PARAMS + RUNTIME_PARAMS]:
            problems.append(f"{where} lacks {', '.join(missing)}, parameters of {fn.__name__}")
        if twice := sorted(k for k in keys & set(params) if params[k] is not inspect.Parameter.empty):
            problems.append(f"{fn.__name__} declares a default for {', '.join(twice)}: the default belongs to {where} only")
    if problems:
        raise TypeError("method settings blocks do not match their functions: " + "; ".join(problems))


def method_params(a: BaseModel, name: str) -> dict[str, object]:
    """The keyword arguments of method `name`'s function from the config: its block's values, and
    the PPO clip (algo.clip_low/clip_high, algo.clip_ratio_c) where the function takes one the block
    does not hold."""
    block = getattr(a, name, None)
    own = block.model_dump() if isinstance(block, BaseModel) else {}
    params = algo.keyword_params(method_functions()[name])
    return {p: own[p] if p in own else getattr(a, p) for p in params if p not in RUNTIME_PARAMS}
