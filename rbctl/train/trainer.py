"""The training loop: rollouts → rewards → advantages (± budget) → PPO-clipped update → κ_eff.

How one step runs (and where it departs from a textbook GRPO loop):
1. P prompts are taken in a seeded order (a fresh permutation of the pool each epoch), and G
   rollouts each are sampled with a seed derived from (run seed, step): a resumed run samples
   exactly what an uninterrupted one would.
2. Rewards: the built-in task's exact checker, or the shared math grader (`rbctl.grading.verify`).
3. Advantages from `rbctl.algo.compute_advantages` ([P, G] → [P, G]), broadcast over tokens.
4. `ppo_epochs` optimizer steps on the batch. The log-probs of the first epoch's forward pass are
   the behaviour policy's (nothing has changed yet), so no separate "old log-prob" pass is run.
   Entropy and the KL to the reference are logged from that same pre-update forward pass.
5. κ_eff (every `kappa_eff_every` steps): one more forward pass after the update gives
   d_i = Σ_t log π_new − log π_old per rollout (docs/method.md).
On CPU, every forward pass over the batch (policy, reference, κ_eff) runs each prompt once for its
G rollouts and continues the G responses from its KV cache (`response_logits`): the same log-probs,
up to float rounding, for about half the work on short-answer tasks.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import os
import platform
import random
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from rbctl import __version__
from rbctl import algo
from rbctl.config.base import dump_config, validate
from rbctl.config.train import TrainConfig
from rbctl.errors import UserError
from rbctl.store.atomic import write_atomic
from rbctl.algo.losses import (
    BatchNorm,
    adaptive_alpha,
    aggregation_weights,
    k3_kl,
    ppo_clip_loss,
    token_entropy,
    token_logprobs,
)
from rbctl.rollout.hf import SamplingParams
from rbctl.train.tracking import Tracker, append_jsonl, truncate_jsonl

CKPT_DONE = "COMPLETE"  # written last into a checkpoint directory: its absence marks a torn checkpoint


# --- batches -------------------------------------------------------------------------------------


@dataclass
class RolloutBatch:
    """N = P·G sequences, prompt-major (prompt p's rollouts are rows p·G … p·G+G−1)."""

    input_ids: torch.Tensor  # [N, Lp + Lr] left-padded prompt, then right-padded response
    attention_mask: torch.Tensor  # [N, Lp + Lr]
    response_ids: torch.Tensor  # [N, Lr]
    response_mask: torch.Tensor  # [N, Lr] 1 on response tokens up to and including EOS
    prompt_width: int  # Lp
    rewards: torch.Tensor  # [P, G]
    correct: torch.Tensor  # [P, G] bool
    advantages: torch.Tensor  # [P, G]
    engine_logp: torch.Tensor | None = None  # [N, Lr] the rollout engine's log-probs (vLLM), if any

    @property
    def n(self) -> int:
        return self.input_ids.shape[0]


def build_batch(prompts: list[list[int]], samples, pad_id: int) -> tuple[torch.Tensor, ...]:
    """Token tensors for the training forward pass from prompts and their samples."""
    rows = [(prompts[p], s.token_ids) for p, group in enumerate(samples) for s in group]
    lp = max(len(p) for p, _ in rows)
    lr = max(1, max(len(r) for _, r in rows))
    # Padded rows are built as Python lists and converted once (one torch.tensor call per field).
    ids = torch.tensor([[pad_id] * (lp - len(p)) + p + r + [pad_id] * (lr - len(r)) for p, r in rows], dtype=torch.long)
    attn = torch.tensor([[0] * (lp - len(p)) + [1] * (len(p) + len(r)) + [0] * (lr - len(r)) for p, r in rows],
                        dtype=torch.long)
    resp = ids[:, lp:].clone()  # [n, Lr]: the response, pad_id after it
    rmask = attn[:, lp:].to(torch.float32)  # 1 on response tokens
    return ids, attn, resp, rmask, lp


def response_logits(model, input_ids, attention_mask, prompt_width: int, group_size: int = 1) -> torch.Tensor:
    """Logits that predict each response token: [n, Lr, V]. Position ids follow the attention mask,
    as in generation, so left padding does not shift positions.

    With `group_size` G > 1, rows p·G … p·G+G−1 that hold the same prompt run it once: the prompt
    [n/G, Lp] goes through the model, its KV cache is repeated G times, and the responses
    [n, Lr − 1] continue from it, as in generation. Same computation as running every row whole,
    up to float rounding; about half the work when prompts are as long as responses. Used on CPU
    (where it is measured and tested; on GPUs every row runs whole, as before) where the model
    supports it (`rollout.prefix_cache_supported`), without gradient checkpointing, and without
    active dropout (which would draw one prompt mask for the whole group)."""
    from rbctl.rollout.hf import forward_with_cache, new_cache, position_ids

    positions = position_ids(attention_mask)
    lr = input_ids.shape[1] - prompt_width
    if _can_share_prompts(model, input_ids, attention_mask, prompt_width, group_size):
        lp, cache = prompt_width, new_cache(model)
        first = forward_with_cache(model, input_ids[::group_size, :lp], attention_mask[::group_size, :lp],
                                   positions[::group_size, :lp], cache, logits_to_keep=1)  # [n/G, 1, V]
        first = first.repeat_interleave(group_size, 0)  # predicts response token 0: [n, 1, V]
        if lr == 1:
            return first
        cache.batch_repeat_interleave(group_size)
        rest = forward_with_cache(model, input_ids[:, lp:-1], attention_mask[:, :-1], positions[:, lp:-1], cache)
        return torch.cat([first, rest], dim=1)  # rest predicts response tokens 1 … Lr−1
    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions,
                use_cache=False, logits_to_keep=lr + 1)
    return out.logits[:, :-1]


