"""The second built-in task: "follow the links to a fixed point" (a premature-convergence testbed).

Task. A prompt lists a random function f over K letters as pairs `xY` (x maps to y), shuffled,
then a start letter: `aDbBcEdEeEfB...|a`. f is a forest: its roots are the fixed points
(letters that map to themselves, `num_roots` of them) and every other letter leads to one of
them. The answer is the fixed point reached from the start letter. The depth of the start
(hops to its fixed point) is NOT shown: with probability `depth1_frac` it is 1, otherwise it
is uniform in [2, max_hops]. Answers are checked exactly (`builtin.check`: the letter after the
last '#').

Two ways to answer.
- The shortcut `#D`: write f(start) at once. Right iff the depth is 1 (a fraction `depth1_frac`
  of the problems) — a 2-token answer.
- The walk `aDdEeE#E`: write the start, then for each hop the looked-up letter (upper-case) and,
  unless it equals the current letter (a fixed point: stop), the letter again (lower-case) to
  continue from; end with `#` and the fixed point. General, 2·depth + 4 tokens, right with
  probability about (1 − e)^depth for a per-hop error e.

Warm start. SFT in two phases: first clean walks at every depth (many look-ups per sequence, so
the look-up circuit forms reliably), then the demonstrators' mixture: a walk with probability
`walk_demo_frac`, otherwise the shortcut. A demonstrated walk stops early at each hop with
probability `demo_error` (it takes the current letter for the fixed point: wrong, and never right
by chance), so it is right with probability (1 − demo_error)^depth; the shortcut's look-up is wrong
with probability `shortcut_error` (0 by default). So the warm-started policy walks on about
`walk_demo_frac` of its samples whatever the problem, and walks noisily.

Why plain GRPO locks in. The strategy is chosen at the first response token, before the depth is
visible. On depth-1 problems the shortcut is right and short; a failed walk in a mostly-correct
group gets a large negative advantage (GRPO's gap 1/σ̂ grows as p̂ → 1), and under GRPO's
seq-mean-token-mean aggregation a 2-token shortcut's first token gets far more weight per unit of
advantage than the first token of a 10-token walk. So the walk's probability is pushed down faster
than the rare walk successes on deep problems push it up; the walk starves before RL sharpens its
per-hop accuracy, deep problems go all-wrong (no signal), and pass@1 settles near `depth1_frac`.
A policy that keeps walking reaches far more (the ceiling; see docs/plateau_task.md). What GRPO
actually converges to is a shortcut that often names *a* fixed point rather than f(start), the
same confident answer in every sample of a problem.

Same entry points as `rbctl.tasks.links` (see `rbctl.tasks.builtin`); no torch at module level; the
tokenizer, prompt format and checker are the links task's, the policy and warm start `rbctl.tasks.tiny`'s.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import ClassVar

# the links task's letters, alphabet (so its tokenizer), prompt format and checker serve this task too
from rbctl.tasks.links import alphabet, check, extract_answer, format_problem, keys  # noqa: F401
from rbctl.tasks.links import llama_config
from rbctl.tasks.benchmarks import Benchmark, Problem
from rbctl.tasks.settings import setting

KIND = "fixpoint"


@dataclass(frozen=True)
class TaskSpec:
    """Settings of the fixed-point task (`data.builtin` with `task: fixpoint`)."""

    kind: ClassVar[str] = KIND
    num_keys: int = setting(10, "Letters in the function.", ge=2, le=16)
    num_roots: int = setting(3, "Fixed points of the function (letters that map to themselves).", ge=1, le=8)
    depth1_frac: float = setting(0.7, "Share of problems one hop from their fixed point (where the 2-token "
                                      "shortcut is right); the others have depth uniform in [2, max_hops].",
                                 ge=0.0, le=1.0)
    max_hops: int = setting(6, "Depth of the deepest problems.", ge=2, le=9)
    train_size: int = setting(4096, "Problems in the fixed training pool.", ge=1)
    test_size: int = setting(256, "Problems in the held-out test split (benchmark 'builtin').", ge=1)
    seed: int = setting(1234, "Task seed: the same problems for every arm and run seed.")

    def __post_init__(self):
        if self.max_hops + self.num_roots > self.num_keys:
            raise ValueError(f"max_hops + num_roots ({self.max_hops} + {self.num_roots}) must be <= num_keys "
                             f"({self.num_keys}): the deepest chain and the other fixed points need distinct letters")

    @property
    def min_hops(self) -> int:  # the shallowest problem (the links task's knob, for shared code)
        return 1


@dataclass(frozen=True)
class WarmStartSpec:
    """Settings of the supervised warm start. Changing any of them builds a new cached model."""

    demo_error: float = setting(0.3, "Warm start: per hop, probability that a demonstrated walk stops early "
                                     "(a wrong answer).", ge=0.0, lt=1.0)
    walk_demo_frac: float = setting(0.15, "Warm start: share of demonstrations that walk to the fixed point "
                                          "(the others take the shortcut).", ge=0.0, le=1.0)
    shortcut_demo_error: float = setting(0.0, "Warm start: probability that a shortcut demonstration's single "
                                              "look-up is wrong.", ge=0.0, lt=1.0)
    walk_phase: float = setting(0.5, "Warm start: share of the SFT steps that see clean walks only (they form the "
                                     "look-up circuit); the rest see the demonstrators' mixture.", ge=0.0, le=1.0)
    steps: int = setting(1000, "Warm start: supervised steps (cached): the first walk_phase half on clean walks, "
                               "the rest on the demonstrators' mixture.", key="warm_start_steps", ge=0)
    batch_size: int = 64
    lr: float = 3e-3
    hidden_size: int = 64
    layers: int = 2
    heads: int = 4
    seed: int = 0


def max_answer_tokens(spec: TaskSpec) -> int:
    """Longest correct walk: start, 2 per hop, the fixed point's upper-case letter, '#', letter, EOS."""
    return 2 * spec.max_hops + 5


