"""The third built-in task: MaxRL's maze (Tajwar et al. 2026, arXiv 2602.02710), a published testbed.

Sources (read for the format, the validator, the data and the SFT; this module is written anew):
- tajwarfahim/maxrl @ 7db6bb90ab98b4ecbfc84d78dc178c838e10e5ad: `verl/utils/reward_score/maze.py`
  (`judge_maze`, `MazeEnv`: the RL reward), `maze/sft.py` (the SFT trainer and its `MazeValidator`),
  `maze/ckpt-1500/{config,generation_config,tokenizer}.json` (the SFT policy: a Qwen2, its vocabulary,
  its stop tokens), `maze/maze_17.sh` (the RL settings: configs/maze_17.yaml);
- sid-in-the-loop/maxrl @ 2e5099ff498be09bb4d2f792547deecc9f6931df, `maze/generate_maze.py` (a copy
  of the authors' repository whose README names this generator and the SFT command; the authors'
  tree above ships the data only as the Hub dataset guanning-ai/maze_17x17_1m).

Task. A `size` × `size` grid (odd; 17 in the paper) of walls and open squares: a perfect maze made by
randomized Prim's algorithm on the cells at odd (row, col), so between any two open squares there is
exactly one path. START is at (1, 1), GOAL at (size − 2, size − 2), as in the authors' generator. The
problem lists the grid row by row, `GRID_START WALL WALL … NEWLINE … GRID_END`; the prompt adds
`PATH_START` (`format_problem`; the tokenizer puts `<s>` first). The answer is a sequence of moves
`UP DOWN LEFT RIGHT` ended by `DONE`, a stop token of the policy (sampling ends there, as the authors'
generation config [eos, DONE] does). The gold answer is the shortest path (BFS; in a perfect maze the
only path that never steps back).

Checker (`outcome`), as `judge_maze`: no `DONE` in the completion (or sampling hit its token limit)
is `no_done`; a token before the first `DONE` that is not a move is `invalid_token`; otherwise the
moves are simulated from START: stepping off the grid is `out_of_bounds`, into a wall `wall` (the
first such move decides), and reaching GOAL at any move is `solved` — the moves after it, up to
`DONE`, are not looked at (the authors' environment stops there), so `DONE` need not follow at once;
moves that end elsewhere are `not_at_goal`. Tokens after `DONE` are ignored. In a generated maze the
border is all wall, so `out_of_bounds` needs a hand-built grid. Evaluation counts each kind
(`labels`: `outcome` in summary.json and `label/outcome/<kind>` in eval.jsonl).

Splits. Mazes come from per-split random streams of the task seed; the test split is drawn first,
without duplicates, and the training pool skips any maze in it (and its own duplicates), so the two
are disjoint by construction. Small grids have few mazes (size 5: 4, size 7: 192 spanning trees); a
split that cannot be filled is a config error.

Policy and warm start: the authors' Qwen2 (4 layers, width 256, 4 heads, 2 KV heads, MLP 1024, RoPE
θ 1e6, biased q/k/v, tied embeddings; 3.9M parameters), built as a Llama with biased attention
projections (`model_config`), over a word tokenizer of the task's 13 words. Their SFT leaves the
policy imperfect by stopping early, not by noise: clean BFS demonstrations, batch 32, lr 5e-4,
AdamW (0.9, 0.95), weight decay 0.01, the checkpoint after 1500 steps (48k mazes, about 5% of one
epoch of their 1M). Demonstrations here are fresh mazes of the SFT's own stream that are not in the
test split. docs/maze_task.md lists every difference.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar

from rbctl.errors import UserError
from rbctl.tasks.settings import setting
from rbctl.tasks.benchmarks import Benchmark, Problem

KIND = "maze"
MOVES = {"UP": (-1, 0), "DOWN": (1, 0), "LEFT": (0, -1), "RIGHT": (0, 1)}
# The task's words (the authors' vocabulary without its newline, <unk> and reserved tokens).
WORDS = ("GRID_START", "GRID_END", "PATH_START", "DONE", "PATH", "WALL", "GOAL", "START", "NEWLINE", *MOVES)
OUTCOMES = ("solved", "wall", "out_of_bounds", "not_at_goal", "no_done", "invalid_token")
MAX_DUPLICATES = 10_000  # draws in a row that bring no new maze before a split counts as exhausted


@dataclass(frozen=True)
class TaskSpec:
    """Settings of the maze task (`data.builtin` with `task: maze`)."""

    kind: ClassVar[str] = KIND
    size: int = setting(17, "Side of the square grid (odd: cells at odd coordinates, walls between; 17 in the paper).",
                        ge=5, le=33)
    train_size: int = setting(4096, "Mazes in the fixed training pool (distinct, none in the test split).", ge=1)
    test_size: int = setting(256, "Mazes in the held-out test split (benchmark 'builtin'; the authors hold out 256).",
                             ge=1)
    seed: int = setting(1234, "Task seed: the same mazes for every arm and run seed.")

    def __post_init__(self):
        if self.size % 2 == 0:
            raise ValueError(f"size must be odd (cells at odd coordinates, walls between), got {self.size}")


@dataclass(frozen=True)
class WarmStartSpec:
    """The policy and its supervised warm start (the authors' settings). Changing any builds a new cached model."""

    steps: int = setting(1500, "Warm start: SFT steps on shortest-path demonstrations (the authors' checkpoint "
                               "after 1500 steps).", key="warm_start_steps", ge=0)
    batch_size: int = setting(32, "Warm start: demonstrations per SFT step.", key="warm_start_batch_size", ge=1)
    lr: float = setting(5e-4, "Warm start: AdamW learning rate (constant).", key="warm_start_lr", gt=0.0)
    hidden_size: int = setting(256, "Policy: width of the model.", key="model_hidden_size", ge=8)
    layers: int = setting(4, "Policy: transformer layers.", key="model_layers", ge=1)
    heads: int = setting(4, "Policy: attention heads.", key="model_heads", ge=1)
    kv_heads: int = setting(2, "Policy: key/value heads (grouped-query attention; divides model_heads).",
                            key="model_kv_heads", ge=1)
    intermediate_size: int = setting(1024, "Policy: width of the MLP.", key="model_intermediate_size", ge=1)
    rope_theta: float = 1e6
    weight_decay: float = 0.01
    beta2: float = 0.95
    seed: int = 0

    def __post_init__(self):
        if self.hidden_size % self.heads or self.heads % self.kv_heads:
            raise ValueError(f"model_heads ({self.heads}) must divide model_hidden_size ({self.hidden_size}) "
                             f"and be a multiple of model_kv_heads ({self.kv_heads})")


# --- mazes ---------------------------------------------------------------------------------------

Grid = tuple[tuple[bool, ...], ...]  # [size][size], True = wall


def start_goal(size: int) -> tuple[tuple[int, int], tuple[int, int]]:
    return (1, 1), (size - 2, size - 2)


def prim_maze(rng: random.Random, size: int) -> Grid:
    """A perfect maze by randomized Prim's algorithm: cells at odd (row, col), the rest walls; from the
    cell (1, 1), a random frontier cell (two squares from the maze, not in it) joins the maze through a
    random neighbouring maze cell, opening the wall square between them, until no frontier is left."""
    wall = [[True] * size for _ in range(size)]

    def cells_around(r: int, c: int) -> list[tuple[int, int]]:
        return [(r + dr, c + dc) for dr, dc in ((-2, 0), (2, 0), (0, -2), (0, 2))
                if 0 < r + dr < size - 1 and 0 < c + dc < size - 1]

    wall[1][1] = False
    frontier = cells_around(1, 1)
    queued = set(frontier)
    while frontier:
        r, c = frontier.pop(rng.randrange(len(frontier)))
        nr, nc = rng.choice([(a, b) for a, b in cells_around(r, c) if not wall[a][b]])
        wall[r][c] = wall[(r + nr) // 2][(c + nc) // 2] = False
        for cell in cells_around(r, c):
            if wall[cell[0]][cell[1]] and cell not in queued:
                frontier.append(cell)
                queued.add(cell)
    return tuple(map(tuple, wall))


def shortest_path(grid: Grid, start: tuple[int, int], goal: tuple[int, int]) -> list[str] | None:
    """The moves of a shortest path from start to goal (BFS, neighbours in the order of MOVES), or None."""
    size = len(grid)
    came: dict[tuple[int, int], tuple[tuple[int, int], str] | None] = {start: None}
    queue = deque([start])
    while queue:
        cur = queue.popleft()
        if cur == goal:
            moves = []
            while came[cur] is not None:
                cur, move = came[cur]
                moves.append(move)
            return moves[::-1]
        for move, (dr, dc) in MOVES.items():
            nxt = (cur[0] + dr, cur[1] + dc)
            if 0 <= nxt[0] < size and 0 <= nxt[1] < size and not grid[nxt[0]][nxt[1]] and nxt not in came:
                came[nxt] = (cur, move)
                queue.append(nxt)
    return None


def render(grid: Grid, start: tuple[int, int], goal: tuple[int, int]) -> str:
    """The problem text: `GRID_START`, each row's cells and `NEWLINE`, `GRID_END`."""
    def cell(r: int, c: int) -> str:
        return "START" if (r, c) == start else "GOAL" if (r, c) == goal else "WALL" if grid[r][c] else "PATH"

    rows = [" ".join(cell(r, c) for c in range(len(grid[r]))) + " NEWLINE" for r in range(len(grid))]
    return "GRID_START " + " ".join(rows) + " GRID_END"


@dataclass(frozen=True)
class Maze:
    grid: Grid
    start: tuple[int, int]
    goal: tuple[int, int]


@lru_cache(maxsize=8192)
def parse(problem: str) -> Maze:
    """The maze a problem text lists (the inverse of `render`); ValueError if it is not one."""
    tokens = problem.split()
    if not tokens or tokens[0] != "GRID_START" or tokens[-1] != "GRID_END":
        raise ValueError("a maze problem starts with GRID_START and ends with GRID_END")
    rows, row, start, goal = [], [], None, None
    for t in tokens[1:-1]:
        if t == "NEWLINE":
            rows.append(tuple(row))
            row = []
        elif t in ("WALL", "PATH", "START", "GOAL"):
            start = (len(rows), len(row)) if t == "START" else start
            goal = (len(rows), len(row)) if t == "GOAL" else goal
            row.append(t == "WALL")
        else:
            raise ValueError(f"unexpected token {t!r} in a maze problem")
    if row or not rows or any(len(r) != len(rows) for r in rows) or start is None or goal is None:
        raise ValueError("a maze problem lists a square grid, each row ended by NEWLINE, with a START and a GOAL")
    return Maze(tuple(rows), start, goal)


def draw(rng: random.Random, spec: TaskSpec, exclude: tuple[set[str], ...], what: str) -> tuple[Grid, str]:
    """A maze of `rng` whose text is in none of the `exclude` sets; UserError when MAX_DUPLICATES draws
    in a row bring none (small grids have few mazes)."""
    start, goal = start_goal(spec.size)
    for _ in range(MAX_DUPLICATES):
        grid = prim_maze(rng, spec.size)
        text = render(grid, start, goal)
        if not any(text in e for e in exclude):
            return grid, text
    raise UserError(f"data.builtin: no new size-{spec.size} maze for {what} in {MAX_DUPLICATES} draws "
                    f"({sum(map(len, exclude))} taken); lower train_size/test_size or raise size")


def problems(spec: TaskSpec, split: str) -> list[Problem]:
    """The fixed test split or training pool: distinct mazes, the pool disjoint from the test split."""
    held_out: set[str] = set() if split == "test" else {p.problem for p in problems(spec, "test")}
    rng = random.Random(f"{KIND}-{spec.seed}-{split}")
    start, goal = start_goal(spec.size)
    out: list[Problem] = []
    seen: set[str] = set()
    while len(out) < (spec.test_size if split == "test" else spec.train_size):
        grid, text = draw(rng, spec, (seen, held_out), f"the {split} split (maze {len(out) + 1})")
        seen.add(text)
        out.append(Problem(id=f"{KIND}-{split}-{len(out)}", problem=text,
                           answer=" ".join(shortest_path(grid, start, goal))))
    return out


# --- grading -------------------------------------------------------------------------------------


def outcome(completion: str, problem: str) -> str:
    """What the moves of `completion` do in the maze of `problem`: one of OUTCOMES (module docstring)."""
    tokens = completion.split()
    if "DONE" not in tokens:
        return "no_done"
    moves = tokens[: tokens.index("DONE")]
    if any(t not in MOVES for t in moves):
        return "invalid_token"
    maze = parse(problem)
    (r, c), size = maze.start, len(maze.grid)
    for move in moves:
        r, c = r + MOVES[move][0], c + MOVES[move][1]
        if not (0 <= r < size and 0 <= c < size):
            return "out_of_bounds"
        if maze.grid[r][c]:
            return "wall"
        if (r, c) == maze.goal:
            return "solved"
    return "not_at_goal"


def extract_answer(completion: str) -> str | None:
    """The tokens before the first DONE, joined by spaces (the moves the checker simulates), or None
    without a DONE. Equal answers get equal verdicts, so maj@k votes on them."""
    tokens = completion.split()
    return " ".join(tokens[: tokens.index("DONE")]) if "DONE" in tokens else None


def check(completion: str, problem: Problem) -> bool:
    """The maze's exact checker: the moves reach the goal (`outcome` is `solved`)."""
    return outcome(completion, problem.problem) == "solved"


def outcome_label(completion: str, problem: Problem) -> dict[str, str]:
    """The benchmark's per-sample label: {"outcome": one of OUTCOMES}."""
    return {"outcome": outcome(completion, problem.problem)}


def benchmark(spec: TaskSpec) -> Benchmark:
    """The test split as the benchmark `builtin`, graded by `check`, each sample labelled with its outcome."""
    return Benchmark(name="builtin", split="test", description=f"built-in maze task (MaxRL), {spec.size}x{spec.size}, "
                     f"test split ({spec.test_size} mazes, moves simulated)", loader=lambda: problems(spec, "test"),
                     extract_answer=extract_answer, check=check, labels=outcome_label)


# --- the policy: its alphabet, size and demonstrations (built by rbctl.tasks.builtin / tiny) --------


def alphabet(spec: TaskSpec) -> tuple[str, ...]:
    return WORDS


def format_problem(problem: str) -> str:
    """The prompt text of the maze: the grid and `PATH_START`."""
    return problem + " PATH_START"


def prompt_tokens(spec: TaskSpec) -> int:
    """Tokens of every prompt: `<s>`, `GRID_START`, size × (size cells + `NEWLINE`), `GRID_END`, `PATH_START`."""
    return spec.size * (spec.size + 1) + 4


def max_answer_tokens(spec: TaskSpec) -> int:
    """Longest shortest path and its `DONE`: a perfect maze of k² cells (k = (size − 1)/2) has 2k² − 1
    open squares, so a path makes at most 2k² − 2 moves (126 at size 17)."""
    k = (spec.size - 1) // 2
    return 2 * k * k - 1


def max_positions(spec: TaskSpec) -> int:
    return prompt_tokens(spec) + 2 * max_answer_tokens(spec)  # room for walks twice the longest shortest path


def model_config(spec: TaskSpec, ws: WarmStartSpec, vocab_size: int):
    """The authors' Qwen2 (maze/ckpt-1500/config.json) at `ws`'s size, as a Llama with biased attention
    projections (Qwen2 biases q, k, v; Llama's attention_bias also o: 256 more parameters per layer;
    why a Llama: `rbctl.tasks.tiny.model_config`); sampling stops at EOS or DONE."""
    from rbctl.tasks import tiny

    done = len(tiny.SPECIALS) + WORDS.index("DONE")
    return tiny.model_config(vocab_size=vocab_size, hidden_size=ws.hidden_size, layers=ws.layers, heads=ws.heads,
                             kv_heads=ws.kv_heads, intermediate_size=ws.intermediate_size,
                             max_positions=max_positions(spec), eos_token_id=[2, done], attention_bias=True,
                             rope_theta=ws.rope_theta, rms_norm_eps=1e-6)


def sft_warm_start(spec: TaskSpec, ws: WarmStartSpec):
    """The authors' SFT: clean shortest-path demonstrations (moves, DONE, EOS), loss on the answer only,
    AdamW (0.9, beta2), constant lr (their cosine spans 10 epochs of 1M mazes: at step 1500 it is still
    within 0.01% of the peak), on the GPU when there is one. Demonstrations are fresh mazes of the SFT's
    stream (seeded by `ws.seed`) that are not in the test split."""
    import torch

    from rbctl.tasks import tiny

    held_out = {p.problem for p in problems(spec, "test")}
    start, goal = start_goal(spec.size)

    def demonstration(rng: random.Random, step: int) -> tuple[str, str]:
        grid, text = draw(rng, spec, (held_out,), "a demonstration")
        return text, " ".join(shortest_path(grid, start, goal) + ["DONE"])

    return tiny.sft_warm_start(ws, alphabet(spec), lambda vocab: model_config(spec, ws, vocab), demonstration,
                               format_problem, weight_decay=ws.weight_decay, betas=(0.9, ws.beta2), schedule="constant",
                               device="cuda" if torch.cuda.is_available() else "cpu")
