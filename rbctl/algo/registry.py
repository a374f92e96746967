"""The method registry: every method an arm can turn on is one `Method` record, and nothing else in
rbctl names a method.

A record carries the function (pure, in this package: imported on first call, so that reading the
registry needs no torch), its kind, its settings (the function's keyword-only parameters, each with
its default, description and bounds), what it needs of the trainer besides its kind's arguments
(`needs`: fields of one `MethodContext`, passed as keyword arguments of the same names), whether
it composes with the budget, its variant label, and the metrics it adds to a run's log. The trainer's objective
(`rbctl.train.objective`), the config schema (`rbctl.config.methods` builds each method's block
from its settings), the sweep's arm labels (`rbctl.config.sweep.arm_variant`), the metrics table
(`rbctl.train.metric_names`) and the generated docs (docs/config.md, docs/metrics.md) all read
this registry. Adding a method is its function and one `register(Method(...))` call, here or in a
module of your own named in the environment variable `RBCTL_METHODS` (comma-separated module
names, imported with `rbctl.algo`, so a sweep's worker processes see them too).

The kinds, and the contract of each kind's function (formulas and sources: docs/method.md):

- `estimator`: (rewards [P, G], budgeted: bool, **settings) -> advantages [P, G]; `algo.estimator`
  selects one; it is the arm's baseline.
- `policy_loss`: (logp, old_logp, advantages, mask, **settings, **needs) -> `PolicyLossResult`
  (per-token loss [N, T], boolean token statistics, token counts); `algo.policy_loss` selects one.
- `reward_transform`: (rewards [P, G], seq_logp [P, G], **settings) -> rewards [P, G], applied
  before the estimator; seq_logp is each response's mean sampled-token log-prob under the old
  policy. Its block `algo.<name>` is null = off.
- `token_mask`: (entropy [N, T], mask [N, T], **settings, **needs) -> bool [N, T]: the tokens that keep
  their policy-gradient loss; logged as `tokens/frac_<name>`. Block `algo.<name>`, null = off.
- `sampling_hook`: (correct [P, G]) -> bool [P]: the groups a step keeps; the trainer samples more
  prompts to fill P (up to `rollout.max_resample_rounds` rounds). Key `rollout.<name>`: a bool,
  since a hook has no settings.

What a policy loss or a token mask may need (`MethodContext`, per micro-batch): the policy's
per-token entropy, the reference's log-probs, the response lengths and a seeded generator. The
trainer computes what the methods that are on need (an entropy pass, a frozen reference) and
nothing else.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rbctl.errors import UserError

KINDS = ("estimator", "policy_loss", "reward_transform", "token_mask", "sampling_hook")
SELECTED = ("estimator", "policy_loss")  # one is chosen by `algo.<kind>`; the others are switched on one by one
OPTIONAL = ("token_mask", "reward_transform")  # a block `algo.<name>`, null = off (in this label order)
REQUIRED = inspect.Parameter.empty
NEEDS_KINDS = ("policy_loss", "token_mask")  # the kinds called per micro-batch, with a `MethodContext`


@dataclass(frozen=True)
class MethodContext:
    """What the trainer hands a policy loss or a token mask besides its kind's arguments, per
    micro-batch of n rows; a method receives the fields its record `needs`, as keyword arguments of
    the same names. A field no method that is on needs is None."""

    entropy: Any = None  # [n, T] the policy's per-token entropy (no gradient)
    ref_logp: Any = None  # [n, T] the reference's log-probs (the frozen initial policy)
    lengths: Any = None  # [n] response lengths (valid tokens)
    generator: Any = None  # a torch.Generator seeded by (run seed, step, epoch, micro-batch)

    def args_for(self, method: "Method") -> dict[str, Any]:
        return {name: getattr(self, name) for name in method.needs}


CONTEXT_FIELDS = tuple(MethodContext.__dataclass_fields__)


@dataclass(frozen=True)
class Lazy:
    """A built-in method's function, imported on first call (`load()` returns it): the registry is
    read without torch (the config schema, the report), and the import stays a line of code."""

    load: Callable[[], Callable]


@dataclass(frozen=True)
class Setting:
    """One setting of a method: a keyword-only parameter of its function, with its default
    (`REQUIRED`: none), the description the config reference prints, pydantic bounds (ge, gt, le,
    lt) and, in `at_most`, a config key (dotted) the value may not exceed."""

    default: object = REQUIRED
    doc: str = ""
    bounds: Mapping[str, float] = field(default_factory=dict)
    at_most: str | None = None


def setting(default: object = REQUIRED, doc: str = "", *, at_most: str | None = None, **bounds: float) -> Setting:
    return Setting(default, doc, bounds, at_most)


@dataclass(frozen=True)
class MetricDoc:
    """A metric a method adds to metrics.jsonl: its key and what it is (docs/metrics.md)."""

    key: str
    meaning: str


@dataclass(frozen=True)
class Method:
    """One method. `label` is the arm's variant label when the method is on (default: its name;
    `{}` is replaced by the name); an estimator is the arm's baseline and the default policy loss is
    the base, so neither adds a label. `no_budget` says why an estimator refuses the budget (None:
    it composes). `loss_agg`: an estimator's default loss aggregation, or the one a policy loss
    forces. `binary_rewards`: the estimator is derived for 0/1 rewards, so no reward transform
    composes with it. `shared`: keyword parameters the function takes from the `algo` keys of the
    same name (the PPO clip) unless its own settings hold them; `needs`: ones the trainer passes
    per call, fields of `MethodContext` (a policy loss or a token mask only). `check(settings) -> message or None` tests settings against
    each other (bounds of one setting go in its `Setting`)."""

    name: str
    kind: str
    function: Callable | Lazy  # the function, or a `Lazy` import of it
    title: str
    settings: Mapping[str, Setting] = field(default_factory=dict)
    label: str | None = None
    no_budget: str | None = None
    loss_agg: str | None = None
    binary_rewards: bool = False
    shared: tuple[str, ...] = ()
    needs: tuple[str, ...] = ()
    check: Callable[[Mapping[str, object]], str | None] | None = None
    metrics: tuple[MetricDoc, ...] = ()

    @property
    def fn(self) -> Callable:
        return self.function.load() if isinstance(self.function, Lazy) else self.function

    @property
    def params(self) -> dict[str, object]:
        """The function's keyword-only parameters -> default (`keyword_params`)."""
        return keyword_params(self.fn)

    @property
    def composes_with_budget(self) -> bool:
        return self.no_budget is None

    @property
    def source(self) -> str:
        """The function's dotted path (this imports it)."""
        f = self.fn
        return f"{f.__module__}.{f.__qualname__}"

    @property
    def config_key(self) -> str:
        """Where a config sets it: its block `algo.<name>`, or `rollout.<name>` for a sampling hook."""
        return f"rollout.{self.name}" if self.kind == "sampling_hook" else f"algo.{self.name}"

    @property
    def variant(self) -> str:
        return (self.label or "{}").format(self.name)


