"""The report's sections as a registry (rbctl.report.sections; docs/method.md, "Report sections"): a
section registered from a module of one's own is found in the report, in its place; one whose needs are
not met is left out with its reason; the optional sections (the plateau test, "is entropy the cause?")
are on where a sweep file or runs manifest asks, by default for a sweep file and not for a runs
manifest, and the plateau test uses the thresholds the file declares. Hand-made sweeps, no training."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from rbctl.config.base import validate
from rbctl.config.sweep import OPTIONAL_SECTIONS, SECTIONS_ENV, ReportBlock
from rbctl.errors import UserError
from rbctl.report import make_report, report_data
from rbctl.report.render.page import TablePage
from rbctl.report.sections import SECTIONS, ReportSection, plan, register
from tests.integration.report_sweeps import make_sweep
from tests.integration.test_your_runs import table_manifest, wandb_export

ROOT = Path(__file__).resolve().parents[2]
ARMS = ("grpo", "grpo_budget")


@pytest.fixture
def registry():
    """The registry as it is; sections a test registers are removed after it."""
    before = dict(SECTIONS)
    yield SECTIONS
    SECTIONS.clear()
    SECTIONS.update(before)


def sweep_with(root: Path, report: dict | None = None, ceiling: float | None = None) -> Path:
    """A hand-made sweep of grpo and grpo + budget (3 seeds), its resolved sweep file given ``report``."""
    sweep = make_sweep(root, arms=ARMS, seeds=range(3))
    if report is not None:
        resolved = yaml.safe_load((sweep / "sweep.yaml").read_text())
        resolved["sweep"]["report"] = report
        (sweep / "sweep.yaml").write_text(yaml.safe_dump(resolved, sort_keys=False))
    if ceiling is not None:
        (sweep / "ceiling.json").write_text(json.dumps({"value": ceiling, "source": "stated in the test"}))
    return sweep


def left_out(data) -> dict[str, str]:
    return {s.name: why for s, why in plan(data) if why is not None}


PLUGIN = '''
import pandas as pd

from rbctl.report.sections import logged, section


@section("final_reward", "Final training reward", needs=(logged("reward/mean"),))
def final_reward(data, page):
    rows = [{"arm": arm, "runs": len(runs), "reward": sum(r.metrics[-1]["reward/mean"] for r in runs) / len(runs)}
            for arm, runs in data.sweep.by_arm.items()]
    numbers = pd.DataFrame(rows)
    page.doc.heading(2, "Final training reward")
    page.doc.para("Each arm's mean over its runs of the reward logged at the last step.")
    page.table(numbers, numbers.assign(reward=[f"{v:.4f}" for v in numbers["reward"]]), "final_reward")


@section("advantage_gap", "Advantage gap", needs=(logged("adv/gap"),))
def advantage_gap(data, page):
    raise AssertionError("not rendered: no run logs adv/gap")
'''


def test_a_section_from_a_module_of_ones_own_is_in_the_report_and_one_whose_needs_fail_is_left_out(
        tmp_path, monkeypatch, registry):
    (tmp_path / "own_sections_a.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("own_sections_a")
    sweep = sweep_with(tmp_path / "s")
    md = make_report([sweep], tmp_path / "out", n_boot=50).read_text()

    # in its place: after the built-in analyses, before the list of runs
    assert md.index("## Training trajectories") < md.index("## Final training reward") < md.index("## Runs")
    table = pd.read_csv(tmp_path / "out" / "tables" / "final_reward.csv").set_index("arm")
    for arm in ARMS:  # each run's last logged reward, read here from its metrics log, averaged over the 3 runs
        last = [json.loads((sweep / "runs" / arm / f"seed_{s}" / "metrics.jsonl").read_text().splitlines()[-1])
                for s in range(3)]
        assert table.loc[arm, "reward"] == pytest.approx(np.mean([m["reward/mean"] for m in last]))
        assert table.loc[arm, "runs"] == 3
    # its needs not met: left out, with why, before the list of runs (the built-in families and power with theirs)
    assert md.index("## Final training reward") < md.index("## Not in this report") < md.index("## Runs")
    tail = md[md.index("## Not in this report"):md.index("## Runs")]
    assert "- Advantage gap (`advantage_gap`): no run logs `adv/gap`" in tail
    assert "- Power of the design (`power`): no principal comparisons are declared" in tail
    assert "Advantage gap" not in md[:md.index("## Not in this report")]
    assert "Advantage gap (<code>advantage_gap</code>): no run logs" in (tmp_path / "out" / "report.html").read_text()


def test_the_optional_sections_are_on_for_a_sweep_file_and_off_for_a_runs_manifest_unless_asked(tmp_path):
    plain = report_data([sweep_with(tmp_path / "plain")], n_boot=50)
    assert not {"plateau", "entropy_cause"} & set(left_out(plain))  # a sweep file without `report:`: today's report
    none = left_out(report_data([sweep_with(tmp_path / "none", {"sections": []})], n_boot=50))
    assert none["plateau"] == "not asked (`report.sections` does not name `plateau`)"
    assert none["entropy_cause"] == "not asked (`report.sections` does not name `entropy_cause`)"

    table = wandb_export(tmp_path)
    mine = left_out(report_data([table_manifest(tmp_path, table)], n_boot=50))
    assert mine["plateau"].startswith("an optional section, not in a runs manifest's report by default: "
                                      "`report.sections` adds it")
    assert "entropy_cause" in mine and "sweep file" not in mine["plateau"]
    asked = left_out(report_data([table_manifest(tmp_path, table, report={"sections": ["plateau"]})], n_boot=50))
    assert "plateau" not in asked and "entropy_cause" in asked


def _entropy_ratio(sweep: Path) -> float:
    """The plateau test's entropy ratio of grpo, from its metrics logs: mean over seeds of the last
    quarter's mean (10 of 40 logged steps) over the mean of the first logged value."""
    warm, final = [], []
    for s in range(3):
        e = [json.loads(x)["entropy"] for x in (sweep / "runs" / "grpo" / f"seed_{s}" / "metrics.jsonl").read_text().splitlines()]
        warm.append(e[0])
        final.append(np.mean(e[-10:]))
    return float(np.mean(final) / np.mean(warm))


