"""The fixed-point task: problems, splits, checker, config selection, the policy's marker (no training)."""

import json
import random

from rbctl.config.train import load_train_config
from rbctl.tasks import builtin
from rbctl.tasks import fixpoint as fp
from rbctl.tasks import links
from rbctl.train.training_data import task_spec, warm_start_spec


def test_forest_depth_and_a_clean_walk_is_right():
    spec = fp.TaskSpec()
    rng = random.Random(0)
    for d in range(1, spec.max_hops + 1):
        for _ in range(50):
            problem, completion, answer = fp.make_problem(rng, spec, d)
            assert fp.depth_of_problem(problem) == d
            assert fp.check(completion, answer)  # a clean walk is right
            pairs = problem.split("|")[0]
            roots = [pairs[i] for i in range(0, len(pairs), 2) if pairs[i].upper() == pairs[i + 1]]
            assert len(roots) == spec.num_roots


def test_the_shortcut_is_right_iff_the_depth_is_one():
    spec = fp.TaskSpec()
    rng = random.Random(1)
    for d in (1, 2, 5):
        problem, completion, answer = fp.make_problem(rng, spec, d, walk=False)
        assert completion.startswith("#") and fp.check(completion, answer) == (d == 1)


def test_a_walk_that_stops_early_is_wrong():
    spec = fp.TaskSpec()
    rng = random.Random(2)
    wrong = 0
    for _ in range(200):
        problem, completion, answer = fp.make_problem(rng, spec, 4, demo_error=0.5)
        wrong += not fp.check(completion, answer)
    # right only if none of the 4 hops stops early: 0.5^4 = 6.25% right, ~93.75% wrong
    assert 170 <= wrong <= 200


def test_splits_are_disjoint_sized_deterministic_and_have_the_depth_mix():
    spec = fp.TaskSpec(train_size=300, test_size=64)
    tr, te = fp.problems(spec, "train"), fp.problems(spec, "test")
    assert len(tr) == 300 and len(te) == 64
    assert not {p.problem for p in tr} & {p.problem for p in te}
    assert tr == fp.problems(spec, "train")
    depth1 = sum(fp.depth_of_problem(p.problem) == 1 for p in tr) / len(tr)
    assert abs(depth1 - spec.depth1_frac) < 0.08  # 300 draws of p = 0.7: sd 0.026


def test_the_config_selects_the_task_and_its_warm_start():
    cfg = load_train_config(None, ["data.builtin.task=fixpoint", "data.builtin.depth1_frac=0.6",
                                   "data.builtin.walk_demo_frac=0.1", "data.builtin.warm_start_steps=7"])
    spec, ws = task_spec(cfg), warm_start_spec(cfg)
    assert isinstance(spec, fp.TaskSpec) and spec.depth1_frac == 0.6 and spec.kind == "fixpoint"
    assert isinstance(ws, fp.WarmStartSpec) and (ws.walk_demo_frac, ws.steps, ws.seed) == (0.1, 7, 0)
    default = task_spec(load_train_config(None, []))
    assert isinstance(default, links.TaskSpec)  # links stays the default task


def test_a_policy_folder_records_its_task(tmp_path):
    spec = fp.TaskSpec(num_keys=12)
    (tmp_path / "rbctl_builtin.json").write_text(json.dumps({"kind": "fixpoint", "task": {
        k: getattr(spec, k) for k in ("num_keys", "num_roots", "depth1_frac", "max_hops", "train_size", "test_size", "seed")}}))
    assert builtin.task_spec_of(tmp_path) == spec
    builtin.register_benchmark(spec)
    from rbctl.tasks.benchmarks import get_benchmark

    bench = get_benchmark("builtin")
    assert "fixed-point" in bench.description and bench.extract_answer("iBbB#B") == "B"


def test_the_strategy_label_and_its_shares_in_a_summary_and_an_eval_line():
    from types import SimpleNamespace

    from rbctl.eval.pipeline import label_shares, periodic_eval_line
    from rbctl.tasks.fixpoint import strategy

    assert strategy("#B") == {"strategy": "shortcut"}
    assert strategy("iBbB#B") == {"strategy": "walk"}
    # 2 problems × 2 samples: 3 shortcuts, 1 walk -> shares 3/4 and 1/4
    samples = [[SimpleNamespace(text="#B"), SimpleNamespace(text="iBbB#B")],
               [SimpleNamespace(text="#A"), SimpleNamespace(text="#C")]]
    shares = label_shares(strategy, [None, None], samples)
    assert shares == {"strategy": {"shortcut": 0.75, "walk": 0.25}}
    line = periodic_eval_line({"benchmark": "builtin", "n": 2, "metrics": {"avg@n": {"value": 0.5}},
                               "labels": shares}, step=40)
    assert line == {"step": 40, "benchmark": "builtin", "avg@n": 0.5, "n": 2,
                    "label/strategy/shortcut": 0.75, "label/strategy/walk": 0.25}