def _can_share_prompts(model, input_ids, attention_mask, prompt_width: int, group_size: int) -> bool:
    from rbctl.rollout.hf import prefix_cache_supported

    return (group_size > 1 and input_ids.device.type == "cpu"
            and _shares_prompts(input_ids, attention_mask, prompt_width, group_size)
            and not _checkpointing(model) and not _dropout_active(model) and prefix_cache_supported(model))


def _checkpointing(model) -> bool:
    """Gradient (activation) checkpointing is on: it turns the KV cache off, so no shared prefix."""
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):  # renamed in transformers 5.x
        if hasattr(type(model), name):
            return bool(getattr(model, name))
    return False


def _dropout_active(model) -> bool:
    """Dropout would act in this forward pass (training mode and a nonzero rate somewhere)."""
    if not model.training:
        return False
    if any(getattr(model.config, k, 0) or 0 for k in ("attention_dropout", "hidden_dropout", "dropout")):
        return True
    return any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in model.modules())


def _shares_prompts(input_ids, attention_mask, prompt_width: int, group_size: int) -> bool:
    """Whether the rows come in groups of `group_size` with identical (padded) prompts."""
    n = input_ids.shape[0]
    if n % group_size:
        return False
    ids = input_ids[:, :prompt_width].reshape(n // group_size, group_size, prompt_width)
    mask = attention_mask[:, :prompt_width].reshape(n // group_size, group_size, prompt_width)
    return bool((ids == ids[:, :1]).all() and (mask == mask[:, :1]).all())


# --- data and rewards ----------------------------------------------------------------------------


def load_training_problems(cfg: TrainConfig):
    from rbctl.tasks import registry as benchmarks
    from rbctl.tasks import links as builtin

    d = cfg.data
    if d.source == "builtin":
        return builtin.problems(task_spec(cfg), "train")
    fields = f"@{d.problem_field},{d.answer_field}"
    if d.source.endswith((".jsonl", ".parquet")) or Path(d.source).exists():
        return benchmarks.load_benchmark(f"file:{d.source}{fields}")
    cfg_part = f":{d.hf_config}" if d.hf_config else ""
    return benchmarks.load_benchmark(f"hf:{d.source}{cfg_part}:{d.split}{fields}")


def task_spec(cfg: TrainConfig):
    from rbctl.tasks.links import TaskSpec

    b = cfg.data.builtin
    return TaskSpec(num_keys=b.num_keys, min_hops=b.min_hops, max_hops=b.max_hops,
                    train_size=b.train_size, test_size=b.test_size, seed=b.seed)


def warm_start_spec(cfg: TrainConfig):
    from rbctl.tasks.links import WarmStartSpec

    b = cfg.data.builtin
    return WarmStartSpec(demo_error=b.demo_error, steps=b.warm_start_steps)


def reward_function(cfg: TrainConfig):
    """(completions, answers) -> (correct flags, grader failures). Binary reward: 1 if correct.

    The built-in task has its own exact checker; everything else goes through the shared math
    grader, in parallel worker processes, and its time-outs and errors are counted (as wrong)."""
    if cfg.data.source == "builtin":
        from rbctl.tasks.links import check

        return lambda completions, answers: ([check(c, a) for c, a in zip(completions, answers)], 0)
    from rbctl.grading.verify import grade_many

    def fn(completions: list[str], answers: list[str]) -> tuple[list[bool], int]:
        results = grade_many(completions, answers)
        return [r.correct for r in results], sum(r.status in ("timeout", "error") for r in results)

    return fn


def prompt_order(seed: int, step: int, per_step: int, pool: int) -> list[int]:
    """Indices of step `step`'s prompts: a seeded permutation of the pool per epoch, read in order."""
    perms: dict[int, np.ndarray] = {}
    out = []
    for i in range((step - 1) * per_step, step * per_step):
        epoch, pos = divmod(i, pool)
        if epoch not in perms:
            perms[epoch] = np.random.default_rng([seed, epoch]).permutation(pool)
        out.append(int(perms[epoch][pos]))
    return out


def step_seed(seed: int, step: int) -> int:
    return int(np.random.default_rng([seed, step, 7]).integers(2**31 - 1))


# --- run directory -------------------------------------------------------------------------------


def provenance(cfg: TrainConfig, device: torch.device) -> dict:
    import transformers

    def git_commit():
        try:
            root = Path(__file__).resolve().parents[2]
            return subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                                  text=True, timeout=5).stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            return None

    return {
        "rbctl": __version__,
        "git_commit": git_commit(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "platform": platform.platform(),
        "device": str(device),
        "cuda": torch.cuda.get_device_name(0) if device.type == "cuda" else None,
        "threads": torch.get_num_threads(),
        "seed": cfg.seed,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def comparable(cfg: TrainConfig) -> dict:
    """The config without the keys that may change across a resume (more steps, logging)."""
    d = cfg.model_dump(mode="json")
    for k in ("steps", "log", "threads"):
        d.pop(k, None)
    return d


def prepare_run_dir(cfg: TrainConfig, run_dir: Path, force: bool) -> None:
    """Create the run directory, or check that an existing one was made with this config."""
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg_path = run_dir / "config.yaml"
    if cfg_path.exists():
        import yaml

        old = validate(TrainConfig, yaml.safe_load(cfg_path.read_text()) or {}, str(cfg_path))
        if comparable(old) != comparable(cfg) and not force:
            diff = [k for k in _flat(comparable(cfg)) if _flat(comparable(cfg)).get(k) != _flat(comparable(old)).get(k)]
            raise UserError(f"run directory {run_dir} was made with a different config ({', '.join(diff[:4])}); "
                            "use another -o or --force")
    write_atomic(cfg_path, dump_config(cfg))


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


def checkpoint_dirs(run_dir: Path) -> list[Path]:
    return sorted(p for p in (run_dir / "checkpoints").glob("step_*") if p.is_dir() and not p.name.endswith(".tmp"))


def _sha256(path: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def checkpoint_manifest(ck: Path) -> dict:
    """SHA-256 of every file of a checkpoint directory (but the marker), by relative path."""
    return {str(f.relative_to(ck)): _sha256(f) for f in sorted(ck.rglob("*")) if f.is_file() and f.name != CKPT_DONE}


def checkpoint_problem(ck: Path) -> str | None:
    """Why a checkpoint cannot be resumed from (None when it is complete and intact)."""
    marker = ck / CKPT_DONE
    if not marker.exists() or not (ck / "trainer_state.pt").exists():
        return "incomplete"
    try:
        expected = json.loads(marker.read_text())["files"]
    except (json.JSONDecodeError, KeyError, TypeError):
        return "unreadable completion marker"
    actual = checkpoint_manifest(ck)
    bad = sorted(k for k in expected.keys() | actual.keys() if expected.get(k) != actual.get(k))
    return f"fails its integrity check ({', '.join(bad[:3])})" if bad else None


def last_good_checkpoint_step(run_dir: Path, log=print) -> int:
    """Step of the newest complete, intact checkpoint (0 if none); others are skipped with a warning."""
    for ck in reversed(checkpoint_dirs(run_dir)):
        problem = checkpoint_problem(ck)
        if problem is None:
            return int(ck.name.split("_")[1])
        if log is not None:
            log(f"warning: skipping {problem} checkpoint {ck}" if problem == "incomplete"
                else f"warning: skipping checkpoint {ck}: {problem}")
    return 0


def save_checkpoint(run_dir: Path, step: int, model, tokenizer, state: dict, keep: int, builtin_marker: Path | None) -> None:
    final = run_dir / "checkpoints" / f"step_{step:06d}"
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "model").mkdir(parents=True)
    model.save_pretrained(tmp / "model", safe_serialization=True)
    tokenizer.save_pretrained(tmp / "model")
    if builtin_marker is not None and builtin_marker.exists():
        shutil.copy(builtin_marker, tmp / "model" / builtin_marker.name)
    torch.save(state, tmp / "trainer_state.pt")
    write_atomic(tmp / CKPT_DONE, json.dumps({"step": step, "files": checkpoint_manifest(tmp)}, indent=1))
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    for old in checkpoint_dirs(run_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


# --- the trainer ---------------------------------------------------------------------------------


class Trainer:
    def __init__(self, cfg: TrainConfig, run_dir: Path, log=print):
        from rbctl.rollout.models import load_policy

        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.log = log
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        if cfg.rollout.engine == "vllm":
            raise UserError("rollout.engine 'vllm' is not available yet (scale-out issue); use 'hf'")
        from rbctl.train.distributed import init_from_env

        self.dist = init_from_env()
        self.resume_step = last_good_checkpoint_step(self.run_dir, log=log if self.dist.is_main else None)
        device = cfg.model.device
        if self.dist.enabled and torch.cuda.is_available() and device in ("auto", "cuda"):
            device = f"cuda:{self.dist.local_rank}"
        load_kwargs = dict(device=device, dtype=cfg.model.dtype, log=log,
                           builtin_task=task_spec(cfg), builtin_warm_start=warm_start_spec(cfg))
        base = load_policy(cfg.model.name, **load_kwargs)
        self.base_source = base.source
        self.builtin = base.builtin
        self.tokenizer = base.tokenizer
        self.device = next(base.model.parameters()).device
        self.autocast = (self.device.type == "cuda" and cfg.model.autocast_bf16
                         and next(base.model.parameters()).dtype == torch.float32)
        torch.manual_seed(cfg.seed)
        self.lora = cfg.model.lora is not None
        if cfg.rollout.engine == "vllm" and base.source.endswith(".gguf"):
            raise UserError("rollout.engine 'vllm' cannot load a GGUF file here; use the model's Hugging Face id or directory")
        self.engine = None
        if cfg.rollout.engine == "vllm":  # built first: vLLM checks that its share of GPU memory is free
            from rbctl.rollout.vllm import VLLMEngine

            v = cfg.rollout.vllm
            self.engine = VLLMEngine(base.model, base.tokenizer, model_name_or_path=base.source,
                                     gpu_memory_utilization=v.gpu_memory_utilization, sleep_mode=v.sleep_mode,
                                     dtype=str(next(base.model.parameters()).dtype).removeprefix("torch."),
                                     seed=cfg.seed, max_model_len=v.max_model_len)
        self.ref = None
        self.use_ref = cfg.algo.kl_coef > 0 or cfg.algo.log_kl
        if self.use_ref and not self.lora:  # with LoRA the reference is the adapter-disabled base
            self.ref = copy.deepcopy(base.model).eval().requires_grad_(False)
        ck = self.run_dir / "checkpoints" / f"step_{self.resume_step:06d}"
        if self.lora:
            self.model = self._with_lora(base.model, ck / "model" if self.resume_step else None)
        elif self.resume_step:
            self.model = load_policy(str(ck / "model"), **load_kwargs).model
        else:
            self.model = base.model
        del base
        if cfg.model.gradient_checkpointing:
            self.model.gradient_checkpointing_enable()
        self.model.train()
        self.train_model = self.model  # what the training forward calls: the DDP wrapper when distributed
        if self.dist.enabled:
            from torch.nn.parallel import DistributedDataParallel

            ids = [self.device.index] if self.device.type == "cuda" else None
            self.train_model = DistributedDataParallel(self.model, device_ids=ids)
        o = cfg.optim
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(params, lr=o.lr, betas=(o.beta1, o.beta2), weight_decay=o.weight_decay)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, self._lr_lambda)
        self.alpha = cfg.algo.entropy.alpha
        if self.resume_step:
            state = torch.load(ck / "trainer_state.pt", weights_only=False)
            if state.get("world_size", 1) != self.dist.world:
                raise UserError(f"checkpoint {ck} was written by {state.get('world_size', 1)} processes; "
                                f"resume with the same number (now {self.dist.world})")
            self.opt.load_state_dict(state["optimizer"])
            self.sched.load_state_dict(state["scheduler"])
            self.alpha = state["alpha"]
            torch.set_rng_state(state["torch_rng"])
            random.setstate(state["python_rng"])
            np.random.set_state(state["numpy_rng"])
        self.problems = load_training_problems(cfg)
        if not self.problems:
            raise UserError("the training data has no problems")
        from rbctl.tasks.prompting import resolve_template

        self.template = resolve_template(self.tokenizer, cfg.data.template, builtin_model=self.builtin)
        self._prompt_cache: dict[int, list[int]] = {}
        self.reward_fn = reward_function(cfg)
        if self.engine is None:
            from rbctl.rollout.hf import HFEngine

            self.engine = HFEngine(self.model, self.tokenizer, max_batch=cfg.rollout.max_batch)
        self.pad_id = self.engine.pad_id
        self.eval_problems = None  # loaded at the first periodic evaluation

    def _with_lora(self, model, adapter_dir: Path | None):
        """Wrap the model with LoRA adapters (fresh, or the checkpoint's on resume): only they train."""
        try:
            from peft import LoraConfig, PeftModel, get_peft_model
        except ImportError:
            raise UserError("model.lora needs peft: pip install 'rbctl[lora]'") from None
        if adapter_dir is not None:
            return PeftModel.from_pretrained(model, str(adapter_dir), is_trainable=True)
        lc = self.cfg.model.lora
        return get_peft_model(model, LoraConfig(r=lc.r, lora_alpha=lc.alpha, lora_dropout=lc.dropout,
                                                target_modules=lc.target_modules, task_type="CAUSAL_LM"))

    def _lr_lambda(self, s: int) -> float:
        o = self.cfg.optim
        if o.warmup_steps and s < o.warmup_steps:
            return (s + 1) / o.warmup_steps
        if o.schedule == "cosine":
            span = max(1, self.cfg.steps - o.warmup_steps)
            return 0.5 * (1 + math.cos(math.pi * min(1.0, (s - o.warmup_steps) / span)))
        return 1.0

    def prompt_ids(self, idx: int) -> list[int]:
        """Prompts are encoded once and cached: no re-tokenisation per step."""
        if idx not in self._prompt_cache:
            from rbctl.tasks.prompting import encode_prompts

            self._prompt_cache[idx] = encode_prompts(self.tokenizer, [self.problems[idx].problem], self.template,
                                                     self.cfg.data.instruction)[0]
        return self._prompt_cache[idx]

    # -- one step --

    def rollout(self, step: int):
        """This rank's prompts and rollouts; rewards are gathered so advantages use the global batch."""
        c = self.cfg
        idx = prompt_order(c.seed, step, c.rollout.prompts_per_step, len(self.problems))[self.dist.shard(c.rollout.prompts_per_step)]
        prompts = [self.prompt_ids(i) for i in idx]
        # ranks sample different prompts from different streams; one process reproduces the same seeds
        params = SamplingParams(n=c.rollout.group_size, temperature=c.rollout.temperature, top_p=c.rollout.top_p,
                                max_new_tokens=c.rollout.max_new_tokens,
                                seed=step_seed(c.seed, step) + 1_000_003 * self.dist.rank)
        samples = self.engine.generate(prompts, params)
        flags, self.grader_failures = self.reward_fn([s.text for group in samples for s in group],
                                                     [self.problems[i].answer for i in idx for _ in range(c.rollout.group_size)])
        correct = torch.tensor(flags, dtype=torch.bool).reshape(len(idx), c.rollout.group_size)
        rewards = correct.float()
        global_rewards = self.dist.gather_rows(rewards)
        adv = algo.compute_advantages(global_rewards, c.algo.estimator, c.algo.budget, c.algo.shift)
        mine = slice(self.dist.rank * len(idx), (self.dist.rank + 1) * len(idx))
        ids, attn, resp, rmask, lp = build_batch(prompts, samples, self.pad_id)
        engine_logp = None
        if samples and samples[0] and samples[0][0].logprobs is not None:
            from rbctl.rollout.vllm import engine_logprobs_tensor

            engine_logp = engine_logprobs_tensor(samples, resp.shape[1])
        batch = RolloutBatch(ids, attn, resp, rmask, lp, rewards, correct, adv[mine], engine_logp)
        return batch, idx, samples

    def _micro_batches(self, n: int) -> list[slice]:
        mb = self.cfg.algo.micro_batch_size or n
        return [slice(i, min(i + mb, n)) for i in range(0, n, mb)]

    def _forward_logp(self, model, batch: RolloutBatch, sl: slice, with_entropy: bool, entropy_grad: bool):
        dev = self.device
        # Under DDP every row runs whole: the shared-prompt path calls the model twice per backward.
        group = 1 if self.dist.enabled else self.cfg.rollout.group_size
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.autocast):
            logits = response_logits(model, batch.input_ids[sl].to(dev), batch.attention_mask[sl].to(dev),
                                     batch.prompt_width, group_size=group)
        t = self.cfg.rollout.temperature
        logp = token_logprobs(logits, batch.response_ids[sl].to(dev), t)
        ent = None
        if with_entropy:
            if entropy_grad:
                ent = token_entropy(logits, t)
            else:
                with torch.no_grad():
                    ent = token_entropy(logits.detach(), t)
        return logp, ent

    def _ref_logp(self, batch: RolloutBatch, sl: slice) -> torch.Tensor:
        with torch.no_grad():
            if self.lora:
                with self.model.disable_adapter():
                    return self._forward_logp(self.model, batch, sl, False, False)[0]
            return self._forward_logp(self.ref, batch, sl, False, False)[0]

    def update(self, batch: RolloutBatch) -> dict:
        """`ppo_epochs` optimizer steps on this rank's share of the batch; every normaliser is global."""
        c = self.cfg
        dev = self.device
        a = c.algo
        world = self.dist.world
        n_seqs, n_tokens = self.dist.sum(batch.n, batch.response_mask.sum().item())
        norm = BatchNorm(n_seqs=int(n_seqs), n_tokens=int(n_tokens), max_new_tokens=c.rollout.max_new_tokens)
        adv_flat = batch.advantages.reshape(-1)
        slices = self._micro_batches(batch.n)
        old_logp: list[torch.Tensor] = []
        ref_logp = [self._ref_logp(batch, sl) for sl in slices] if self.use_ref else []
        entropy_on = a.entropy.mode != "none"
        stats = {"entropy_sum": 0.0, "kl_sum": 0.0, "clip_low": 0.0, "clip_high": 0.0, "loss": 0.0,
                 "grad_norm": [], "logprob_diff": None}
        skipped = 0
        for epoch in range(a.ppo_epochs):
            self.opt.zero_grad(set_to_none=True)
            loss_total = 0.0
            for k, sl in enumerate(slices):
                mask = batch.response_mask[sl].to(dev)
                last = k == len(slices) - 1
                sync = self.train_model.no_sync() if (self.dist.enabled and not last) else contextlib.nullcontext()
                with sync:
                    logp, ent = self._forward_logp(self.train_model, batch, sl, with_entropy=(epoch == 0 or entropy_on),
                                                   entropy_grad=entropy_on)
                    if epoch == 0:
                        old_logp.append(logp.detach())  # behaviour policy = the model before any update
                    pg = ppo_clip_loss(logp, old_logp[k], adv_flat[sl].to(dev), a.clip_low, a.clip_high)
                    w = aggregation_weights(mask, a.loss_agg, norm)
                    loss_mat = pg.loss_mat
                    if batch.engine_logp is not None and a.tis_cap is not None:
                        from rbctl.rollout.vllm import tis_weights

                        loss_mat = loss_mat * tis_weights(old_logp[k], batch.engine_logp[sl].to(dev), a.tis_cap)
                    kl = None
                    if self.use_ref:
                        kl = k3_kl(logp, ref_logp[k])
                        if a.kl_coef > 0:
                            loss_mat = loss_mat + a.kl_coef * kl
                    if entropy_on:
                        loss_mat = loss_mat - self.alpha * ent
                    loss = (w * loss_mat).sum()
                    # DDP averages gradients over ranks; the weights are already global, so undo the 1/world
                    (loss * world).backward()
                loss_total += loss.item()
                stats["clip_low"] += (pg.clipped_low.float() * mask).sum().item() / a.ppo_epochs
                stats["clip_high"] += (pg.clipped_high.float() * mask).sum().item() / a.ppo_epochs
                if epoch == 0:
                    stats["entropy_sum"] += (ent.detach() * mask).sum().item()
                    if kl is not None:
                        stats["kl_sum"] += (kl.detach() * mask).sum().item()
            loss_total = self.dist.sum(loss_total)[0]
            grad_norm = torch.nn.utils.clip_grad_norm_([p for p in self.model.parameters() if p.requires_grad],
                                                       c.optim.max_grad_norm)
            if not (math.isfinite(loss_total) and torch.isfinite(grad_norm)):
                self.opt.zero_grad(set_to_none=True)
                skipped += 1
                continue  # never step on a non-finite loss or gradient
            self.opt.step()
            stats["grad_norm"].append(grad_norm.item())
            stats["loss"] += loss_total / a.ppo_epochs
        self.sched.step()
        if batch.engine_logp is not None:
            from rbctl.rollout.vllm import logprob_mismatch

            stats["logprob_diff"] = logprob_mismatch(batch.engine_logp.to(dev), torch.cat(old_logp), batch.response_mask.to(dev))
            self.engine.sync_weights(self.model)  # the next rollout samples from the updated policy
        ent_sum, kl_sum, clip_lo, clip_hi = self.dist.sum(stats["entropy_sum"], stats["kl_sum"], stats["clip_low"], stats["clip_high"])
        n_tok = max(norm.n_tokens, 1)
        return {
            "old_logp": old_logp,
            "slices": slices,
            "entropy": ent_sum / n_tok,
            "kl": kl_sum / n_tok if self.use_ref else None,
            "clip/frac_low": clip_lo / n_tok,
            "clip/frac_high": clip_hi / n_tok,
            "loss/total": stats["loss"],
            "grad_norm": float(np.mean(stats["grad_norm"])) if stats["grad_norm"] else None,
            "nonfinite/skipped": skipped,
            "rollout/logprob_diff": stats["logprob_diff"],
        }

    @torch.no_grad()
    def logratio_sums(self, batch: RolloutBatch, old_logp: list[torch.Tensor], slices: list[slice]) -> torch.Tensor:
        """d_i = Σ_t (log π_new − log π_old) over each rollout's response tokens, as [P, G]."""
        d = []
        for k, sl in enumerate(slices):
            logp, _ = self._forward_logp(self.model, batch, sl, False, False)
            mask = batch.response_mask[sl].to(self.device)
            d.append(((logp - old_logp[k]) * mask).sum(-1).cpu())
        return self.dist.gather_rows(torch.cat(d).reshape(batch.rewards.shape))

    def step(self, step: int) -> tuple[dict, list]:
        c = self.cfg
        t0 = time.perf_counter()
        batch, idx, samples = self.rollout(step)
        t1 = time.perf_counter()
        upd = self.update(batch)
        t2 = time.perf_counter()
        kappa_eff = None
        if c.kappa_eff_every and step % c.kappa_eff_every == 0:
            d = self.logratio_sums(batch, upd["old_logp"], upd["slices"])
            kappa_eff = algo.nanmean_or_none(algo.kappa_eff(self.dist.gather_rows(batch.rewards), d))
        t3 = time.perf_counter()
        lr_used = self.opt.param_groups[0]["lr"]
        ent_cfg = c.algo.entropy
        alpha_used = self.alpha
        if ent_cfg.mode == "adaptive":
            self.alpha = adaptive_alpha(self.alpha, upd["entropy"], ent_cfg.target, ent_cfg.delta,
                                        ent_cfg.alpha_min, ent_cfg.alpha_max)
        rewards = self.dist.gather_rows(batch.rewards)  # [P, G] over all ranks
        correct = self.dist.gather_rows(batch.correct)
        advantages = self.dist.gather_rows(batch.advantages)
        resp_len = self.dist.gather_rows(batch.response_mask.sum(-1))
        finished = self.dist.gather_rows(torch.tensor([s.finished for g in samples for s in g], dtype=torch.float32))
        gs = algo.group_stats(correct)
        kappa_p = algo.kappa(rewards, advantages)
        gen_tokens = int(resp_len.sum().item())
        step_s = t3 - t0
        metrics = {
            "reward/mean": rewards.mean().item(),
            "acc/mean": correct.float().mean().item(),
            "entropy": upd["entropy"],
            "kappa": algo.nanmean_or_none(kappa_p),
            "kappa_eff": kappa_eff,
            "adv/gap": algo.advantage_gap(correct, advantages),
            "adv/abs_mean": advantages.abs().mean().item(),
            "groups/frac_all_correct": gs.frac_all_correct,
            "groups/frac_all_wrong": gs.frac_all_wrong,
            "groups/frac_mixed": gs.frac_mixed,
            "clip/frac_low": upd["clip/frac_low"],
            "clip/frac_high": upd["clip/frac_high"],
            "kl": upd["kl"],
            "loss/total": upd["loss/total"],
            "entropy/alpha": alpha_used if ent_cfg.mode != "none" else 0.0,
            "response/len_mean": resp_len.float().mean().item(),
            "response/frac_truncated": 1.0 - finished.mean().item(),
            "grad_norm": upd["grad_norm"],
            "nonfinite/skipped": upd["nonfinite/skipped"],
            "grader/failures": int(self.dist.sum(self.grader_failures)[0]),
            "lr": lr_used,
            "time/step_s": step_s,
            "time/rollout_s": t1 - t0,
            "time/train_s": t2 - t1,
            "time/kappa_eff_s": t3 - t2,
            "throughput/tokens_per_s": gen_tokens / step_s if step_s > 0 else None,
        }
        if upd["rollout/logprob_diff"] is not None:
            metrics["rollout/logprob_diff"] = upd["rollout/logprob_diff"]
        rows = []
        for p, group in enumerate(samples):
            for g, s in enumerate(group):
                rows.append({"step": step, "prompt_id": self.problems[idx[p]].id, "problem": self.problems[idx[p]].problem,
                             "answer": self.problems[idx[p]].answer, "completion": s.text,
                             "reward": batch.rewards[p, g].item(), "advantage": batch.advantages[p, g].item()})
        return metrics, rows

    def state(self, step: int) -> dict:
        return {
            "step": step,
            "optimizer": self.opt.state_dict(),
            "scheduler": self.sched.state_dict(),
            "alpha": self.alpha,
            "torch_rng": torch.get_rng_state(),
            "python_rng": random.getstate(),
            "numpy_rng": np.random.get_state(),
            "world_size": self.dist.world,
        }


def train(cfg: TrainConfig, run_dir: Path, force: bool = False, progress: bool = True, log=print,
          on_step=None) -> list[dict]:
    """Train (or resume) the run in `run_dir`; returns the metrics of the steps run now."""
    run_dir = Path(run_dir)
    main_rank = int(os.environ.get("RANK", "0")) == 0
    if main_rank:  # only rank 0 writes the run directory
        prepare_run_dir(cfg, run_dir, force)
    tr = Trainer(cfg, run_dir, log=log if main_rank else (lambda *a: None))
    tr.dist.barrier()
    start = tr.resume_step
    if main_rank:
        # Lines written after the checkpoint we resume from are redone: drop them (and a torn last line).
        for name in ("metrics.jsonl", "samples.jsonl", "eval.jsonl"):
            truncate_jsonl(run_dir / name, lambda r: r.get("step", 0) <= start)
        if start == 0 or not (run_dir / "provenance.json").exists():
            prov = {**provenance(cfg, tr.device), "world_size": tr.dist.world}
            write_atomic(run_dir / "provenance.json", json.dumps(prov, indent=2))
    if start >= cfg.steps:
        log(f"run {run_dir} is already complete ({start} steps)")
        return []
    if start:
        log(f"resuming {run_dir} from step {start}")
    tracker = None
    if main_rank:
        tracker = Tracker(run_dir, cfg.log.tensorboard, cfg.log.wandb, cfg.log.wandb_project, cfg.log.wandb_mode,
                          config=cfg.model_dump(mode="json"))
    marker = Path(tr.base_source) / "rbctl_builtin.json" if tr.builtin else None
    done: list[dict] = []
    display = _Display(cfg.steps, start, enabled=progress and main_rank)
    nonfinite_row = 0
    try:
        with display:
            for step in range(start + 1, cfg.steps + 1):
                metrics, rows = tr.step(step)
                nonfinite_row = nonfinite_row + 1 if metrics["nonfinite/skipped"] else 0
                if nonfinite_row >= cfg.max_nonfinite_steps:
                    raise UserError(f"loss or gradient non-finite for {nonfinite_row} steps in a row at step {step} "
                                    f"(max_nonfinite_steps={cfg.max_nonfinite_steps}); lower optim.lr or check the "
                                    "rewards (those steps were skipped: no checkpoint holds NaN)")
                if main_rank:
                    if cfg.eval.every and (step % cfg.eval.every == 0 or step == cfg.steps):
                        _periodic_eval(tr, cfg, run_dir, step, metrics)
                    tracker.log(step, metrics)
                    if step % cfg.sample_every == 0 or step == 1:
                        for r in rows[: cfg.samples_per_log]:
                            append_jsonl(run_dir / "samples.jsonl", r)
                    if step % cfg.save_every == 0 or step == cfg.steps:
                        save_checkpoint(run_dir, step, tr.model, tr.tokenizer, tr.state(step), cfg.keep_checkpoints, marker)
                tr.dist.barrier()
                done.append({"step": step, **metrics})
                display.update(step, metrics)
                if on_step is not None:
                    on_step(step, metrics)
    finally:
        if tracker is not None:
            tracker.close()
    return done


def _periodic_eval(tr: Trainer, cfg: TrainConfig, run_dir: Path, step: int, metrics: dict) -> None:
    """Held-out evaluation during training; one line per benchmark in RUN_DIR/eval.jsonl."""
    from rbctl.eval.pipeline import EvalConfig, evaluate_policy, load_problems, periodic_eval_lines
    from rbctl.rollout.models import LoadedPolicy

    e = cfg.eval
    ecfg = EvalConfig(benchmarks=e.benchmarks, n=e.n, temperature=e.temperature, top_p=e.top_p, limit=e.limit,
                      max_new_tokens=e.max_new_tokens or cfg.rollout.max_new_tokens, seed=cfg.seed,
                      template=cfg.data.template, instruction=cfg.data.instruction)
    if tr.eval_problems is None:
        tr.eval_problems = load_problems(ecfg, task_spec(cfg))  # `builtin` = this run's own task
    policy = LoadedPolicy(tr.model, tr.tokenizer, tr.base_source, tr.builtin)
    t = time.perf_counter()
    results = evaluate_policy(policy, ecfg, run_dir / "eval" / "periodic" / f"step_{step:06d}", step=step,
                              problems=tr.eval_problems)
    metrics["time/eval_s"] = time.perf_counter() - t
    for line in periodic_eval_lines(results, step):
        append_jsonl(run_dir / "eval.jsonl", line)
    tr.model.train()


class _Display:
    """A Rich progress bar with live reward, entropy and κ_eff."""

    def __init__(self, total: int, start: int, enabled: bool):
        self.enabled = enabled
        self.total, self.start = total, start
        self.last_keff = None

    def __enter__(self):
        if self.enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

            self.progress = Progress(TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(),
                                     TextColumn("{task.fields[info]}"), TimeElapsedColumn(), TimeRemainingColumn())
            self.progress.__enter__()
            self.task = self.progress.add_task("train", total=self.total, completed=self.start, info="")
        return self

    def update(self, step: int, m: dict) -> None:
        if not self.enabled:
            return
        if m.get("kappa_eff") is not None:
            self.last_keff = m["kappa_eff"]
        keff = f"{self.last_keff:.3g}" if self.last_keff is not None else "–"
        info = f"reward {m['reward/mean']:.3f}  entropy {m['entropy']:.3f}  κ_eff {keff}"
        self.progress.update(self.task, completed=step, info=info)

    def __exit__(self, *exc):
        if self.enabled:
            self.progress.__exit__(*exc)
