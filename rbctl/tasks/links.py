"""The embedded default: a synthetic reasoning task, a tiny transformer policy, and its warm start.

Task ("follow the links"). A prompt lists a random function f over K letters as pairs `xY`
(x maps to y; the target is written upper-case so that a key and a value never look alike),
then a start letter and a hop count: `hDaDbBfDcAeFgBdE|a3`. The worked answer walks the chain
one hop at a time and ends with the final letter: `aDdEeFf#F` (a→d→e→f). Difficulty is the
number of hops (uniform in [min_hops, max_hops]); each hop is one in-context look-up, so
longer chains need more correct steps in a row. Answers are checked exactly.

Policy. A 2-layer Llama (about 130k parameters) built in code over a character tokenizer,
warm-started by supervised fine-tuning on *imperfect* demonstrations: each hop of a
demonstration is wrong with probability `demo_error`, and the error propagates. The policy
learns the look-up (an induction circuit) and the demonstrators' error rate, so its sampled
accuracy is about (1 − demo_error)^hops: roughly 55% on the mixed training distribution,
84% at 1 hop and 38% at 6 — room for RL, with diverse rollouts. The warm-started model is
cached on disk (keyed by its settings) so every arm and seed of a sweep shares it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import random
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from rbctl.store.rundir import BUILTIN_MARKER, builtin_task_record
from rbctl.tasks.registry import Benchmark, Problem, register

LETTERS = "abcdefghijklmnop"
SPECIALS = ("<pad>", "<s>", "</s>")


@dataclass(frozen=True)
class TaskSpec:
    """Settings of the built-in task (`data.builtin` in the training config)."""

    num_keys: int = 8  # letters in the random function; chance of a blind guess is 1/num_keys
    min_hops: int = 1
    max_hops: int = 6
    train_size: int = 4096  # fixed training pool, so epochs and resume are well defined
    test_size: int = 256
    seed: int = 1234  # task seed: the same problems for every arm and run seed


@dataclass(frozen=True)
class WarmStartSpec:
    """Settings of the supervised warm start. Changing any of them builds a new cached model."""

    demo_error: float = 0.2  # probability that a demonstration's hop is wrong
    steps: int = 1200  # the induction circuit forms after ~700 steps at these settings
    batch_size: int = 64
    lr: float = 3e-3
    hidden_size: int = 64
    layers: int = 2
    heads: int = 4
    seed: int = 0


def keys(spec: TaskSpec) -> str:
    return LETTERS[: spec.num_keys]


def make_problem(rng: random.Random, spec: TaskSpec, hops: int, demo_error: float = 0.0) -> tuple[str, str, str]:
    """(problem, worked completion, gold answer). With demo_error > 0 the completion may be wrong."""
    ks = keys(spec)
    f = {x: rng.choice(ks) for x in ks}
    order = list(ks)
    rng.shuffle(order)
    start = rng.choice(ks)
    problem = "".join(x + f[x].upper() for x in order) + f"|{start}{hops}"
    gold, cur, cot = start, start, start
    for _ in range(hops):
        gold = f[gold]
        nxt = f[cur]
        if demo_error and rng.random() < demo_error:
            nxt = rng.choice([x for x in ks if x != nxt])
        cot += nxt.upper() + nxt
        cur = nxt
    return problem, f"{cot}#{cur.upper()}", gold.upper()


def problems(spec: TaskSpec, split: str) -> list[Problem]:
    """The fixed train or test split; the test split is drawn from another stream than train."""
    size = spec.train_size if split == "train" else spec.test_size
    rng = random.Random(f"{spec.seed}-{split}")
    out = []
    for i in range(size):
        hops = rng.randint(spec.min_hops, spec.max_hops)
        problem, _, answer = make_problem(rng, spec, hops)
        out.append(Problem(id=f"builtin-{split}-{i}", problem=problem, answer=answer))
    return out


def hops_of(problem: str) -> int:
    return int(problem.rsplit("|", 1)[1][1:])


def extract_answer(completion: str) -> str | None:
    """The letter after the last '#', or None."""
    if "#" not in completion:
        return None
    tail = completion.rsplit("#", 1)[1].strip()
    return tail or None


def check(completion: str, answer: str) -> bool:
    """The built-in task's exact checker."""
    return extract_answer(completion) == answer


# --- tokenizer and model -------------------------------------------------------------------------


