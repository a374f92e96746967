"""What a training config needs of a GPU, estimated offline from the model's architecture: memory per
GPU by part, time per step, and whether they fit the card and the job time limit the config names
(`hardware`). Printed by `rbctl train CONFIG --dry-run` (rbctl.train.dry_run).

Memory per GPU (bytes; N parameters, A LoRA adapter parameters, W = world size under FSDP else 1):

    weights      full-parameter: N · 4 (float32 master weights; bf16-pure: N · 2), / W under FSDP;
                 LoRA: N · b (the frozen base in model.dtype, b = 2 for bf16) + A · 4
    gradients    as the trainable weights: N · 4 / W, or A · 4
    AdamW        two moments: N · 8 / W, or A · 8
    reference    the frozen KL reference (kl_coef > 0 or log_kl, full-parameter only): N · b / W
    activations  one micro-batch of t tokens: with gradient checkpointing L · t · H · r (each layer's
                 input, r = the residual stream's bytes) + t · s (one layer recomputed); without, L · t · s;
                 s = a · (7H + 2·kv + 4I) + 2 · r · H per token (attention's and SwiGLU MLP's saved
                 tensors, a = 2 under bf16 autocast); plus the logits and their gradient t · V · 2a
                 (and a float32 log-softmax and its gradient, t · V · 8, with algo.logprobs softmax)
    engine       vLLM: gpu_memory_utilization × the card: its weights (N · b), `VLLM_ALLOWANCE` for its
                 activations and CUDA graphs, the rest KV cache (2 · L · kv · b bytes a token); asleep
                 (sleep_mode) it keeps `VLLM_ASLEEP`. hf: the KV cache of max_batch sequences
                 (or the rank's P·G/W) at full length, in a bytes a token per layer and head.

Peak = max(training state + reference + engine while sampling, training state + reference +
activations + engine asleep while training) (+ the full float32 weights while sampling under FSDP),
compared with the card's memory less `CUDA_RESERVE`. An estimate: allocator fragmentation and the
libraries' workspaces are in the reserve, not counted per part.

Time per step (every response runs to max_new_tokens: an upper bound):

    rollout      decoding is memory-bound: each decoding step reads the weights once and each running
                 sequence's KV cache; concurrency c = the sequences the KV cache holds at full length
                 (vLLM) or max_batch (hf); per generated token (N · b / c + mean context · KV bytes),
                 at `HBM_EFFICIENCY` of the card's bandwidth; at least 2·N·tokens at `TRAIN_MFU`;
                 plus `STEP_OVERHEAD_S` per decoding step (vLLM's CUDA graphs vs hf's Python loop)
    update       N · T · (2 forward + 2 input gradients + 2 weight gradients unless LoRA + 2 if
                 checkpointing recomputes) · ppo_epochs, + 2·N·T for the reference, κ_eff and the
                 behaviour log-probs where they run (rbctl.train.dry_run.step_cost), at `TRAIN_MFU`
                 of the card's dense bf16 peak, divided over the W GPUs

Periodic evaluation is not counted (each is a rollout phase of benchmark problems × n samples).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rbctl.config.hardware import CARDS, Card

GiB = 2**30


# Stated assumptions, not measurements (each one a round figure, labelled where it is printed):
CUDA_RESERVE = int(1.5 * GiB)  # CUDA's context, cuBLAS and NCCL workspaces: outside torch's allocator
VLLM_ALLOWANCE = 2 * GiB  # vLLM's profiled activations and CUDA graphs, inside its share
VLLM_ASLEEP = 1 * GiB  # what a level-2-asleep vLLM still holds (its CUDA graphs' pool)
TRAIN_MFU = 0.30  # model-FLOPs utilisation of the update (and the compute floor of decoding)
HBM_EFFICIENCY = 0.70  # share of the card's memory bandwidth a decoding step reaches
STEP_OVERHEAD_S = {"vllm": 0.001, "hf": 0.02}  # per decoding step: CUDA graphs vs a Python loop's launches

# The config.json fields that set memory and FLOPs, for the models the paper recipes name (the Hub is
# not asked): huggingface.co/Qwen/Qwen3-8B and huggingface.co/meta-llama/Llama-3.2-3B(-Instruct).
_LLAMA_3_2_3B = dict(model_type="llama", hidden_size=3072, intermediate_size=8192, num_hidden_layers=28,
                     num_attention_heads=24, num_key_value_heads=8, head_dim=128, vocab_size=128_256,
                     tie_word_embeddings=True)
KNOWN_ARCHITECTURES = {
    "Qwen/Qwen3-8B": dict(model_type="qwen3", hidden_size=4096, intermediate_size=12_288, num_hidden_layers=36,
                          num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=151_936,
                          tie_word_embeddings=False),
    "meta-llama/Llama-3.2-3B-Instruct": _LLAMA_3_2_3B,
    "meta-llama/Llama-3.2-3B": _LLAMA_3_2_3B,
}
_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class Architecture:
    """The sizes of a decoder-only transformer with a SwiGLU MLP (Llama, Qwen, Mistral...)."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    intermediate: int

    @classmethod
    def of(cls, config) -> Architecture:
        """From a transformers config (its text config for a multimodal one)."""
        c = config.get_text_config() if hasattr(config, "get_text_config") else config
        heads = c.num_attention_heads
        return cls(c.hidden_size, c.num_hidden_layers, heads, getattr(c, "num_key_value_heads", None) or heads,
                   getattr(c, "head_dim", None) or c.hidden_size // heads, c.vocab_size, c.intermediate_size)

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """Keys and values of one token over all layers (Qwen3-8B in bf16: 2·36·8·128·2 = 147,456)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes

    def lora_parameters(self, r: int, targets) -> int:
        """Adapter parameters of rank `r` on the projections `targets` ("all-linear": all seven) of every layer."""
        q, kv, h, i = self.heads * self.head_dim, self.kv_heads * self.head_dim, self.hidden, self.intermediate
        shape = {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
                 "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}
        names = _PROJECTIONS if targets == "all-linear" else [t for t in targets if t in shape]
        return self.layers * sum(r * sum(shape[n]) for n in names)


@dataclass
class Budget:
    """Bytes per GPU by part (module docstring), and the two phases' totals."""

    parts: dict[str, tuple[float, str]]  # part: (bytes, how it was counted)
    sampling: float
    training: float
    kv_tokens: float | None = None  # tokens vLLM's KV cache holds (None: hf engine)

    @property
    def peak(self) -> float:
        return max(self.sampling, self.training)


def _gib(x: float) -> str:
    return f"{x / GiB:.1f} GiB"


def _dtype_bytes(cfg) -> int:
    """Bytes per element of the weights as loaded (model.dtype; auto = bf16 on a GPU)."""
    return 4 if cfg.model.dtype == "float32" else 2


def _precision(cfg) -> str:
    return cfg.model.precision if cfg.model.precision != "auto" else "bf16-mixed"


def _world(cfg) -> int:
    return cfg.hardware.gpus


def training_state(cfg, n: float, arch: Architecture) -> dict[str, tuple[float, str]]:
    """Weights, gradients, AdamW moments and the reference, per GPU (module docstring)."""
    from rbctl.train.objective import keeps_reference

    b, pure = _dtype_bytes(cfg), _precision(cfg) == "bf16-pure"
    shard = _world(cfg) if cfg.model.fsdp else 1
    if cfg.model.lora is not None:
        a = arch.lora_parameters(cfg.model.lora.r, cfg.model.lora.target_modules)
        return {"weights": (n * b + a * 4, f"frozen base {n:.3g} × {b} B + LoRA adapters {a:.3g} × 4 B"),
                "gradients": (a * 4, "the adapters' (float32)"), "AdamW": (a * 8, "two float32 moments of the adapters"),
                "reference": (0.0, "none: the adapter-disabled base")}
    w = b if pure else 4
    per = f" / {shard} (FSDP)" if shard > 1 else ""
    ref = n * b / shard if keeps_reference(cfg.algo) else 0.0
    return {"weights": (n * w / shard, f"{n:.3g} × {w} B ({'as loaded' if pure else 'float32 master'}){per}"),
            "gradients": (n * w / shard, f"{n:.3g} × {w} B{per}"),
            "AdamW": (n * 2 * w / shard, f"two moments, {n:.3g} × {2 * w} B{per}"),
            "reference": (ref, f"{n:.3g} × {b} B{per}" if ref else "none (kl_coef 0, log_kl off)")}


def micro_batch_tokens(cfg, prompt_tokens: float) -> tuple[int, float]:
    """(sequences, tokens) of one training micro-batch on one GPU."""
    ro, a = cfg.rollout, cfg.algo
    mini = (a.ppo_mini_batch_size or ro.prompts_per_step) * ro.group_size // _world(cfg)
    seqs = min(a.micro_batch_size, mini) if a.micro_batch_size else mini
    return seqs, seqs * (prompt_tokens + ro.max_new_tokens)


def activations(cfg, arch: Architecture, prompt_tokens: float, builtin: bool) -> tuple[float, str]:
    """Bytes a training micro-batch keeps for its backward (module docstring)."""
    from rbctl.algo.losses import resolve_logprobs

    seqs, t = micro_batch_tokens(cfg, prompt_tokens)
    a = 4 if _precision(cfg) == "fp32" else 2
    lora, pure = cfg.model.lora is not None, _precision(cfg) == "bf16-pure"
    r = _dtype_bytes(cfg) if (lora or pure) else 4  # the residual stream has the embeddings' dtype
    h, i, kv = arch.hidden, arch.intermediate, arch.kv_heads * arch.head_dim
    per_token = a * (7 * h + 2 * kv + 4 * i) + 2 * r * h
    if cfg.model.gradient_checkpointing:
        layers, how = arch.layers * t * h * r + t * per_token, "checkpointed layer inputs + one layer recomputed"
    else:
        layers, how = arch.layers * t * per_token, "every layer's saved tensors"
    softmax = not resolve_logprobs(cfg.algo.logprobs, builtin=builtin) or cfg.algo.entropy.mode != "none"
    logits = t * arch.vocab * (2 * a + (8 if softmax else 0))
    return layers + logits, (f"micro-batch of {seqs} × {t / max(seqs, 1):.0f} tokens: {how} {_gib(layers)}, "
                             f"logits {_gib(logits)}")


def engine_memory(cfg, n: float, arch: Architecture, card: Card | None, prompt_tokens: float
                  ) -> tuple[float, float, str, float | None]:
    """(bytes while sampling, bytes while training, how, vLLM's KV tokens or None) of the rollout engine."""
    ro, b = cfg.rollout, _dtype_bytes(cfg)
    seq = prompt_tokens + ro.max_new_tokens
    if ro.engine == "vllm":
        total = card.memory if card is not None else 80 * GiB
        share = ro.vllm.gpu_memory_utilization * total
        kv = share - n * b - VLLM_ALLOWANCE
        tokens = max(kv, 0.0) / arch.kv_bytes_per_token(b)
        idle = VLLM_ASLEEP if ro.vllm.sleep_mode else share
        how = (f"gpu_memory_utilization {ro.vllm.gpu_memory_utilization:g} × {_gib(total)}: weights {_gib(n * b)} + "
               f"{_gib(VLLM_ALLOWANCE)} allowance + KV cache {_gib(max(kv, 0.0))} ({tokens:,.0f} tokens, "
               f"{tokens / seq:.1f} sequences of {seq:.0f} at once); "
               + ("asleep while training" if ro.vllm.sleep_mode else "held while training (sleep_mode off)"))
        return share, idle, how, tokens
    seqs = min(ro.max_batch, ro.prompts_per_step * ro.group_size // _world(cfg))
    a = 4 if _precision(cfg) == "fp32" else 2
    kv = seqs * seq * arch.kv_bytes_per_token(a)
    return kv, 0.0, f"hf KV cache of {seqs} sequences × {seq:.0f} tokens", None


def memory_budget(cfg, n: float, arch: Architecture, prompt_tokens: float, builtin: bool = False) -> Budget:
    """Per-GPU memory of `cfg` (module docstring) on its `hardware.gpu` (80 GiB assumed for vLLM's share
    when no card is named)."""
    card = CARDS.get(cfg.hardware.gpu)
    parts = training_state(cfg, n, arch)
    parts["activations"] = activations(cfg, arch, prompt_tokens, builtin)
    sampling, idle, how, kv_tokens = engine_memory(cfg, n, arch, card, prompt_tokens)
    parts["engine"] = (sampling, how)
    state = sum(parts[k][0] for k in ("weights", "gradients", "AdamW", "reference"))
    gathered = n * 4 if cfg.model.fsdp and _world(cfg) > 1 else 0.0  # the full parameters while sampling
    return Budget(parts, sampling=state + sampling + gathered, training=state + parts["activations"][0] + idle,
                  kv_tokens=kv_tokens)


@dataclass
class StepTime:
    rollout_s: float
    update_s: float
    rollout_how: str
    update_how: str

    @property
    def step_s(self) -> float:
        return self.rollout_s + self.update_s


def _concurrency(cfg, seqs: int, seq: float, kv_tokens: float | None) -> int:
    """Sequences decoded at once: what vLLM's KV cache holds at full length, or hf's max_batch."""
    if kv_tokens is None:
        return max(1, min(cfg.rollout.max_batch, seqs))
    return max(1, min(seqs, int(kv_tokens // seq)))


def step_time(cfg, n: float, arch: Architecture, prompt_tokens: float, kv_tokens: float | None,
              extra_flops: float) -> StepTime:
    """Time of one step on `hardware.gpu` (an H100-80GB when none is named): module docstring.
    `extra_flops`: the reference, κ_eff and behaviour forwards of the whole step (`StepCost`)."""
    card, ro = CARDS.get(cfg.hardware.gpu, CARDS["H100-80GB"]), cfg.rollout
    world, b = _world(cfg), _dtype_bytes(cfg)
    seqs = ro.prompts_per_step * ro.group_size // world
    seq, mean_context = prompt_tokens + ro.max_new_tokens, prompt_tokens + ro.max_new_tokens / 2
    conc = _concurrency(cfg, seqs, seq, kv_tokens)
    waves = math.ceil(seqs / conc)
    generated = seqs * ro.max_new_tokens
    per_token = n * b / conc + mean_context * arch.kv_bytes_per_token(b)
    memory_s = generated * per_token / (card.hbm * HBM_EFFICIENCY)
    compute_s = 2 * n * (generated + seqs * prompt_tokens) / (card.bf16_flops * TRAIN_MFU)
    overhead_s = waves * ro.max_new_tokens * STEP_OVERHEAD_S[ro.engine]
    rollout = max(memory_s, compute_s) + overhead_s
    rollout_how = (f"{seqs} sequences, {conc} at once ({waves} wave{'s' * (waves > 1)} of {ro.max_new_tokens} "
                   f"decoding steps), {per_token / 1e6:.0f} MB read per token at {HBM_EFFICIENCY:.0%} of "
                   f"{card.hbm / 1e12:.2f} TB/s")
    tokens = ro.prompts_per_step * ro.group_size * seq
    per = 4 + (0 if cfg.model.lora is not None else 2) + (2 if cfg.model.gradient_checkpointing else 0)
    flops = n * tokens * per * cfg.algo.ppo_epochs + extra_flops
    update = flops / world / (card.bf16_flops * TRAIN_MFU)
    update_how = (f"{per}·N·T·ppo_epochs + reference/κ_eff/behaviour forwards = {flops:.2e} FLOPs"
                  + (f" over {world} GPUs" if world > 1 else "")
                  + f" at {TRAIN_MFU:.0%} of {card.bf16_flops / 1e12:.0f} TFLOP/s")
    return StepTime(rollout, update, rollout_how, update_how)


def _duration(s: float) -> str:
    return f"{s / 60:.1f} min" if s < 2 * 3600 else f"{s / 3600:.1f} h"


def _memory_rows(cfg, budget: Budget, card: Card | None) -> tuple[list[tuple[str, str]], list[str]]:
    rows = [(f"  {k}", f"{_gib(v)}  {how}") for k, (v, how) in budget.parts.items()]
    verdict, warnings = "", []
    if card is not None:
        usable = card.memory - CUDA_RESERVE
        fits = budget.peak <= usable
        verdict = (f": {'fits' if fits else 'EXCEEDS'} the {cfg.hardware.gpu}'s {_gib(usable)} "
                   f"({_gib(card.memory)} less {_gib(CUDA_RESERVE)} for CUDA's context and workspaces)")
        if not fits:
            warnings.append(f"memory: the estimated peak of {_gib(budget.peak)} per GPU exceeds the "
                            f"{cfg.hardware.gpu}'s usable {_gib(usable)} (rows above)")
    rows.append(("  peak", f"{_gib(budget.peak)} (sampling {_gib(budget.sampling)}, training {_gib(budget.training)})"
                 + verdict))
    return rows, warnings


def _time_rows(cfg, t: StepTime) -> tuple[list[tuple[str, str]], list[str]]:
    run_s, lost_s = t.step_s * cfg.steps, t.step_s * cfg.save_every
    rows = [("  rollout", f"{_duration(t.rollout_s)}: {t.rollout_how}"), ("  update", f"{_duration(t.update_s)}: {t.update_how}"),
            ("  step", f"{_duration(t.step_s)}; {cfg.steps} steps ≈ {_duration(run_s)} (evaluations not counted)")]
    warnings = []
    limit = cfg.hardware.time_limit_min
    if limit is not None:
        jobs = math.ceil(run_s / (limit * 60))
        rows.append(("  time limit", f"{limit} min a job: {jobs} job{'s' * (jobs > 1)}; a checkpoint every "
                                     f"{cfg.save_every} steps ≈ {_duration(lost_s)} is the most a requeue loses"))
        if lost_s >= limit * 60:
            warnings.append(f"time: save_every {cfg.save_every} steps ≈ {_duration(lost_s)} is longer than a job "
                            f"({limit} min): a job ends before its first checkpoint and the run never gets anywhere")
        elif jobs > 1:
            warnings.append(f"time: the run ≈ {_duration(run_s)} outlasts one job ({limit} min): it takes {jobs} "
                            f"jobs, each requeue losing up to {cfg.save_every} steps")
    return rows, warnings


def plan_rows(cfg, n: float, arch: Architecture, prompt_tokens: float, extra_flops: float, builtin: bool = False
              ) -> tuple[list[tuple[str, str]], list[str]]:
    """The dry run's rows (label, text) of memory per GPU and time, and its warnings."""
    card = CARDS.get(cfg.hardware.gpu)
    budget = memory_budget(cfg, n, arch, prompt_tokens, builtin)
    on = (f"{cfg.hardware.gpus} × {cfg.hardware.gpu}" if card is not None
          else "no hardware.gpu named: not checked against a card" + (", vLLM's share of 80 GiB assumed"
                                                                       if cfg.rollout.engine == "vllm" else ""))
    rows = [("memory/GPU", f"an estimate (rbctl.train.footprint), {on}")]
    memory, warnings = _memory_rows(cfg, budget, card)
    seq = prompt_tokens + cfg.rollout.max_new_tokens
    if budget.kv_tokens is not None and budget.kv_tokens < seq:
        warnings.append(f"memory: rollout.vllm.gpu_memory_utilization {cfg.rollout.vllm.gpu_memory_utilization:g} "
                        f"leaves vLLM a KV cache of {budget.kv_tokens:,.0f} tokens, less than one sequence of {seq:.0f}")
    t = step_time(cfg, n, arch, prompt_tokens, budget.kv_tokens, extra_flops)
    timing, late = _time_rows(cfg, t)
    assumed = "" if card is not None else ", on an H100-80GB"
    return rows + memory + [("time/step", f"an estimate{assumed}, every response at max_new_tokens: an upper bound")] \
        + timing, warnings + late


def count_parameters(config) -> float:
    """Exact parameter count of a model config, built on the meta device (no memory, no weights)."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return float(sum(p.numel() for p in model.parameters()))


def known_architecture(name: str) -> tuple[float, Architecture, str]:
    """(N, architecture, where N came from) of a model the recipes name, from its shipped config.json fields."""
    from transformers import AutoConfig

    config = AutoConfig.for_model(**KNOWN_ARCHITECTURES[name])
    return count_parameters(config), Architecture.of(config), \
        "the shipped config.json fields (rbctl.train.footprint), counted on the meta device"


def _gb_decimal(nbytes: float) -> str:
    return f"{nbytes / 1e9:.1f} GB" if nbytes >= 1e8 else f"{nbytes / 1e6:.1f} MB"


def training_state_line(cfg, n_params: float) -> str:
    """Training state by `model.precision` (rbctl.train.precision): float32 master weights, gradients
    and AdamW moments (16 bytes/param) unless bf16-pure; with LoRA the frozen base in model.dtype. The
    dry run's line for a CPU run (a GPU run gets `plan_rows`)."""
    from rbctl.train.objective import keeps_reference

    gpu = cfg.model.device != "cpu"
    half = cfg.model.dtype in ("bfloat16", "float16") or (cfg.model.dtype == "auto" and gpu)
    load_bytes = 2 if half else 4
    precision = cfg.model.precision if cfg.model.precision != "auto" else ("bf16-mixed" if gpu else "fp32")
    if cfg.model.lora is not None:
        return (f"frozen base ≈ {_gb_decimal(n_params * load_bytes)} ({'bf16' if half else 'fp32'}); LoRA adapters, their "
                f"gradients and AdamW state in float32 are small; {precision} (before activations and the rollout engine)")
    master = load_bytes if precision == "bf16-pure" else 4
    ref = n_params * load_bytes if keeps_reference(cfg.algo) else 0.0
    return (f"weights + grads + AdamW ≈ {_gb_decimal(n_params * master * 4)} ({precision})"
            + (f", reference copy {_gb_decimal(ref)}" if ref else "")
            + " (full-parameter training, before activations and the rollout engine)"
            + ("; model.fsdp: divided by the number of processes, plus the full weights while sampling"
               if cfg.model.fsdp else ""))