def keyword_params(fn: Callable) -> dict[str, object]:
    """A method's own settings: the keyword-only parameters of its function -> default
    (`inspect.Parameter.empty` where required). A fresh dict; the signature is read once."""
    return dict(_keyword_params(fn))


@functools.cache
def _keyword_params(fn: Callable) -> tuple[tuple[str, object], ...]:
    sig = inspect.signature(fn).parameters.values()
    return tuple((p.name, p.default) for p in sig if p.kind is inspect.Parameter.KEYWORD_ONLY)


def param_problems(known: dict[str, object], given) -> tuple[list[str], list[str]]:
    """(unknown, missing): the names in `given` that `known` (a `keyword_params`) lacks, sorted, and
    the required ones of `known` that `given` lacks."""
    return (sorted(set(given) - set(known)),
            [p for p, default in known.items() if default is REQUIRED and p not in given])


METHODS: dict[str, Method] = {}
# Views of the registry by kind, in registration order (kept current by `register`).
ESTIMATORS: dict[str, Method] = {}
POLICY_LOSSES: dict[str, Method] = {}
DEFAULT_POLICY_LOSS = "clip"


def settings_problems(m: Method) -> list[str]:
    """What does not match between a record's settings and its function's keyword-only parameters
    (this imports the function)."""
    params = m.params
    own = [p for p in params if p not in m.needs and (p not in m.shared or p in m.settings)]
    out = []
    if extra := sorted(set(m.settings) - set(params)):
        out.append(f"settings {', '.join(extra)} are not keyword-only parameters of {m.fn.__name__}")
    if missing := [p for p in own if p not in m.settings]:
        out.append(f"{m.fn.__name__} takes {', '.join(missing)}, which has no Setting")
    if absent := [p for p in m.needs if p not in params]:
        out.append(f"{m.fn.__name__} needs {', '.join(absent)} but takes no such keyword-only parameter")
    if twice := [p for p in m.settings if params.get(p, REQUIRED) is not REQUIRED]:
        out.append(f"{m.fn.__name__} declares a default for {', '.join(twice)}: the default belongs to its Setting")
    return out


