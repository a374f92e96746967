"""The maze task (rbctl/tasks/maze.py): the checker on a hand-built maze, the generator (perfect
mazes, seeded, disjoint splits), the tokenizer, the grader the evaluation and the reward share, the
planner's parameter count, and a tiny warm start."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from rbctl.errors import UserError
from rbctl.tasks import maze
from rbctl.tasks.benchmarks import Problem

CONFIGS = Path(__file__).resolve().parents[2] / "configs"

# A hand-built 5×5 maze; START sits on the left border, so a LEFT leaves the grid:
#   # # # # #
#   S . . # #
#   # # . # #
#   # # . . G
#   # # # # #
# Its only path: (1,0) → (1,1) → (1,2) → (2,2) → (3,2) → (3,3) → (3,4).
HAND = ("GRID_START WALL WALL WALL WALL WALL NEWLINE START PATH PATH WALL WALL NEWLINE WALL WALL PATH WALL WALL "
        "NEWLINE WALL WALL PATH PATH GOAL NEWLINE WALL WALL WALL WALL WALL NEWLINE GRID_END")
SHORTEST = "RIGHT RIGHT DOWN DOWN RIGHT RIGHT"


def test_bfs_finds_the_hand_maze_path():
    m = maze.parse(HAND)
    assert (m.start, m.goal) == ((1, 0), (3, 4))
    assert " ".join(maze.shortest_path(m.grid, m.start, m.goal)) == SHORTEST


@pytest.mark.parametrize("completion, kind", [
    (SHORTEST + " DONE", "solved"),
    ("RIGHT LEFT " + SHORTEST + " DONE", "solved"),         # a detour: many right answers
    (SHORTEST + " LEFT LEFT DONE", "solved"),               # the goal counts when reached (the authors' env stops there)
    (SHORTEST + " RIGHT DONE", "solved"),                   # ... even if the next move would leave the grid
    (SHORTEST + " DONE WALL UP", "solved"),                 # tokens after DONE are not read
    ("RIGHT RIGHT RIGHT DONE", "wall"),                     # (1,3) is a wall
    ("DOWN " + SHORTEST + " DONE", "wall"),                 # the first bad move decides
    ("LEFT DONE", "out_of_bounds"),                         # off the left border
    ("RIGHT RIGHT DOWN DONE", "not_at_goal"),               # stops short at (2,2)
    ("DONE", "not_at_goal"),                                # no move: still at START
    (SHORTEST, "no_done"),                                  # right moves, no DONE (EOS or the token limit)
    ("RIGHT SIDEWAYS", "no_done"),                          # no DONE is checked first, as judge_maze does
    ("RIGHT RIGHT DOWN SIDEWAYS DOWN RIGHT RIGHT DONE", "invalid_token"),
    ("RIGHT GRID_START DONE", "invalid_token"),             # a task word that is not a move
])
def test_checker_names_each_outcome(completion, kind):
    assert maze.outcome(completion, HAND) == kind
    problem = Problem("hand", HAND, SHORTEST)
    assert maze.check(completion, problem) is (kind == "solved")
    assert maze.outcome_label(completion, problem) == {"outcome": kind}


def test_benchmark_and_reward_grade_with_the_checker(tiny_config):
    from rbctl.train.training_data import reward_function

    spec = maze.TaskSpec(size=7, train_size=8, test_size=4)
    bench = maze.benchmark(spec)
    problem = Problem("hand", HAND, SHORTEST)
    # a detour is right although it is not the gold string; the answer recorded is the moves before DONE
    assert bench.task_grade("RIGHT LEFT " + SHORTEST + " DONE", problem) == (True, "RIGHT LEFT " + SHORTEST)
    assert bench.task_grade("LEFT DONE", problem) == (False, "LEFT")
    assert bench.task_grade(SHORTEST, problem) == (False, None)
    assert bench.grader == "rbctl.tasks.maze.check"
    cfg = tiny_config(data__builtin="{task: maze, size: 7, train_size: 8, test_size: 4}")
    flags, failures, unevaluated = reward_function(cfg)([SHORTEST + " DONE", "RIGHT RIGHT DOWN DONE"], [problem, problem])
    assert (flags, failures, unevaluated) == ([True, False], 0, 0)


def _open_squares_and_edges(grid):
    opens = {(r, c) for r, row in enumerate(grid) for c, w in enumerate(row) if not w}
    edges = sum((r + 1, c) in opens for r, c in opens) + sum((r, c + 1) in opens for r, c in opens)
    return opens, edges


@pytest.mark.parametrize("size", [5, 7, 9, 17])
def test_generator_makes_perfect_mazes(size):
    k = (size - 1) // 2
    start, goal = maze.start_goal(size)
    for seed in range(20):
        grid = maze.prim_maze(random.Random(seed), size)
        opens, edges = _open_squares_and_edges(grid)
        # k² cells and the k² − 1 wall squares opened between them; a tree on them: edges = nodes − 1
        assert len(opens) == 2 * k * k - 1 and edges == len(opens) - 1
        reached, todo = {start}, [start]  # connected: every open square is reachable from START
        while todo:
            r, c = todo.pop()
            for nxt in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
                if nxt in opens and nxt not in reached:
                    reached.add(nxt)
                    todo.append(nxt)
        assert reached == opens and goal in opens
        assert all(grid[0]) and all(grid[-1]) and all(row[0] and row[-1] for row in grid)  # walled border
        assert maze.parse(maze.render(grid, start, goal)).grid == grid  # parse inverts render


def test_longest_answer_bounds_every_shortest_path():
    spec = maze.TaskSpec()  # 17×17: 64 cells, 127 open squares, so at most 126 moves, then DONE
    assert maze.max_answer_tokens(spec) == 127
    assert max(len(p.answer.split()) for p in maze.problems(spec, "test")) + 1 <= 127


def test_problems_are_seeded_distinct_and_disjoint():
    spec = maze.TaskSpec(size=7, train_size=120, test_size=40)  # 192 distinct 7×7 mazes exist
    train, test = maze.problems(spec, "train"), maze.problems(spec, "test")
    assert maze.problems(spec, "train") == train and maze.problems(spec, "test") == test
    train_texts, test_texts = {p.problem for p in train}, {p.problem for p in test}
    assert len(train_texts) == 120 and len(test_texts) == 40 and not train_texts & test_texts
    # the test split does not depend on the pool's size, and another seed draws other mazes
    assert maze.problems(maze.TaskSpec(size=7, train_size=1, test_size=40), "test") == test
    assert {p.problem for p in maze.problems(maze.TaskSpec(size=7, train_size=1, test_size=40, seed=1), "test")} != test_texts
    for p in test[:5]:  # the gold is BFS's path, and it solves the maze
        m = maze.parse(p.problem)
        assert p.answer == " ".join(maze.shortest_path(m.grid, m.start, m.goal))
        assert maze.outcome(p.answer + " DONE", p.problem) == "solved"


def test_a_split_larger_than_the_mazes_that_exist_is_a_config_error():
    with pytest.raises(UserError, match="lower train_size/test_size or raise size"):
        maze.problems(maze.TaskSpec(size=5, train_size=8, test_size=2), "train")  # 4 mazes of size 5 exist


def test_config_section_holds_the_task_defaults_and_checks():
    from rbctl.config.train import load_train_config
    from rbctl.train.training_data import task_spec, warm_start_spec

    cfg = load_train_config(None, ["data.builtin.task=maze"])
    assert task_spec(cfg) == maze.TaskSpec() and warm_start_spec(cfg) == maze.WarmStartSpec()
    with pytest.raises(UserError, match="size must be odd"):
        load_train_config(None, ["data.builtin.task=maze", "data.builtin.size=16"])
    with pytest.raises(UserError, match="model_heads"):
        load_train_config(None, ["data.builtin.task=maze", "data.builtin.model_kv_heads=3"])


def test_tokenizer_round_trips_a_prompt():
    from rbctl.tasks.builtin import build_tokenizer

    spec = maze.TaskSpec(size=7, train_size=1, test_size=3)
    tok = build_tokenizer(spec)
    prompt = maze.format_problem(maze.problems(spec, "test")[0].problem)
    ids = tok(prompt)["input_ids"]
    assert len(ids) == maze.prompt_tokens(spec) == 7 * 8 + 4 and ids[0] == tok.bos_token_id
    assert 0 not in ids  # every word known (an unknown word reads as pad, id 0)
    assert tok.decode(ids, skip_special_tokens=True) == prompt
    assert len(tok) == 3 + len(maze.WORDS)
    # the `builtin` template of a maze policy is the maze's prompt (links would append '?')
    from rbctl.tasks.prompting import encode_prompts

    assert encode_prompts(tok, [maze.problems(spec, "test")[0].problem], "builtin", builtin_task="maze") == [ids]
    assert tok.convert_ids_to_tokens(ids[-1]) == "PATH_START"


def test_planner_counts_the_paper_model_on_the_meta_device(tmp_path):
    from rbctl.config.train import load_train_config
    from rbctl.tasks import builtin
    from rbctl.train.training_data import task_spec, warm_start_spec
    from rbctl.train.dry_run import dry_run

    cfg = load_train_config(CONFIGS / "maze_17.yaml")
    spec, ws = task_spec(cfg), warm_start_spec(cfg)
    model = builtin.build_model(spec, ws, len(builtin.build_tokenizer(spec)))
    n = sum(p.numel() for p in model.parameters())
    # 16 tokens × 256 (tied) + 4 layers × (q 256·256 + 256, k and v 256·128 + 128 each, o 256·256 + 256,
    # MLP 3·256·1024, 2 norms of 256) + the final norm 256
    assert n == 16 * 256 + 4 * (65792 + 2 * 32896 + 65792 + 786432 + 512) + 256 == 3_941_632
    plan = dry_run(cfg, cache_dir=tmp_path)
    assert f"N ≈ {n:.2e} parameters (the maze task's model config, counted on the meta device)" in plan
    # every maze prompt has 17·18 + 4 = 310 tokens: T = P·G·(310 + 180) = 256·128·490
    assert "310 tokens per prompt" in plan and f"= {256 * 128 * 490:.2e}" in plan


def test_paper_sweep_arms():
    from rbctl.sweep.ablate import load_sweep

    sweep, configs = load_sweep(CONFIGS / "ablate_maze_17.yaml")
    arms = {a: (c.algo.estimator, c.algo.budget, c.algo.entropy.mode, c.algo.passk and c.algo.passk.k)
            for a, c in configs.items()}
    assert arms == {"grpo": ("grpo", None, "none", None), "grpo_entropy": ("grpo", None, "static", None),
                    "maxrl": ("maxrl", None, "none", None), "grpo_budget": ("grpo", 1.0, "none", None),
                    "passk": ("passk", None, "none", 4)}
    c = configs["maxrl"]
    assert (c.rollout.prompts_per_step, c.rollout.group_size, c.optim.lr, c.rollout.temperature, c.algo.kl_coef,
            c.algo.loss_agg) == (256, 128, 1e-4, 1.0, 0.0, "token-mean")
    assert (sweep.eval.n, sweep.eval.temperature) == (2048, 1.0)
    for f in ("maze_17.yaml", "ablate_maze_17.yaml"):
        head = (CONFIGS / f).read_text().splitlines()
        assert head[0].startswith(("# rbctl train configs/", "# rbctl ablate configs/")) and "GPU work" in head[1]


def test_the_paper_maze_starts_from_the_float32_warm_start_on_a_gpu(monkeypatch):
    """On a GPU with bf16 (`dtype: auto` would be bf16 there) maze_17 and every arm of its sweep load
    the warm start in float32: a GPU run and a CPU run start from the same weights."""
    import torch

    from rbctl.config.train import load_train_config
    from rbctl.rollout.models import resolve_dtype
    from rbctl.sweep.ablate import load_sweep

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)  # an H100's answer
    assert resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16  # what `auto` would do there
    _, arms = load_sweep(CONFIGS / "ablate_maze_17.yaml")
    for cfg in [load_train_config(CONFIGS / "maze_17.yaml"), *arms.values()]:
        for device in ("cuda", "cpu"):
            assert resolve_dtype(cfg.model.dtype, torch.device(device)) == torch.float32


def test_cpu_scale_sweep_arms_and_design():
    """studies/reward_budgeting/configs/ablate_maze.yaml (docs/maze_task.md §6–7): the paper's arms on configs/maze.yaml, equal
    compute, several mini-batches per rollout batch, and a periodic evaluation that gives the plateau
    test its ¾T point and the warm start's pass@G."""
    from rbctl.report.power import mde_paired, units_for_power
    from rbctl.sweep.ablate import load_sweep

    study_configs = CONFIGS.parent / "studies" / "reward_budgeting" / "configs"
    sweep, configs = load_sweep(study_configs / "ablate_maze.yaml")
    arms = {a: (c.algo.estimator, c.algo.budget, c.algo.entropy.mode, c.algo.entropy.alpha, c.algo.passk and c.algo.passk.k)
            for a, c in configs.items()}
    assert arms == {"grpo": ("grpo", None, "none", 0.0, None), "grpo_entropy": ("grpo", None, "static", 0.05, None),
                    "maxrl": ("maxrl", None, "none", 0.0, None), "grpo_budget": ("grpo", 1.0, "none", 0.0, None),
                    "passk": ("passk", None, "none", 0.0, 4)}
    c = configs["grpo"]
    assert (c.data.builtin.task, c.data.builtin.size, c.data.builtin.test_size) == ("maze", 9, 256)
    assert (c.steps, c.rollout.prompts_per_step, c.rollout.group_size, c.threads) == (250, 16, 8, 1)
    assert c.rollout.prompts_per_step // c.algo.ppo_mini_batch_size == 4  # 4 optimizer steps per rollout batch
    # evaluations every 50 steps from 0: the one nearest ¾T = 187.5 is step 200; n ≥ G gives step 0's pass@G
    assert c.steps % c.eval.every == 0 and (200 - 0.75 * c.steps) < 0.75 * c.steps - 150
    assert c.eval.n >= c.rollout.group_size and c.eval.limit is None
    s = sweep.comparisons
    assert s.principal == [("maxrl", "grpo"), ("grpo_budget", "grpo"), ("grpo_entropy", "grpo")]
    # the header's power statement: 9 units needed; 4 seeds give an MDE of 10.9 points
    assert units_for_power(s.planning_sd, s.mde, m=3, power=s.power) == 9 and len(sweep.seeds) == 4
    assert round(mde_paired(s.planning_sd, 4, s.alpha / 3, s.power), 1) == 10.9
    text = (study_configs / "ablate_maze.yaml").read_text()
    assert "the power calculation asks for 9" in text and "MDE\n#     of 10.9 points" in text