def test_the_plateau_test_uses_the_thresholds_the_sweep_file_declares(tmp_path):
    # grpo's held-out pass@1 rises by 0.1·40/160 = 2.5 points from step 120 (¾T) to 160 (T) in every seed
    base = sweep_with(tmp_path / "base", ceiling=0.98)
    v = report_data([base], n_boot=50).plateau.verdict
    assert v.stalled.value == pytest.approx(2.5) and not v.stalled.held  # 2.5 ≥ 2
    ratio = _entropy_ratio(base)
    assert 1 / 3 < ratio < 0.9 and v.entropy_collapsed.held is False
    assert v.entropy_collapsed.threshold == pytest.approx(v.entropy_collapsed.value / ratio / 3)
    gap = v.below_ceiling.value  # 98 − final pass@1 (points), held at ≥ 15
    assert 15 <= gap < 40 and v.below_ceiling.held and not v.held

    block = {"plateau": {"stall_points": 3, "below_ceiling_points": 40, "entropy_ratio": 0.9}}
    data = report_data([sweep_with(tmp_path / "declared", block, ceiling=0.98)], n_boot=50)
    t = data.plateau.verdict
    assert t.stalled.value == pytest.approx(2.5) and t.stalled.held  # 2.5 < 3
    assert t.below_ceiling.value == pytest.approx(gap) and t.below_ceiling.held is False  # gap < 40
    assert t.entropy_collapsed.held and t.entropy_collapsed.threshold == pytest.approx(v.entropy_collapsed.threshold * 2.7)
    page = TablePage(data.sweep.info)
    SECTIONS["plateau"].render(data, page)
    text = page.doc.markdown()
    assert ("Criteria (declared in `report.plateau`; docs/method.md): held-out pass@1 changes < 3 points over the last "
            "quarter, ≥ 40 points below a reachable ceiling, final entropy < 9/10 of the warm start's") in text
    assert "≥ 40 below" in page.shown["plateau_units"].columns


def test_the_plateau_test_reads_finished_runs_only(tmp_path):
    # a run still going has not reached its last evaluation: its last one is not a final pass@1
    sweep = sweep_with(tmp_path / "s", ceiling=0.98)
    state = json.loads((sweep / "state.json").read_text())
    assert state["runs"]["grpo/seed_2"]["status"] == "done"
    full = report_data([sweep], n_boot=50).plateau.verdict
    assert full.seeds == 3 and set(full.per_seed) == {("", 0), ("", 1), ("", 2)}  # (warm start, seed)
    state["runs"]["grpo/seed_2"]["status"] = "running"
    (sweep / "state.json").write_text(json.dumps(state))
    v = report_data([sweep], n_boot=50).plateau.verdict
    assert v.seeds == 2 and set(v.per_seed) == {("", 0), ("", 1)}
    finals = [full.per_seed[("", s)]["final"] for s in (0, 1)]
    assert v.below_ceiling.value == pytest.approx(98 - np.mean(finals))


