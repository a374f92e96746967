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

import random
from dataclasses import dataclass
from typing import ClassVar

from rbctl.tasks.settings import setting
from rbctl.tasks.benchmarks import Benchmark, Problem

LETTERS = "abcdefghijklmnop"
KIND = "links"


@dataclass(frozen=True)
class TaskSpec:
    """Settings of the built-in task (`data.builtin` in the training config)."""

    kind: ClassVar[str] = "links"
    num_keys: int = setting(8, "Letters in the random function (difficulty of one look-up; a blind guess is "
                               "right with probability 1/num_keys).", ge=2, le=16)
    min_hops: int = setting(1, "Fewest hops of a problem.", ge=1, le=9)
    max_hops: int = setting(6, "Most hops of a problem (difficulty spread; the hop count is one digit).", ge=1, le=9)
    train_size: int = setting(4096, "Problems in the fixed training pool (so epochs and resume are well defined).", ge=1)
    test_size: int = setting(256, "Problems in the held-out test split (benchmark 'builtin').", ge=1)
    seed: int = setting(1234, "Task seed: the same problems for every arm and run seed.")

    def __post_init__(self):
        if self.min_hops > self.max_hops:
            raise ValueError("min_hops must be <= max_hops")


@dataclass(frozen=True)
class WarmStartSpec:
    """Settings of the supervised warm start. Changing any of them builds a new cached model."""

    demo_error: float = setting(0.2, "Warm start: probability that a demonstration hop is wrong.", ge=0.0, lt=1.0)
    steps: int = setting(1200, "Warm start: supervised steps on demonstrations (cached; the induction circuit "
                               "forms after ~700 steps at the default settings).", key="warm_start_steps", ge=0)
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


# --- the policy: its alphabet, size and demonstrations (built by rbctl.tasks.builtin / tiny) --------


def alphabet(spec: TaskSpec) -> str:
    return keys(spec) + keys(spec).upper() + "0123456789#?|"


def max_positions(spec: TaskSpec) -> int:
    return 2 * spec.num_keys + 2 * spec.max_hops + 16


def max_answer_tokens(spec: TaskSpec) -> int:
    """Longest correct answer: the start, 2 per hop, '#', the letter, EOS."""
    return 2 * spec.max_hops + 4


def model_config(spec: TaskSpec, ws: WarmStartSpec, vocab_size: int):
    return llama_config(ws, vocab_size, max_positions(spec))


def llama_config(ws, vocab_size: int, max_positions: int):
    """A Llama of `ws.layers` layers, width `ws.hidden_size`, `ws.heads` heads (as many KV heads), MLP 4x."""
    from rbctl.tasks import tiny

    return tiny.model_config(vocab_size=vocab_size, hidden_size=ws.hidden_size, layers=ws.layers,
                             heads=ws.heads, kv_heads=ws.heads, intermediate_size=4 * ws.hidden_size,
                             max_positions=max_positions)


def format_problem(problem: str) -> str:
    """The prompt text of the built-in task: the problem and a '?'."""
    return problem + "?"


def sft_warm_start(spec: TaskSpec, ws: WarmStartSpec):
    """Supervised training on noisy demonstrations: each hop wrong with probability `demo_error`."""
    from rbctl.tasks import tiny

    def demonstration(rng: random.Random, step: int) -> tuple[str, str]:
        problem, completion, _ = make_problem(rng, spec, rng.randint(spec.min_hops, spec.max_hops), ws.demo_error)
        return problem, completion

    return tiny.sft_warm_start(ws, alphabet(spec), lambda vocab: model_config(spec, ws, vocab), demonstration,
                               format_problem)


def benchmark(spec: TaskSpec) -> Benchmark:
    """The task's test split as the benchmark `builtin`."""
    return Benchmark(
        name="builtin",
        split="test",
        description=f"built-in follow-the-links task, test split ({spec.test_size} problems, exact answers)",
        loader=lambda: problems(spec, "test"),
        extract_answer=extract_answer,
    )
