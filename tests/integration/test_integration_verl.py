"""rbctl.integrations.verl against verl's own estimator registry and its `grpo` / `rloo` estimators.

verl pins an older transformers than rbctl, so it is not installed beside rbctl. Where `import verl`
works (a verl environment), the tests use it. Otherwise they load verl's real
`verl/trainer/ppo/core_algos.py` (with the registry, `grpo` and `rloo` as verl ships them) from the
verl wheel, `pip download --no-deps verl==TESTED_VERL` once into pytest's cache (or the wheel at
$RBCTL_VERL_WHEEL), with stubs for the few imports that are not in the estimators' code path.
Where neither works (offline), the registry tests skip and the budget-off comparison runs against a
transcription of verl's `grpo` formula, labelled below.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import types
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from rbctl.algo import compute_advantages, kappa, nanmean_or_none
from rbctl.errors import UserError
from rbctl.integrations import verl as rb_verl

# Files copied verbatim from the wheel: the registry and estimators, and what they import that is
# plain Python (dataclass configs, the `deprecated` decorator).
VERBATIM = [
    "verl/version/version",
    "verl/base_config.py",
    "verl/trainer/config/__init__.py",
    "verl/trainer/config/algorithm.py",
    "verl/trainer/config/config.py",
    "verl/trainer/ppo/core_algos.py",
    "verl/utils/import_utils.py",
]
# Stubs for imports outside the estimators' code path (verl's top-level package pulls in Ray,
# tensordict and its own transformers pin). A stub that is ever called raises.
STUBS = {
    "verl/__init__.py": (
        "import os\n"
        "with open(os.path.join(os.path.dirname(__file__), 'version', 'version')) as f:\n"
        "    __version__ = f.read().strip()\n"
    ),
    "verl/trainer/__init__.py": "",
    "verl/trainer/ppo/__init__.py": "",
    "verl/workers/__init__.py": "",
    "verl/workers/config/__init__.py": "class ActorConfig:  # stub: policy-loss annotations only\n    pass\n",
    "verl/utils/__init__.py": (
        "def as_torch_index(*args, **kwargs):\n    raise NotImplementedError('stub (grpo_vectorized only)')\n"
        "def group_mean_std(*args, **kwargs):\n    raise NotImplementedError('stub (grpo_vectorized only)')\n"
    ),
    "verl/utils/torch_functional.py": (
        "def __getattr__(name):\n    raise NotImplementedError(f'stub: verl.utils.torch_functional.{name}')\n"
    ),
}


def _verl_wheel(cache_dir: Path) -> tuple[Path | None, str]:
    if os.environ.get("RBCTL_VERL_WHEEL"):
        wheel = Path(os.environ["RBCTL_VERL_WHEEL"])
        return (wheel, "") if wheel.is_file() else (None, f"RBCTL_VERL_WHEEL={wheel} is not a file")
    pattern = f"verl-{rb_verl.TESTED_VERL}-*.whl"
    if not list(cache_dir.glob(pattern)):
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q",
               "-d", str(cache_dir), f"verl=={rb_verl.TESTED_VERL}"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as e:
            return None, str(e)
        if proc.returncode != 0:
            return None, proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"
    return sorted(cache_dir.glob(pattern))[0], ""


@pytest.fixture(scope="module")
def verl_source(request, tmp_path_factory):
    """(verl's core_algos module, "") — installed, or the real file from the wheel with stubs — or (None, why)."""
    try:
        yield importlib.import_module("verl.trainer.ppo.core_algos"), ""
        return
    except ImportError:
        pass
    cache = getattr(request.config, "cache", None)  # None under -p no:cacheprovider
    wheel, why = _verl_wheel(Path(cache.mkdir("verl_wheel")) if cache else tmp_path_factory.mktemp("verl_wheel"))
    if wheel is None:
        yield None, (
            f"verl is not installed and verl=={rb_verl.TESTED_VERL} could not be downloaded ({why}); "
            f"pip install verl=={rb_verl.TESTED_VERL} or set RBCTL_VERL_WHEEL=path/to/verl.whl"
        )
        return
    root = tmp_path_factory.mktemp("verl_from_wheel")
    with zipfile.ZipFile(wheel) as zf:
        for name in VERBATIM:
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_bytes(zf.read(name))
    for name, text in STUBS.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    added = {}
    try:
        importlib.import_module("omegaconf")
    except ImportError:  # core_algos only uses DictConfig in a type annotation
        added["omegaconf"] = types.ModuleType("omegaconf")
        added["omegaconf"].DictConfig = type("DictConfig", (), {})
    sys.modules.update(added)
    sys.path.insert(0, str(root))
    try:
        yield importlib.import_module("verl.trainer.ppo.core_algos"), ""
    finally:
        sys.path.remove(str(root))
        for name in [n for n in sys.modules if n == "verl" or n.startswith("verl.")] + list(added):
            del sys.modules[name]


@pytest.fixture
def core_algos(verl_source):
    module, why = verl_source
    if module is None:
        pytest.skip(why)
    return module


def transcribed_verl_grpo(token_level_rewards, response_mask, index, epsilon=1e-6, norm_adv_by_std_in_grpo=True):
    """TRANSCRIPTION, used only where verl cannot be had: verl 0.9.1 (PyPI wheel),
    verl/trainer/ppo/core_algos.py, `compute_grpo_outcome_advantage` (registered as "grpo"):
    per uid, mean and torch.std (unbiased) of the summed token rewards; singletons get mean 0, std 1;
    A = (score − mean) / (std + epsilon) (or score − mean), broadcast as A · response_mask."""
    scores = token_level_rewards.sum(dim=-1)
    groups: dict = {}
    for i, uid in enumerate(index):
        groups.setdefault(uid, []).append(scores[i])
    stats = {
        uid: (torch.mean(torch.stack(s)), torch.std(torch.stack(s))) if len(s) > 1 else (torch.tensor(0.0), torch.tensor(1.0))
        for uid, s in groups.items()
    }
    out = scores.clone()
    for i, uid in enumerate(index):
        mean, std = stats[uid]
        out[i] = (scores[i] - mean) / (std + epsilon) if norm_adv_by_std_in_grpo else scores[i] - mean
    out = out.unsqueeze(-1) * response_mask
    return out, out


# --- a verl-shaped batch --------------------------------------------------------------------------

P, G, L = 4, 4, 6


def verl_batch(rewards_pg: torch.Tensor, seed: int = 0):
    """(token_level_rewards [bs, L], response_mask [bs, L], uid [bs], rows [P, G]) as verl builds them:
    the outcome reward on the last response token, responses of different lengths, and the groups
    interleaved (row i belongs to prompt i % P) so that grouping by uid, not by position, is tested."""
    gen = torch.Generator().manual_seed(seed)
    p, g = rewards_pg.shape
    bs = p * g
    rows = torch.arange(bs).view(g, p).T  # rows[k] = the rows of prompt k
    lengths = torch.randint(1, L + 1, (bs,), generator=gen)
    mask = (torch.arange(L)[None, :] < lengths[:, None]).float()
    tlr = torch.zeros(bs, L)
    tlr[rows.flatten(), lengths[rows.flatten()] - 1] = rewards_pg.flatten()
    uid = np.array([f"prompt-{i % p}" for i in range(bs)], dtype=object)
    return tlr, mask, uid, rows


# Dyadic rewards: group means are exact in float32, so an all-equal group centres to exactly 0 in
# verl's code as in rbctl's (for other values verl's (r − mean)/(0 + 1e-6) can amplify residues).
REWARDS = torch.tensor([
    [1.0, 0.0, 0.0, 0.0],    # K=1 of 4
    [0.0, 0.0, 0.0, 0.0],    # all wrong: A = 0
    [1.0, 1.0, 1.0, 1.0],    # all right: A = 0
    [0.25, 0.5, 1.0, 0.0],   # graded
])


def as_verl(adv_pg: torch.Tensor, rows: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    out = torch.empty(mask.shape[0])
    out[rows.flatten()] = adv_pg.flatten()
    return out[:, None] * mask


# --- budget off: the estimators are their verl counterparts --------------------------------------


@pytest.mark.slow
def test_budget_off_grpo_equals_verls_grpo(verl_source) -> None:
    module, _ = verl_source
    verl_grpo = transcribed_verl_grpo if module is None else module.compute_grpo_outcome_advantage
    tlr, mask, uid, _ = verl_batch(REWARDS)
    for name, norm in [("grpo_budget", True), ("dr_grpo_budget", False)]:
        ours, ours_ret = rb_verl.ESTIMATOR_FNS[name](
            token_level_rewards=tlr, response_mask=mask, index=uid, config={"budget": None}
        )
        theirs, _ = verl_grpo(tlr.clone(), mask, uid, norm_adv_by_std_in_grpo=norm)
        assert_close(ours, theirs)
        assert_close(ours_ret, ours)


def test_budget_off_rloo_equals_verls_rloo(core_algos) -> None:
    tlr, mask, uid, _ = verl_batch(REWARDS)
    ours, _ = rb_verl.ESTIMATOR_FNS["rloo_budget"](token_level_rewards=tlr, response_mask=mask, index=uid, config={"budget": None})
    theirs, _ = core_algos.get_adv_estimator_fn("rloo")(token_level_rewards=tlr.clone(), response_mask=mask, index=uid)
    assert_close(ours, theirs)


# --- through verl's registry: one config key ------------------------------------------------------


def test_register_adds_the_budgeted_estimators_to_verls_registry(core_algos) -> None:
    names = rb_verl.register()
    assert names == ["grpo_budget", "dr_grpo_budget", "rloo_budget", "reinforce_pp_budget"]
    assert rb_verl.register() == names  # idempotent: verl refuses a name bound to a different function
    for name in names:
        assert core_algos.get_adv_estimator_fn(name) is rb_verl.ESTIMATOR_FNS[name]
    assert core_algos.get_adv_estimator_fn("grpo") is core_algos.compute_grpo_outcome_advantage  # untouched


@pytest.mark.parametrize("base", ["grpo", "dr_grpo", "rloo", "reinforce_pp"])
def test_budget_on_through_verls_registry_matches_rbctl_algo(core_algos, base) -> None:
    rb_verl.register()
    tlr, mask, uid, rows = verl_batch(REWARDS, seed=1)
    # Called exactly as verl's compute_advantage calls a registered estimator (ray_trainer.py).
    config = core_algos.AlgoConfig(adv_estimator=f"{base}_budget")  # verl's dataclass: no budget keys
    fn = core_algos.get_adv_estimator_fn(f"{base}_budget")
    adv, ret = fn(token_level_rewards=tlr, response_mask=mask, config={"budget": 2.0, "budget_shift": 0.5}, index=uid)
    assert_close(adv, as_verl(compute_advantages(REWARDS, base, budget=2.0, shift=0.5), rows, mask))
    assert_close(ret, adv)
    # With verl's AlgoConfig, docs/method.md's defaults B = 1, c = 0 apply.
    adv_default, _ = fn(token_level_rewards=tlr, response_mask=mask, config=config, index=uid)
    assert_close(adv_default, as_verl(compute_advantages(REWARDS, base, budget=1.0), rows, mask))


def test_budget_on_hand_values() -> None:
    # K=1 of G=4, B=1: r̃ = (1, 0, 0, 0), centred: A+ = 1 − 1/4 = 0.75, A− = −1/4; gap B/K = 1.
    # K=2 of G=4, B=1: r̃ = (½, ½, 0, 0), centred: ±¼; gap B/K = ½.
    rewards = torch.tensor([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
    tlr, mask, uid, rows = verl_batch(rewards)
    adv, _ = rb_verl.ESTIMATOR_FNS["grpo_budget"](token_level_rewards=tlr, response_mask=mask, index=uid, config=None)
    expected = torch.tensor([[0.75, -0.25, -0.25, -0.25], [0.25, 0.25, -0.25, -0.25]])
    assert_close(adv, as_verl(expected, rows, mask))
    assert (adv[mask == 0] == 0).all()  # nothing outside the response


# --- diagnostics: kappa, the advantage gap, kappa_eff -----------------------------------------------


def test_estimator_leaves_kappa_and_gap_of_its_batch_hand_values(core_algos) -> None:
    # K=1 and K=2 of G=4, B=1: κ = gap = B/K per prompt = 1 and ½; mean over the mixed prompts ¾.
    # The all-wrong prompt is not mixed and is not averaged in.
    rb_verl.register()
    rewards = torch.tensor([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    tlr, mask, uid, _ = verl_batch(rewards)
    fn = core_algos.get_adv_estimator_fn("grpo_budget")
    fn(token_level_rewards=tlr, response_mask=mask, config={"budget": 1.0}, index=uid)
    assert rb_verl.pop_metrics() == pytest.approx({"rbctl/kappa": 0.75, "rbctl/adv_gap": 0.75})
    assert rb_verl.pop_metrics() == {}  # popped: a step that computes nothing logs nothing stale
    # Graded rewards: κ is defined, the gap (correct vs wrong) is not and is left out.
    tlr, mask, uid, _ = verl_batch(REWARDS)
    fn(token_level_rewards=tlr, response_mask=mask, config={"budget": 2.0, "budget_shift": 0.5}, index=uid)
    expected = nanmean_or_none(kappa(REWARDS, compute_advantages(REWARDS, "grpo", budget=2.0, shift=0.5)))
    assert rb_verl.LAST_METRICS == pytest.approx({"rbctl/kappa": expected})
    # No mixed prompt: nothing to report, and the previous batch's values are gone.
    tlr, mask, uid, _ = verl_batch(torch.ones(2, 4))
    fn(token_level_rewards=tlr, response_mask=mask, config=None, index=uid)
    assert rb_verl.pop_metrics() == {}


def test_sharpness_metrics_of_verls_own_grpo_batch(verl_source) -> None:
    # sharpness_metrics works on any estimator's output: here verl's grpo, whose κ for binary rewards
    # is 1/(σ̂ + 1e-6) per mixed prompt (docs/method.md, "Advantage gap").
    module, _ = verl_source
    verl_grpo = transcribed_verl_grpo if module is None else module.compute_grpo_outcome_advantage
    rewards = torch.tensor([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    tlr, mask, uid, _ = verl_batch(rewards)
    adv, _ = verl_grpo(tlr.clone(), mask, uid)
    data = types.SimpleNamespace(
        batch={"token_level_rewards": tlr, "advantages": adv, "response_mask": mask}, non_tensor_batch={"uid": uid}
    )
    sigma = rewards[:2].std(dim=1)  # unbiased, as verl
    expected = float((1 / (sigma + 1e-6)).mean())
    assert rb_verl.sharpness_metrics(data) == pytest.approx({"rbctl/kappa": expected, "rbctl/adv_gap": expected})


def test_kappa_eff_from_batch_hand_values() -> None:
    # Prompt a: r = (1, 0, 0, 0), d = (0.6, −0.2, −0.2, −0.2): (0.6 − (−0.2)) / (1 − 0) = 0.8.
    # Prompt b: r = (1, 1, 0, 0), d = (0.3, 0.1, −0.1, −0.1): (0.2 − (−0.1)) / 1 = 0.3.
    # Prompt c: all wrong, not mixed (its d is ignored). κ_eff = mean(0.8, 0.3) = 0.55.
    rewards = torch.tensor([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    d_pg = torch.tensor([[0.6, -0.2, -0.2, -0.2], [0.3, 0.1, -0.1, -0.1], [5.0, 5.0, 5.0, 5.0]])
    tlr, mask, uid, rows = verl_batch(rewards, seed=3)
    bs = mask.shape[0]
    d = torch.empty(bs)
    d[rows.flatten()] = d_pg.flatten()
    # Spread each d_i over the response tokens; padding gets large garbage that the mask must remove.
    gen = torch.Generator().manual_seed(0)
    old = -torch.rand(bs, L, generator=gen) * 3
    new = old + (d / mask.sum(dim=1))[:, None] * mask + 7.0 * (1 - mask)
    assert rb_verl.kappa_eff_from_batch(old, new, mask, tlr.sum(dim=1), uid) == pytest.approx(0.55)
    assert rb_verl.kappa_eff_from_batch(old, new, mask, tlr, uid) == pytest.approx(0.55)  # token rewards summed
    assert rb_verl.kappa_eff_from_batch(old, new, mask, torch.zeros(bs), uid) is None  # nothing mixed


# --- adapter edges (no verl needed) -----------------------------------------------------------------


def test_group_rows_follows_uids_not_positions() -> None:
    assert rb_verl.group_rows(np.array(["b", "a", "b", "a"], dtype=object)).tolist() == [[0, 2], [1, 3]]
    assert rb_verl.group_rows([7, 7, 3, 3]).tolist() == [[0, 1], [2, 3]]
    with pytest.raises(UserError, match="same number of rollouts.*\\[1, 2\\]"):
        rb_verl.group_rows(["a", "a", "b"])
    with pytest.raises(UserError, match="rollout.n >= 2"):
        rb_verl.group_rows(["a", "b"])


def test_config_settings_and_errors() -> None:
    assert rb_verl.budget_settings(None) == (1.0, 0.0)
    assert rb_verl.budget_settings({}) == (1.0, 0.0)
    assert rb_verl.budget_settings({"budget": 4, "budget_shift": 1}) == (4.0, 1.0)
    assert rb_verl.budget_settings({"budget": None}) == (None, 0.0)
    tlr, mask, uid, _ = verl_batch(REWARDS)
    fn = rb_verl.ESTIMATOR_FNS["grpo_budget"]
    with pytest.raises(UserError, match="dr_grpo_budget"):
        fn(token_level_rewards=tlr, response_mask=mask, index=uid, config={"budget": None, "norm_adv_by_std_in_grpo": False})
    with pytest.raises(UserError, match="below -shift"):
        fn(token_level_rewards=tlr - 1.0, response_mask=mask, index=uid, config={"budget": 1.0})
    with pytest.raises(UserError, match="budget must be > 0"):
        fn(token_level_rewards=tlr, response_mask=mask, index=uid, config={"budget": 0})
    with pytest.raises(UserError, match="uid"):
        fn(token_level_rewards=tlr, response_mask=mask, config=None)


def test_dtype_follows_verls_tensors() -> None:
    tlr, mask, uid, _ = verl_batch(REWARDS)
    adv, _ = rb_verl.ESTIMATOR_FNS["grpo_budget"](
        token_level_rewards=tlr.double(), response_mask=mask.double(), index=uid, config=None
    )
    assert adv.dtype == torch.float64 and adv.shape == (P * G, L)


def test_unsupported_verl_version_names_the_range(monkeypatch) -> None:
    fake = types.ModuleType("verl")
    fake.__version__ = "0.4.1"
    monkeypatch.setitem(sys.modules, "verl", fake)
    with pytest.raises(UserError, match=r"supports verl>=0\.6,<0\.10 \(tested with verl==0\.9\.1\); found verl==0\.4\.1"):
        rb_verl.register()