def check_settings() -> None:
    """ValueError unless every record's settings match its function (run when the config schema is built)."""
    problems = [f"method '{m.name}': {p}" for m in METHODS.values() for p in settings_problems(m)]
    if problems:
        raise ValueError("; ".join(problems))


# Labels of what is not a registered method: the budget, the entropy bonus's modes, and no addition.
CORE_LABELS = ("base", "budget", "entropy_static", "entropy_adaptive", "entropy_none")
ENTROPY_BONUS_LABELS = ("entropy_static", "entropy_adaptive")  # an arm whose variant is one of these adds the bonus


def is_entropy_bonus(variant: str) -> bool:
    """Whether an arm's variant label is the entropy bonus (static or adaptive); `entropy_mask`, a
    registered token mask, is not: reports group and compare the bonus's arms by this."""
    return variant in ENTROPY_BONUS_LABELS


def _adds_label(m: Method) -> bool:
    """An estimator is the arm's baseline and the default policy loss is the base: neither is a variant."""
    return m.kind != "estimator" and m.name != DEFAULT_POLICY_LOSS


def variant_methods() -> list[Method]:
    """The methods that label an arm when on, in the order their labels join: the policy loss, then
    the token masks, the reward transforms and the sampling hooks, each in registration order."""
    order = ("policy_loss", "token_mask", "reward_transform", "sampling_hook")
    return [m for kind in order for m in of_kind(kind) if _adds_label(m)]


def register(method: Method) -> Method:
    """Add `method` to the registry. A name already taken by another function, an unknown kind, a
    sampling hook with settings or a variant label already taken is a ValueError naming it; whether
    the settings match the function is checked when the config schema is built (`check_settings`)."""
    old = METHODS.get(method.name)
    if old is not None and _function_key(old) != _function_key(method):
        raise ValueError(f"method '{method.name}' is already registered ({old.source})")
    problems = []
    if method.kind not in KINDS:
        problems.append(f"kind {method.kind!r} is not one of {', '.join(KINDS)}")
    if unknown := [n for n in method.needs if n not in CONTEXT_FIELDS]:
        problems.append(f"needs {', '.join(unknown)}, not one of {', '.join(CONTEXT_FIELDS)}")
    elif method.needs and method.kind not in NEEDS_KINDS:
        problems.append(f"a {method.kind} gets no context (only a {' or a '.join(NEEDS_KINDS)} has needs)")
    if method.kind == "sampling_hook" and method.settings:
        problems.append("a sampling hook has no settings (its config key is a bool)")
    taken = {o.variant: o.name for o in METHODS.values() if _adds_label(o) and o.name != method.name}
    if _adds_label(method) and (method.variant in CORE_LABELS or method.variant in taken):
        problems.append(f"variant label {method.variant!r} is taken ({taken.get(method.variant, 'a core label')})")
    if problems:
        raise ValueError(f"method '{method.name}': " + "; ".join(problems))
    METHODS[method.name] = method
    {"estimator": ESTIMATORS, "policy_loss": POLICY_LOSSES}.get(method.kind, {})[method.name] = method
    return method


def _function_key(m: Method) -> object:
    """What makes two records of one name the same method: the same `Lazy`, or a function of the
    same dotted path (a plug-in module imported twice)."""
    f = m.function
    return f if isinstance(f, Lazy) else f"{f.__module__}.{f.__qualname__}"


def needed(methods: list[Method], what: str) -> bool:
    """Whether one of `methods` needs `what` (a `MethodContext` field)."""
    return any(what in m.needs for m in methods)