def random_forest(rng: random.Random, spec: TaskSpec, depth: int) -> tuple[dict[str, str], str]:
    """(f, start) with f a forest over the keys, `num_roots` fixed points, start at `depth`."""
    ks = list(keys(spec))
    if depth + spec.num_roots > len(ks):
        raise ValueError(f"depth {depth} + {spec.num_roots} roots needs more than {len(ks)} letters")
    rng.shuffle(ks)
    chain = ks[: depth + 1]  # chain[0] = start → chain[1] → … → chain[depth] = its root
    roots = [chain[-1]] + ks[depth + 1: depth + spec.num_roots]
    f = {r: r for r in roots}
    for a, b in zip(chain, chain[1:]):
        f[a] = b
    placed = list(f)
    # The other letters hang anywhere (their own depth does not matter), but never above the start,
    # so the start keeps its depth.
    for x in ks[depth + spec.num_roots:]:
        f[x] = rng.choice(placed)
        placed.append(x)
    return f, chain[0]


def depth_of(f: dict[str, str], x: str) -> int:
    d = 0
    while f[x] != x:
        x, d = f[x], d + 1
    return d


def sample_depth(rng: random.Random, spec: TaskSpec) -> int:
    return 1 if rng.random() < spec.depth1_frac else rng.randint(2, spec.max_hops)


def _lookup(rng: random.Random, ks: str, f: dict[str, str], x: str, error: float) -> str:
    y = f[x]
    if error and rng.random() < error:
        y = rng.choice([k for k in ks if k != y])
    return y