def build_tokenizer(spec: TaskSpec):
    """A character tokenizer (a real `PreTrainedTokenizerFast`, so checkpoints reload with AutoTokenizer)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from tokenizers.processors import TemplateProcessing
    from transformers import PreTrainedTokenizerFast

    chars = keys(spec) + keys(spec).upper() + "0123456789#?|"
    vocab = {s: i for i, s in enumerate(SPECIALS)}
    for c in chars:
        vocab[c] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.post_processor = TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")


def format_problem(problem: str) -> str:
    """The prompt text of the built-in task: the problem and a '?'."""
    return problem + "?"


def build_model(spec: TaskSpec, ws: WarmStartSpec, vocab_size: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=ws.hidden_size,
        intermediate_size=4 * ws.hidden_size,
        num_hidden_layers=ws.layers,
        num_attention_heads=ws.heads,
        num_key_value_heads=ws.heads,
        max_position_embeddings=2 * spec.num_keys + 2 * spec.max_hops + 16,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(cfg)


def cache_dir() -> Path:
    return Path(os.environ.get("RBCTL_CACHE", Path.home() / ".cache" / "rbctl"))


def warm_start_path(spec: TaskSpec, ws: WarmStartSpec) -> Path:
    key = json.dumps({"task": asdict(spec), "warm_start": asdict(ws), "v": 1}, sort_keys=True)
    return cache_dir() / f"builtin-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def warm_started(spec: TaskSpec, ws: WarmStartSpec, log=print) -> Path:
    """Path of the cached warm-started model; trains it (under a file lock) if missing."""
    path = warm_start_path(spec, ws)
    if (path / "config.json").exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(str(path) + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # parallel sweep workers wait for one warm start
        if not (path / "config.json").exists():
            log(f"warm-starting the built-in policy ({ws.steps} SFT steps, cached at {path}) ...")
            tmp = Path(str(path) + ".tmp")
            model, tok = sft_warm_start(spec, ws)
            model.save_pretrained(tmp)
            tok.save_pretrained(tmp)
            (tmp / BUILTIN_MARKER).write_text(json.dumps({"task": asdict(spec), "warm_start": asdict(ws)}))
            os.replace(tmp, path)
    return path


def sft_warm_start(spec: TaskSpec, ws: WarmStartSpec):
    """Supervised training on noisy demonstrations (loss on the completion tokens only)."""
    torch.manual_seed(ws.seed)
    rng = random.Random(ws.seed)
    tok = build_tokenizer(spec)
    model = build_model(spec, ws, len(tok))
    opt = torch.optim.AdamW(model.parameters(), lr=ws.lr, weight_decay=0.0)
    warmup = 50
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * s / ws.steps))
    )
    model.train()
    for _ in range(ws.steps):
        seqs, prompt_lens = [], []
        for _ in range(ws.batch_size):
            problem, completion, _ = make_problem(rng, spec, rng.randint(spec.min_hops, spec.max_hops), ws.demo_error)
            p = tok(format_problem(problem))["input_ids"]
            c = tok(completion, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
            seqs.append(p + c)
            prompt_lens.append(len(p))
        width = max(map(len, seqs))
        ids = torch.zeros((len(seqs), width), dtype=torch.long)
        labels = torch.full_like(ids, -100)
        for i, s in enumerate(seqs):
            ids[i, : len(s)] = torch.tensor(s)
            labels[i, prompt_lens[i]: len(s)] = torch.tensor(s[prompt_lens[i]:])
        loss = model(input_ids=ids, attention_mask=(ids != 0).long(), labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
    model.eval()
    return model, tok


def task_spec_of(model_dir: Path) -> TaskSpec | None:
    """The task settings a built-in policy directory (warm start or checkpoint) records, else None."""
    task = (builtin_task_record(model_dir) or {}).get("task")
    return TaskSpec(**task) if task else None


def register_benchmark(spec: TaskSpec | None = None) -> None:
    """Register the built-in task's test split as the benchmark `builtin`."""
    spec = spec or TaskSpec()
    register(
        Benchmark(
            name="builtin",
            hf_id=None,
            hf_config=None,
            split="test",
            problem_field="problem",
            answer_field="answer",
            answer_transform=None,
            local_file=None,
            description=f"built-in follow-the-links task, test split ({spec.test_size} problems, exact answers)",
            loader=lambda: problems(spec, "test"),
        ),
        replace=True,
    )
