"""The sweep's live display fits the terminal: one overall line and the running runs only, with an ETA
from the runs finished so far (`rbctl.sweep.display`)."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from rbctl.sweep.display import PlainDisplay, SweepProgress, clock_text, eta_seconds

ARMS = ("grpo", "grpo_budget", "grpo_entropy")


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def main_job(jobs: int, clock: Clock) -> SweepProgress:
    """The main job's 72 runs: 3 arms × 24 seeds, 100 steps each."""
    p = SweepProgress(jobs, clock)
    for arm in ARMS:
        for seed in range(24):
            p.add(f"{arm}/seed_{seed}", 100)
    return p


def render(p: SweepProgress, width: int = 80, height: int = 24) -> list[str]:
    console = Console(width=width, height=height, record=True, file=io.StringIO(), color_system=None)
    console.print(p.renderable(height - 1, width))
    return console.export_text().rstrip("\n").split("\n")


def test_eta_by_hand():
    # mean 60 s; running for 10 and 40 s: slots free at 50 and 20 s; 3 pending: 20+60=80, 50+60=110, 80+60=140
    assert eta_seconds(60.0, [10.0, 40.0], 3, 2) == pytest.approx(140.0)
    assert eta_seconds(60.0, [90.0], 0, 2) == 0.0  # past the mean: ends any moment
    assert eta_seconds(60.0, [], 4, 2) == pytest.approx(120.0)  # two waves
    assert eta_seconds(60.0, [], 0, 2) == 0.0
    assert [clock_text(s) for s in (7, 725, 3725)] == ["0:07", "12:05", "1:02:05"]


def test_the_main_job_fits_80x24_with_its_overall_line_and_running_runs_only():
    clock = Clock()
    p = main_job(2, clock)
    keys = list(p.runs)
    assert render(p, width=200)[0] == "runs 0/72 done, 0 running, 0 failed, 72 pending; 0:00 elapsed, no ETA before a run ends"
    # 10 runs finished in 60 s each, two at a time (5 min), 2 running for 15 s, one at step 40
    for i, key in enumerate(keys[:10]):
        clock.t = 1000.0 + 60 * (i // 2)
        p.started(key)
        clock.t += 60
        p.finished(key, {"status": "done", "error": None})
    clock.t = 1300.0
    for key in keys[10:12]:
        p.started(key)
    p.step(keys[10], 40, "reward 0.512  entropy 0.188")
    clock.t = 1315.0
    lines = render(p)
    # left: 2 running end in 45 s, 60 pending in 30 waves of 60 s: 45 + 1800 = 1845 s
    assert lines[0] == "runs 10/72 done, 2 running, 0 failed, 60 pending; 5:15 elapsed, ETA 30:45"
    assert len(lines) == 3 and all(len(x) <= 80 for x in lines)
    assert lines[1].startswith("grpo/seed_10") and "40/100" in lines[1] and "reward 0.512" in lines[1]
    assert lines[1].endswith("0:15") and lines[2].startswith("grpo/seed_11") and "starting" in lines[2]


def test_more_running_runs_than_rows_are_counted_not_cut_off():
    clock = Clock()
    p = main_job(72, clock)
    for key in p.runs:
        p.started(key)
    p.finished("grpo/seed_3", {"status": "failed", "error": "UserError: loss non-finite"})
    lines = render(p)
    assert len(lines) <= 23 and all(len(x) <= 80 for x in lines)  # 24 rows, the last the cursor's
    # wider than 80 columns as one line: two, split at the semicolon
    assert lines[:2] == ["runs 0/72 done, 71 running, 1 failed, 0 pending;", "0:00 elapsed, no ETA before a run ends"]
    assert lines[2] == "last failure: grpo/seed_3: UserError: loss non-finite"
    shown = len(lines) - 4
    assert lines[-1] == f"… and {71 - shown} more running"
    assert "…" not in "".join(lines[:-1])  # nothing cropped by Rich: it fits


def test_plain_lines_carry_the_overall_line():
    clock, out = Clock(), io.StringIO()
    d = PlainDisplay(every=0.0, out=out, jobs=1, clock=clock)
    d.add("a/seed_0", 10)
    d.add("b/seed_0", 10)
    d.started("a/seed_0")
    d.step("a/seed_0", 3, "")
    clock.t += 30
    d.tick()
    d.finished("a/seed_0", {"status": "done", "error": None})
    d.started("b/seed_0")
    clock.t += 3
    d.tick()
    lines = [re.sub(r"^\[\d\d:\d\d:\d\d\] ", "", x) for x in out.getvalue().splitlines()]
    assert lines[0] == "start a/seed_0"
    assert lines[1] == ("progress: runs 0/2 done, 1 running, 0 failed, 1 pending; 0:30 elapsed, no ETA before a run ends "
                        "(a/seed_0 step 3/10)")
    assert lines[2] == "done a/seed_0 (0.5 min into the sweep)"
    # a/seed_0 took 30 s; b/seed_0 has run 3 s: 27 s left
    assert lines[4] == "progress: runs 1/2 done, 1 running, 0 failed, 0 pending; 0:33 elapsed, ETA 0:27 (b/seed_0 step 0/10)"


def test_the_live_display_redraws_within_the_terminal():
    """RichDisplay itself (Rich's Live) at a terminal of 80×24: every frame it draws fits."""
    import time

    from rbctl.sweep.display import RichDisplay

    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=80, height=24, color_system=None)
    with RichDisplay(jobs=30, console=console) as d:
        for arm in ARMS:
            for seed in range(24):
                d.add(f"{arm}/seed_{seed}", 100)
        for seed in range(24):
            d.started(f"grpo/seed_{seed}")
            d.step(f"grpo/seed_{seed}", seed, "reward 0.512  entropy 0.188")
        time.sleep(0.4)  # at least one refresh (4 a second)
        d.finished("grpo/seed_0", {"status": "done", "error": None})
    text = out.getvalue().replace("\x1b[?25l", "").replace("\x1b[?25h", "")  # the cursor hidden, then shown
    frames = [f for f in re.split(r"(?:\x1b\[2K|\x1b\[1A|\r)+", text) if f.strip()]
    assert len(frames) >= 2  # redrawn in place
    for frame in frames:
        lines = frame.rstrip("\n").split("\n")
        assert len(lines) <= 23 and all(len(x) <= 80 for x in lines)
    last = frames[-1].rstrip("\n").split("\n")
    assert last[0].startswith("runs 1/72 done, 23 running") and last[-1].startswith("… and ")