def make_problem(rng: random.Random, spec: TaskSpec, depth: int, demo_error: float = 0.0,
                 walk: bool = True, shortcut_error: float = 0.0) -> tuple[str, str, str]:
    """(problem, completion, gold answer). The completion walks or takes the shortcut. With
    demo_error > 0 a walk stops early at each hop with that probability (it takes the current
    letter for the fixed point: a wrong answer, never recovered by chance), so a demonstrated walk
    is right with probability (1 − demo_error)^depth; the shortcut's single look-up is wrong
    (a random other letter) with probability shortcut_error."""
    ks = keys(spec)
    f, start = random_forest(rng, spec, depth)
    order = list(ks)
    rng.shuffle(order)
    problem = "".join(x + f[x].upper() for x in order) + f"|{start}"
    gold = start
    while f[gold] != gold:
        gold = f[gold]
    if not walk:
        return problem, "#" + _lookup(rng, ks, f, start, shortcut_error).upper(), gold.upper()
    cur, cot = start, start
    while True:
        nxt = f[cur]
        if nxt != cur and demo_error and rng.random() < demo_error:
            nxt = cur  # the demonstrator stops early: takes the current letter for the fixed point
        cot += nxt.upper()
        if nxt == cur:
            break
        cot += nxt
        cur = nxt
    return problem, f"{cot}#{cur.upper()}", gold.upper()


def problems(spec: TaskSpec, split: str):
    """The fixed train or test split (different random streams: disjoint in practice; duplicates
    across splits are removed from the test split)."""
    size = spec.train_size if split == "train" else spec.test_size
    rng = random.Random(f"{KIND}-{spec.seed}-{split}")
    seen = set()
    if split != "train":
        seen = {p.problem for p in problems(spec, "train")}
    out = []
    while len(out) < size:
        problem, _, answer = make_problem(rng, spec, sample_depth(rng, spec))
        if problem in seen:
            continue
        out.append(Problem(id=f"{KIND}-{split}-{len(out)}", problem=problem, answer=answer))
    return out


def depth_of_problem(problem: str) -> int:
    """The (hidden) depth of a problem's start letter, for analysis."""
    pairs, start = problem.rsplit("|", 1)
    f = {pairs[i]: pairs[i + 1].lower() for i in range(0, len(pairs), 2)}
    return depth_of(f, start)


def is_walk(completion: str) -> bool:
    return not completion.startswith("#")


def strategy(completion: str, problem=None) -> dict[str, str]:
    """The strategy a sample chose at its first token (the benchmark's per-sample label): a
    completion that opens with '#' is the shortcut, anything else walks."""
    return {"strategy": "walk" if is_walk(completion) else "shortcut"}


# --- the policy: its alphabet, size and demonstrations (built by rbctl.tasks.builtin / tiny) --------


def max_positions(spec: TaskSpec) -> int:
    return 2 * spec.num_keys + 4 * spec.max_hops + 48


def model_config(spec: TaskSpec, ws: WarmStartSpec, vocab_size: int):
    return llama_config(ws, vocab_size, max_positions(spec))  # the links task's Llama


def sft_warm_start(spec: TaskSpec, ws: WarmStartSpec):
    """Supervised training with a curriculum: clean walks at every depth first (many look-ups per
    sequence, so the look-up circuit forms reliably), then the demonstrators' mixture on the task's
    depths (mostly clean shortcuts, a few walks that stop early with probability demo_error per hop),
    which sets the strategy distribution and the walk's per-hop error."""
    from rbctl.tasks import tiny

    def demonstration(rng: random.Random, step: int) -> tuple[str, str]:
        if step < ws.walk_phase * ws.steps:
            problem, completion, _ = make_problem(rng, spec, rng.randint(1, spec.max_hops), 0.0, walk=True)
        else:
            walk = rng.random() < ws.walk_demo_frac
            problem, completion, _ = make_problem(rng, spec, sample_depth(rng, spec), ws.demo_error, walk=walk,
                                                  shortcut_error=ws.shortcut_demo_error)
        return problem, completion

    return tiny.sft_warm_start(ws, alphabet(spec), lambda vocab: model_config(spec, ws, vocab), demonstration,
                               format_problem)


def benchmark(spec: TaskSpec) -> Benchmark:
    """The task's test split as the benchmark `builtin`; each sample labelled with its strategy."""
    return Benchmark(name="builtin", split="test", description=f"built-in fixed-point task, test split "
                     f"({spec.test_size} problems, exact answers)", loader=lambda: problems(spec, "test"),
                     extract_answer=extract_answer, labels=strategy)
