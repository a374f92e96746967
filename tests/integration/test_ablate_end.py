"""`rbctl ablate` on tiny real runs: it ends with the time beside --dry-run's estimate and the declared
calls; `--force` on a changed sweep is refused up front with the advice that applies to a sweep
(another directory; `rbctl ablate` has no --extend), and a sweep whose arms did not change is taken."""

from __future__ import annotations

import re

import pytest
import yaml

from rbctl.errors import UserError
from rbctl.store.read import read_sweep_state
from rbctl.sweep.ablate import run_sweep
from tests.conftest import TINY_TRAIN


def _sweep(tmp_path, steps: int = 2, limit: int = 4, arms=None, comparisons=None):
    (tmp_path / "base.yaml").write_text(yaml.safe_dump({**TINY_TRAIN, "steps": steps}))
    sweep = {"name": "t", "base": "base.yaml", "seeds": [0], "arms": arms or {"grpo": {}},
             "eval": {"benchmarks": ["builtin"], "n": 2, "limit": limit}, "jobs": 2}
    if comparisons:
        sweep["comparisons"] = comparisons
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep, sort_keys=False))
    return path


@pytest.mark.slow
def test_force_on_a_sweep_whose_runs_changed_is_refused_up_front(tmp_path, rbctl_cache):
    from rbctl.report import power
    from rbctl.sweep.plan import sweep_plan

    out = tmp_path / "sweep"
    path = _sweep(tmp_path, steps=2)
    assert run_sweep(path, out, progress=False, log=lambda *a: None)["runs"]["grpo/seed_0"]["status"] == "done"
    metrics = (out / "runs" / "grpo" / "seed_0" / "metrics.jsonl").read_bytes()

    _sweep(tmp_path, steps=3)  # each arm one step longer: another sweep
    with pytest.raises(UserError, match="holds a different sweep: arms.grpo.steps 2 ≠ 3; use another -o or --force"):
        run_sweep(path, out, progress=False, log=lambda *a: None)
    for attempt in (lambda: run_sweep(path, out, force=True, progress=False, log=lambda *a: None),
                    lambda: sweep_plan(path, out, power, force=True)):  # --dry-run --force refuses alike
        with pytest.raises(UserError) as e:
            attempt()
        msg = str(e.value)
        assert msg.startswith(f"--force: sweep directory {out} holds 1 run made with another config or evaluation than this sweep "
                              "gives them (grpo/seed_0: steps 2 ≠ 3)"), msg
        assert msg.endswith("A changed sweep is another sweep: run it in another directory (-o NEW_DIR)")
        assert "--extend" not in msg  # before: every run failed with "pass --extend", which ablate does not have
    assert read_sweep_state(out)["grpo/seed_0"]["status"] == "done"  # nothing was touched
    assert (out / "runs" / "grpo" / "seed_0" / "metrics.jsonl").read_bytes() == metrics

    # the final evaluation changed: the finished run's would be kept as this sweep's; refused alike
    _sweep(tmp_path, steps=2, limit=8)
    with pytest.raises(UserError, match="holds a different sweep: eval.limit 4 ≠ 8"):
        run_sweep(path, out, progress=False, log=lambda *a: None)
    with pytest.raises(UserError, match=r"\(grpo/seed_0: its final evaluation: eval.limit 4 ≠ 8\).*another directory"):
        run_sweep(path, out, force=True, progress=False, log=lambda *a: None)

    # a sweep whose runs are unchanged, the one in the directory no longer valid (a key since removed):
    # --force takes the directory, and nothing reruns
    _sweep(tmp_path, steps=2)
    resolved = out / "sweep.yaml"
    saved = yaml.safe_load(resolved.read_text())
    saved["sweep"]["eval"]["no_such_key"] = 1
    resolved.write_text(yaml.safe_dump(saved))
    with pytest.raises(UserError, match="its recorded sweep \\(sweep.yaml\\) no longer validates"):
        run_sweep(path, out, progress=False, log=lambda *a: None)
    state = run_sweep(path, out, force=True, progress=False, log=lambda *a: None)
    assert state["runs"]["grpo/seed_0"]["status"] == "done"
    assert (out / "runs" / "grpo" / "seed_0" / "metrics.jsonl").read_bytes() == metrics


@pytest.mark.slow
def test_ablate_ends_with_its_time_beside_the_estimate_and_the_calls(tmp_path, rbctl_cache, capsys, monkeypatch):
    from rbctl.cli import run

    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.chdir(tmp_path)  # the estimate looks for finished runs under ./runs: none here
    path = _sweep(tmp_path, arms={"grpo": {}, "grpo_budget": {"algo.budget": 1.0}},
                  comparisons={"principal": [["grpo_budget", "grpo"]], "mde": 5.0, "planning_sd": 7.0})
    out = tmp_path / "sweep"
    assert run(["ablate", str(path), "-o", str(out), "--quiet"]) == 0
    lines = capsys.readouterr().out.rstrip().splitlines()
    # measured, and what --dry-run said before it ran (no finished run of this shape: the stated assumption)
    timing = next(x for x in lines if x.startswith("time: "))
    assert re.fullmatch(r"time: \d+\.\d min measured, ≈ \d+\.\d min estimated by --dry-run for 2 runs \(per-run time "
                        r"an assumption, not measured here: .*\)", timing), timing
    assert any(x == f"report: {out / 'report' / 'report.md'}" for x in lines)
    calls = lines[next(i for i, x in enumerate(lines) if x.startswith("calls: declared comparisons")):]
    assert calls[4].split()[:3] == ["grpo_budget", "−", "grpo"] and "not testable" in " ".join(calls)  # 1 seed
    assert lines[-1].strip().startswith("p: Holm-adjusted")  # the calls end the output
    assert max(len(x) for x in calls) <= 80
    assert (out / "report" / "summary.md").is_file() and (out / "report" / "summary.tex").is_file()
