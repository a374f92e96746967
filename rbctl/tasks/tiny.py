"""The built-in tasks' policy: a tiny Llama of the task's size over a character or word tokenizer,
warm-started by supervised training on a task's demonstrations, and cached on disk so every arm and
seed of a sweep shares one warm start. A task supplies its alphabet, its model config and a
demonstration sampler; this module does the rest (torch lives here, not in the tasks' checkers).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Callable

import torch

from rbctl.store.lock import DirLock
from rbctl.store.rundir import BUILTIN_MARKER, LOCK, TMP_SUFFIX

SPECIALS = ("<pad>", "<s>", "</s>")
WARMUP_STEPS = 50  # linear learning-rate warm-up of the SFT, then cosine to zero
REPORT_EVERY_S = 10.0  # a warm-start build says how far it got at most this often (and at its end)
_REPORT: list = [None]  # where the build in progress reports (`warm_started` sets it around the build)


class _StepReport:
    """`report(step)` prints ``warm start: step 120/400 (12 s)`` through `log` at most every
    `every` seconds and at the last step: a build of a minute or more is never one static line."""

    def __init__(self, log, total: int, every: float | None = None):
        import time

        self.log, self.total = log, total
        self.every = REPORT_EVERY_S if every is None else every
        self._clock = time.monotonic
        self.t0 = self.last = self._clock()

    def __call__(self, step: int) -> None:
        now = self._clock()
        if now - self.last >= self.every or step == self.total:
            self.last = now
            self.log(f"warm start: step {step}/{self.total} ({now - self.t0:.0f} s)")


def build_tokenizer(alphabet: str | tuple[str, ...]):
    """A real `PreTrainedTokenizerFast` (checkpoints reload with AutoTokenizer): a character tokenizer
    when `alphabet` is a string (one token per character, decoded without separators), a word
    tokenizer when it is a tuple of words (text split at whitespace, decoded joined by spaces). Ids:
    `SPECIALS` first (pad 0, bos 1, eos 2), then the alphabet in order; anything else reads as pad."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from tokenizers.processors import TemplateProcessing
    from transformers import PreTrainedTokenizerFast

    vocab = {s: i for i, s in enumerate(SPECIALS)}
    for c in alphabet:
        vocab.setdefault(c, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    if isinstance(alphabet, str):
        tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
        tok.decoder = decoders.Fuse()
    else:
        tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")


def model_config(*, vocab_size: int, hidden_size: int, layers: int, heads: int, kv_heads: int,
                 intermediate_size: int, max_positions: int, eos_token_id: int | list[int] = 2, **extra):
    """The transformers config of a tiny Llama with tied embeddings (pad 0, bos 1); `extra` goes to
    `LlamaConfig` as is (attention_bias, rope_theta, rms_norm_eps: the maze's Qwen2-like settings).
    A list of `eos_token_id`s becomes the generation config's stop tokens (sampling stops at any).

    Why a Llama even where the source is a Qwen2: transformers 5's AutoTokenizer loads any folder of
    a `qwen2` model with Qwen2Tokenizer, whatever tokenizer_config.json says, and that tokenizer drops
    a built-in task's words (a maze prompt encodes to `<s>` alone); a Llama folder loads our
    tokenizer.json as written."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_positions,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=eos_token_id,
        tie_word_embeddings=True,
        **extra,
    )


def build_model(config):
    """A freshly initialised Llama of a `model_config` (torch's global RNG draws the weights)."""
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM(config)


def cache_dir() -> Path:
    return Path(os.environ.get("RBCTL_CACHE", Path.home() / ".cache" / "rbctl"))


def warm_start_path(kind: str, spec, ws) -> Path:
    """The cache folder of a warm start, keyed by the task's kind and every setting of both specs."""
    key = json.dumps({"task": asdict(spec), "warm_start": asdict(ws), "v": 1}, sort_keys=True)
    prefix = "builtin" if kind == "links" else f"builtin-{kind}"  # links keeps its cache key of the first release
    return cache_dir() / f"{prefix}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def warm_started(kind: str, spec, ws, train: Callable[[], tuple], log=print) -> Path:
    """Path of the cached warm-started model; `train()` -> (model, tokenizer) builds it (under a file
    lock, so parallel sweep workers wait for one warm start) when missing."""
    path = warm_start_path(kind, spec, ws)
    if (path / "config.json").exists():
        return path
    with DirLock(path.parent, "warm start", log=log, name=path.name + LOCK, wait=True):
        if not (path / "config.json").exists():
            log(f"warm-starting the built-in {kind} policy ({ws.steps} SFT steps, cached at {path}) ...")
            tmp = Path(str(path) + TMP_SUFFIX)
            shutil.rmtree(tmp, ignore_errors=True)  # a build killed before its rename
            _REPORT[0] = log
            try:
                model, tok = train()
            finally:
                _REPORT[0] = None
            # A cache file, not a distributed checkpoint: whichever rank of a DDP/FSDP job takes the
            # lock writes it. transformers (5.x) writes weights only on rank 0 once torch.distributed is
            # initialised, which left rank 1's build with a tokenizer and no model.
            model.should_save_on_this_rank = lambda is_main_process: True
            model.save_pretrained(tmp)
            del model.should_save_on_this_rank
            tok.save_pretrained(tmp)
            missing = [f for f in ("config.json", "model.safetensors") if not (tmp / f).is_file()]
            if missing:
                raise RuntimeError(f"the warm start written to {tmp} lacks {', '.join(missing)}")
            record = {"kind": kind, "task": asdict(spec), "warm_start": asdict(ws)}
            (tmp / BUILTIN_MARKER).write_text(json.dumps(record))
            if path.exists():  # an incomplete folder (no config.json) left by an earlier release's build
                shutil.rmtree(path)
            os.replace(tmp, path)
    return path


def sft_warm_start(ws, alphabet: str | tuple[str, ...], config: Callable[[int], object],
                   demonstration: Callable[[random.Random, int], tuple[str, str]], format_prompt: Callable[[str], str],
                   *, weight_decay: float = 0.0, betas: tuple[float, float] = (0.9, 0.999),
                   schedule: str = "cosine", device: str = "cpu", log=None):
    """A fresh tiny policy trained by supervised learning (loss on the completion tokens only) on
    `ws.steps` batches of `ws.batch_size` demonstrations; `demonstration(rng, step)` -> (problem,
    completion); `config(vocab_size)` -> the model's `model_config`. AdamW at `ws.lr`; schedule
    "cosine": a linear warm-up over WARMUP_STEPS, then cosine to zero at `ws.steps`; "constant":
    `ws.lr` throughout. Returns (model on the CPU, tokenizer). Progress (`_StepReport`) goes to
    `log`, else to the log of the `warm_started` build in progress, else nowhere."""
    torch.manual_seed(ws.seed)
    rng = random.Random(ws.seed)
    tok = build_tokenizer(alphabet)
    model = build_model(config(len(tok))).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=ws.lr, weight_decay=weight_decay, betas=betas)
    total = max(1, ws.steps)
    shapes = {"cosine": lambda s: min(1.0, (s + 1) / WARMUP_STEPS) * 0.5 * (1 + math.cos(math.pi * s / total)),
              "constant": lambda s: 1.0}
    sched = torch.optim.lr_scheduler.LambdaLR(opt, shapes[schedule])
    log = log or _REPORT[0]
    report = _StepReport(log, ws.steps) if log is not None else (lambda step: None)
    model.train()
    for step in range(ws.steps):
        seqs, prompt_lens = [], []
        for _ in range(ws.batch_size):
            problem, completion = demonstration(rng, step)
            p = tok(format_prompt(problem))["input_ids"]
            c = tok(completion, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
            seqs.append(p + c)
            prompt_lens.append(len(p))
        width = max(map(len, seqs))
        ids = torch.zeros((len(seqs), width), dtype=torch.long)
        labels = torch.full_like(ids, -100)
        for i, s in enumerate(seqs):
            ids[i, : len(s)] = torch.tensor(s)
            labels[i, prompt_lens[i]: len(s)] = torch.tensor(s[prompt_lens[i]:])
        ids, labels = ids.to(device), labels.to(device)
        loss = model(input_ids=ids, attention_mask=(ids != 0).long(), labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        report(step + 1)
    model.eval()
    return model.cpu(), tok