def test_a_section_name_the_report_does_not_know_is_one_line(tmp_path, monkeypatch):
    with pytest.raises(UserError, match=r"^x: config key 'sections': unknown section 'platau' \(did you mean "
                                         r"'plateau'\?\); the optional sections: plateau, entropy_cause, or a plug-in's "
                                         r"where RBCTL_SECTIONS names its module"):
        validate(ReportBlock, {"sections": ["platau"]}, "x")
    monkeypatch.setenv(SECTIONS_ENV, "a_plugin")  # a plug-in's name passes the file's check; the report's is exact
    data = report_data([sweep_with(tmp_path / "s", {"sections": ["plateau", "runs"]})], n_boot=50)
    with pytest.raises(UserError) as e:
        plan(data)
    assert str(e.value) == (f"{tmp_path / 's' / 'sweep.yaml'}: config key 'report.sections.1': 'runs' is always in "
                            "the report; the optional sections: plateau, entropy_cause")


def test_the_registry_refuses_a_taken_name_and_a_default_for_an_always_on_section(registry):
    def mine(data, page):
        pass

    with pytest.raises(ValueError, match=r"report section 'plateau' is already registered "
                                          r"\(rbctl.report.sections.premature_convergence.plateau\)"):
        register(ReportSection("plateau", "Mine", mine))
    with pytest.raises(ValueError, match="default_for is for an optional section"):
        register(ReportSection("mine", "Mine", mine, default_for=("sweep",)))
    with pytest.raises(ValueError, match="default_for names somewhere"):
        register(ReportSection("mine", "Mine", mine, optional=True, default_for=("somewhere",)))
    again = SECTIONS["plateau"]
    assert register(again) is again  # the same section again (a module imported twice) changes nothing


def test_the_shipped_optional_sections_are_the_ones_the_config_names():
    shipped = [s.name for s in SECTIONS.values() if s.optional and s.render.__module__.startswith("rbctl.")]
    assert sorted(shipped) == sorted(OPTIONAL_SECTIONS)


OPTIONAL_PLUGIN = '''
from pydantic import BaseModel, Field

from rbctl.report.sections import section, settings_for


class Digits(BaseModel):
    digits: int = Field(1, ge=0)


@section("seed_count", "Seeds per arm", optional=True, settings=Digits)
def seed_count(data, page):
    digits = settings_for("seed_count", data).digits
    page.doc.heading(2, "Seeds per arm")
    page.doc.para("; ".join(f"{arm}: {len(runs):.{digits}f}" for arm, runs in data.sweep.by_arm.items()))
'''


def test_a_plugin_named_in_the_environment_is_asked_for_by_the_sweep_file_with_its_settings(tmp_path):
    (tmp_path / "own_sections_b.py").write_text(textwrap.dedent(OPTIONAL_PLUGIN))
    sweep = sweep_with(tmp_path / "s", {"sections": ["seed_count"], "settings": {"seed_count": {"digits": 2}}})
    env = {**os.environ, SECTIONS_ENV: "own_sections_b",
           "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-m", "rbctl", "report", str(sweep), "-o", str(tmp_path / "out")],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    md = (tmp_path / "out" / "report.md").read_text()
    assert "## Seeds per arm\n\ngrpo: 3.00; grpo_budget: 3.00" in md  # its setting, from report.settings
    # asked for it alone: the study's optional sections are not
    assert "- Plateau test (`plateau`): not asked" in md and "## Plateau test" not in md

    bad = sweep_with(tmp_path / "bad", {"sections": ["seed_count"], "settings": {"seed_count": {"digits": -1}}})
    out = subprocess.run([sys.executable, "-m", "rbctl", "report", str(bad), "-o", str(tmp_path / "bad_out")],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode != 0
    assert f"{bad / 'sweep.yaml'} report.settings.seed_count: config key 'digits'" in out.stdout + out.stderr