def test_tiny_warm_start_trains_and_emits_task_words(rbctl_cache):
    from transformers import AutoTokenizer

    from rbctl.rollout.base import SamplingParams
    from rbctl.rollout.hf import HFEngine
    from rbctl.rollout.models import load_policy
    from rbctl.tasks import builtin

    spec = maze.TaskSpec(size=7, train_size=8, test_size=8)
    ws = maze.WarmStartSpec(steps=100, batch_size=16, lr=3e-3, hidden_size=32, layers=1, heads=2, kv_heads=1,
                            intermediate_size=64)
    policy = load_policy(str(builtin.warm_started(spec, ws, log=lambda *a: None)), log=lambda *a: None)
    assert policy.builtin == "maze" and builtin.task_spec_of(Path(policy.source)) == spec
    # DONE stops sampling; the saved tokenizer reloads with AutoTokenizer and encodes the same ids
    done = policy.tokenizer.convert_tokens_to_ids("DONE")
    assert policy.model.generation_config.eos_token_id == [policy.tokenizer.eos_token_id, done]
    probs = maze.problems(spec, "test")
    prompts = [policy.tokenizer(maze.format_problem(p.problem))["input_ids"] for p in probs]
    assert AutoTokenizer.from_pretrained(policy.source)(maze.format_problem(probs[0].problem))["input_ids"] == prompts[0]
    out = HFEngine(policy.model, policy.tokenizer, 64).generate(prompts, SamplingParams(n=4, temperature=1.0,
                                                                                         max_new_tokens=30, seed=0))
    kinds = [maze.outcome(s.text, p.problem) for p, per in zip(probs, out) for s in per]
    # after 100 steps the policy mostly writes moves and ends them with DONE (it still walks into
    # walls); an untrained one writes any of the 16 tokens (9 of them no move) and rarely a DONE
    well_formed = sum(k in ("solved", "wall", "not_at_goal") for k in kinds)
    assert well_formed >= 0.8 * len(kinds), kinds
    assert all(t not in (policy.tokenizer.pad_token_id, policy.tokenizer.bos_token_id)
               for per in out for s in per for t in s.token_ids)