def of_kind(kind: str) -> list[Method]:
    return [m for m in METHODS.values() if m.kind == kind]


def get_estimator(name: str) -> Method:
    try:
        return ESTIMATORS[name]
    except KeyError:
        raise UserError(f"unknown estimator '{name}'; valid: {', '.join(ESTIMATORS)}") from None


def get_policy_loss(name: str) -> Method:
    try:
        return POLICY_LOSSES[name]
    except KeyError:
        raise UserError(f"unknown policy loss '{name}'; valid: {', '.join(POLICY_LOSSES)}") from None


# --- the registered methods ------------------------------------------------------------------------
# Their functions' modules import torch: each is imported on a method's first call (`Lazy`).


def _advantages():
    from rbctl.algo import advantages
    return advantages


def _policy_losses():
    from rbctl.algo import policy_losses
    return policy_losses


def _arms():
    from rbctl.algo import arms
    return arms


AS_CLIP = "as `clip/frac_low`"

for _name, _fn, _agg, _title in (
    ("grpo", Lazy(lambda: _advantages().grpo), "seq-mean-token-mean", "GRPO: group-centred, std-scaled rewards"),
    ("dr_grpo", Lazy(lambda: _advantages().dr_grpo), "seq-mean-token-sum-norm", "Dr.GRPO: group-centred rewards, no std scaling"),
    ("rloo", Lazy(lambda: _advantages().rloo), "token-mean", "RLOO: leave-one-out baseline"),
    ("reinforce_pp", Lazy(lambda: _advantages().reinforce_pp), "token-mean",
     "REINFORCE++ (baseline form): group-centred, batch-whitened"),
):
    register(Method(_name, "estimator", _fn, _title, loss_agg=_agg))
# Sequence scores summed over tokens, as in MaxRL's estimator: a constant divisor (Dr.GRPO's mode).
register(Method("maxrl", "estimator", Lazy(lambda: _advantages().maxrl), "MaxRL: rewards over the group's mean reward",
                loss_agg="seq-mean-token-sum-norm",
                no_budget="maxrl already is the budget with B = G, and its division by mean(r) cancels any B"))
# verl's default aggregation, the framework the Pass@k Training authors' code plugs into.
register(Method("passk", "estimator", Lazy(lambda: _advantages().passk), "Pass@k Training: the analytic pass@k advantages",
                settings={"k": setting(doc="k of pass@k (1 <= k <= rollout.group_size); required with algo.estimator passk.",
                                       at_most="rollout.group_size", ge=1)},
                loss_agg="token-mean", binary_rewards=True,
                no_budget="passk's advantages are derived for binary rewards and budgeted rewards are not binary"))

register(Method(DEFAULT_POLICY_LOSS, "policy_loss", Lazy(lambda: _policy_losses().clip_loss),
                "PPO's clipped surrogate with dual ε and verl's dual clip; its clip is algo.clip_low/clip_high",
                shared=("clip_low", "clip_high", "clip_ratio_c")))
register(Method(
    "clip_cov", "policy_loss", Lazy(lambda: _policy_losses().clip_cov_loss),
    "Clip-Cov (verl's compute_policy_loss_clip_cov); its PPO clip is algo.clip_low/clip_high",
    settings={"ratio": setting(2e-4, "Fraction of valid tokens whose gradient is detached (verl's clip_cov_ratio).", gt=0.0, le=1.0),
              "lb": setting(1.0, "Lower bound of the covariance window of candidate tokens (verl's clip_cov_lb)."),
              "ub": setting(5.0, "Upper bound of the covariance window of candidate tokens (verl's clip_cov_ub).")},
    shared=("clip_low", "clip_high"), needs=("generator",),
    check=lambda s: None if s["lb"] < s["ub"] else f"lb must be < ub, got {s['lb']} and {s['ub']}",
    metrics=(MetricDoc("policy_loss/frac_cov_clipped",
                       f"fraction of valid tokens Clip-Cov detached (loss 0, no gradient), {AS_CLIP}: the realised "
                       "fraction, min(#candidates, max(⌊ratio·n⌋, 1)) of the n valid tokens of each call (a micro-batch "
                       "on one process: the mini-batch with `algo.micro_batch_size` 0), so 1/n, not `ratio`, while "
                       "ratio·n < 1"),
             MetricDoc("policy_loss/frac_cov_quota",
                       "the fraction Clip-Cov's quota asked for: Σ over its calls of max(⌊ratio·n⌋, 1) / valid tokens, "
                       f"{AS_CLIP}; above `algo.clip_cov.ratio` where the floor of one token binds (M / the batch's "
                       "tokens while ratio·n < 1 in each of M mini-batches); `policy_loss/frac_cov_clipped` is below it "
                       "when a call had fewer candidates"))))
register(Method(
    "kl_cov", "policy_loss", Lazy(lambda: _policy_losses().kl_cov_loss), "KL-Cov (verl's compute_policy_loss_kl_cov); no PPO clip",
    settings={"ratio": setting(2e-4, "Fraction of valid tokens (largest covariance) that get the KL penalty (verl's kl_cov_ratio).", gt=0.0, le=1.0),
              "coef": setting(1.0, "Coefficient β of |log π − log π_old| (verl's ppo_kl_coef).", ge=0.0)},
    metrics=(MetricDoc("policy_loss/frac_kl_penalised",
                       "fraction of valid tokens that got KL-Cov's penalty coef·|log π − log π_old|, "
                       f"{AS_CLIP}: the realised fraction, max(⌊ratio·n⌋, 1) of the n valid tokens of each call (as "
                       "`policy_loss/frac_cov_clipped`), so 1/n, not `ratio`, while ratio·n < 1"),)))
register(Method(
    "gspo", "policy_loss", Lazy(lambda: _policy_losses().gspo_loss),
    "GSPO: the sequence ratio with its own ε in place of algo.clip_low/clip_high",
    settings={"clip_low": setting(3e-4, "ε_low of the sequence ratio (the paper's 3e-4).", ge=0.0, lt=1.0),
              "clip_high": setting(4e-4, "ε_high of the sequence ratio (the paper's 4e-4).", ge=0.0)},
    loss_agg="seq-mean-token-mean", shared=("clip_low", "clip_high")))

register(Method(
    "entropy_mask", "token_mask", Lazy(lambda: _arms().high_entropy_mask),
    "The high-entropy token mask (\"80/20\"): policy-gradient loss only on the top ρ fraction of tokens by entropy",
    settings={"rho": setting(0.2, "ρ: the policy-gradient loss is kept on the top ρ fraction of valid tokens by entropy, "
                                  "per micro-batch (the paper's 0.2).", gt=0.0, le=1.0)},
    metrics=(MetricDoc("tokens/frac_entropy_mask",
                       f"fraction of valid tokens the high-entropy mask kept (H_t ≥ the 1 − ρ quantile), {AS_CLIP}"),)))
register(Method(
    "unlikeliness", "reward_transform", Lazy(lambda: _arms().unlikeliness_rewards),
    "The unlikeliness reward r·(1 − β·rank/G), a reward transform before the estimator",
    settings={"beta": setting(0.25, "β: r ← r·(1 − β·rank/G), rank by the sampler's mean token log-prob (the authors' "
                                    "release: 0.25).", gt=0.0, le=1.0)},
    metrics=(MetricDoc("reward/shaped_mean",
                       "mean of the rewards the estimator sees after the unlikeliness transform r·(1 − β·rank/G)"),)))
register(Method(
    "dynamic_sampling", "sampling_hook", Lazy(lambda: _arms().dynamic_sampling_keep),
    "DAPO dynamic sampling: keep only groups with 0 < K < G correct and sample more prompts to fill P "
    "(docs/method.md, \"Other arms\"); equal compute is then counted in generated rollouts (`rollout/generated`).",
    metrics=(MetricDoc("rollout/rounds", "rounds of P prompts sampled this step (1 = no resampling), mean over ranks"),
             MetricDoc("rollout/topped_up",
                       "filtered-out groups put back to fill P when the rounds ran out (zero advantage)"))))


PLUGINS_ENV = "RBCTL_METHODS"
for _module in filter(None, (m.strip() for m in os.environ.get(PLUGINS_ENV, "").split(","))):
    importlib.import_module(_module)
