"""Time the main job the way a new user runs it: `rbctl ablate` (the default sweep, or SWEEP) with an
empty warm-start cache and a fresh output folder, and print the machine's matmul rate beside it,
since machines of the same kind differ about 2x in speed.

    python -m scripts.bench_main_job [SWEEP.yaml] [--keep DIR]
    python -m scripts.bench_main_job [SWEEP.yaml] --compare REV [--rounds 1]
    python -m scripts.bench_main_job [SWEEP.yaml] --split [--arms A,B] [--seeds 0,1] [--jobs 2] [--rounds 1]

Prints: the machine (CPU model, cores), float32 GFLOP/s of a 2048^3 matmul on 1 and 2 threads,
the wall time of the whole sweep (warm start included), and where the report is. With --compare,
the same main job at git revision REV (checked out to a temporary worktree) and at the working
tree, alternating (REV first) for --rounds rounds in this one invocation, each with its own empty
cache; then whether the two produced the same final evaluations (same results, only the time
differs) and the time ratio.

With --split, a selection of the sweep (--arms, --seeds; default: every arm on seeds 0 and 1) runs
with its phases timed (`rbctl.train.phases`): per run, the median over its runs of the wall time
in the worker and of each phase (building the trainer: policy, warm start and engine; the steps,
beside their logged `time/step_s`; the periodic and final evaluations; checkpoint writes; log
lines; the rest), the worker's age at the run's start and the modules the run imported; then the
sweep's wall time against the workers' busy time (what the launcher adds: process starts, state
writes, the warm start's preparation, the interpreter of `rbctl ablate` itself).
"""

from __future__ import annotations

import argparse
import os
import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def matmul_gflops(threads: int, n: int = 2048, reps: int = 5) -> float:
    code = (f"import torch, time; torch.set_num_threads({threads}); a = torch.randn({n}, {n}); b = torch.randn({n}, {n});"
            f"a @ b; t = time.perf_counter()\nfor _ in range({reps}): a @ b\n"
            f"print(2 * {n}**3 * {reps} / (time.perf_counter() - t) / 1e9)")
    return float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


REPO = Path(__file__).resolve().parents[1]


def run_main_job(tree: Path, sweep: str | None, out: Path, cache: Path) -> tuple[int, float, list[str]]:
    """`python -m rbctl ablate` with the rbctl of `tree` (run from it, so its package is imported)."""
    env = {**os.environ, "RBCTL_CACHE": str(cache)}  # an empty cache: the warm start is timed too
    env.pop("PYTHONPATH", None)
    cmd = [sys.executable, "-m", "rbctl", "ablate"] + ([str(Path(sweep).resolve())] if sweep else []) + ["-o", str(out)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=tree, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return proc.returncode, time.perf_counter() - t0, proc.stdout.strip().splitlines()[-3:]


def final_evals(sweep_dir: Path) -> dict[str, str]:
    """Every run's final evaluation summary, by run folder (for a same-results check)."""
    out = {}
    from rbctl.store.rundir import EVAL_DIR, SUMMARY, step_dirs, sweep_runs

    paths = [p for _, run in sweep_runs(sweep_dir) for _, d in step_dirs(run / EVAL_DIR) for p in d.glob(f"*/{SUMMARY}")]
    for path in sorted(paths):
        d = json.loads(path.read_text())
        out[str(path.relative_to(sweep_dir))] = json.dumps([d["metrics"], d["per_problem"]], sort_keys=True)
    return out


def compare(rev: str, sweep: str | None, rounds: int) -> int:
    sha = subprocess.run(["git", "rev-parse", "--short", rev], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True,
                                text=True).stdout.strip())
    with tempfile.TemporaryDirectory() as tmp:
        old_tree = Path(tmp) / "old"
        subprocess.run(["git", "worktree", "add", "--detach", str(old_tree), sha], cwd=REPO, check=True, capture_output=True)
        try:
            times: dict[str, list[float]] = {"old": [], "new": []}
            evals = {}
            for rnd in range(rounds):
                for name, tree in (("old", old_tree), ("new", REPO)):
                    out, cache = Path(tmp) / f"{name}{rnd}", Path(tmp) / f"cache_{name}{rnd}"
                    print(f"round {rnd + 1}/{rounds}: main job at {name} ({sha if name == 'old' else head + (' + changes' if dirty else '')})", flush=True)
                    code, wall, tail = run_main_job(tree, sweep, out, cache)
                    print("\n".join(f"  | {line}" for line in tail))
                    if code != 0:
                        print(f"main job at {name} failed (exit {code})")
                        return code
                    times[name].append(wall)
                    evals[name] = final_evals(out)
                    print(f"  {wall / 60:.2f} min wall", flush=True)
                    shutil.rmtree(out, ignore_errors=True)
                    shutil.rmtree(cache, ignore_errors=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old_tree)], cwd=REPO, capture_output=True)
    same = evals["old"] == evals["new"] and bool(evals["new"])
    o, n = min(times["old"]), min(times["new"])
    print(f"main job wall time (warm start included), best of {rounds}: {sha} {o / 60:.2f} min, "
          f"{head}{' + changes' if dirty else ''} {n / 60:.2f} min: {o / n:.2f}x ({(1 - n / o):.0%} less time)")
    print(f"final evaluations of the {len(evals['new'])} runs: {'identical' if same else 'DIFFERENT'} at the two revisions")
    return 0


PHASES = ("trainer", "steps", "periodic_eval", "final_eval", "checkpoint", "logs")
PHASE_NAMES = {"trainer": "build the trainer (policy, warm start, engine, data)", "steps": "training steps",
               "periodic_eval": "periodic evaluations (step 0 included)", "final_eval": "final evaluation",
               "checkpoint": "checkpoint writes", "logs": "log lines (metrics, samples)"}


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    n = len(xs)
    return (xs[n // 2] + xs[(n - 1) // 2]) / 2 if n else float("nan")


def split_lines(records: list[dict], logged_steps: list[float], sweep_wall: float, jobs: int) -> list[str]:
    """The printed split of one timed sweep: per-run medians of each phase (`rbctl.train.phases`
    records), the rest of a run's worker time, and what the launcher adds beyond the workers' busy
    time (`sweep_wall` × `jobs` − their summed run time, per run)."""
    n = len(records)
    runs = [r["wall_s"] for r in records]
    lines = [f"{n} runs; per run, median (wall s / CPU s):",
             f"  in the worker, in all               {_median(runs):7.2f} / {_median([r['cpu_s'] for r in records]):6.2f}"]
    rest = list(runs)
    for ph in PHASES:
        w = [r["phases"].get(ph, {}).get("wall_s", 0.0) for r in records]
        c = [r["phases"].get(ph, {}).get("cpu_s", 0.0) for r in records]
        rest = [x - y for x, y in zip(rest, w)]
        calls = _median([r["phases"].get(ph, {}).get("calls", 0) for r in records])
        lines.append(f"  {PHASE_NAMES[ph]:<45} {_median(w):7.2f} / {_median(c):6.2f}  ({calls:g} calls)")
        if ph == "steps" and logged_steps:
            lines.append(f"    of which logged as time/step_s            {_median(logged_steps):7.2f}")
    lines.append(f"  the rest of the run (set-up, locks, provenance, imports) {_median(rest):5.2f}")
    ages = [r["process_age_s"] for r in records if r.get("process_age_s") is not None]
    if ages:
        lines.append(f"  worker process age at the run's start: median {_median(ages):.2f} s; modules imported "
                     f"by the run: median {_median([r['modules_imported'] for r in records]):g}; "
                     f"{len({r['pid'] for r in records})} worker processes for {n} runs")
    busy = sum(runs)
    lines.append(f"sweep: {sweep_wall:.1f} s wall with {jobs} jobs; the workers' runs {busy:.1f} s in all; "
                 f"the launcher adds {(sweep_wall * jobs - busy) / max(n, 1):.2f} s per run per worker "
                 f"({sweep_wall * jobs / max(n, 1):.2f} s wall per run per worker)")
    return lines


def split(sweep: str | None, arms: str | None, seeds: str, jobs: int, rounds: int, keep: Path | None = None) -> int:
    """Run a selection of the sweep `rounds` times with its phases timed and print the split;
    `keep`: write round r's sweep to keep/round_r and keep it."""
    from rbctl.store.rundir import METRICS, sweep_runs
    from rbctl.store.read import read_lines
    from rbctl.train.phases import ENV

    for rnd in range(rounds):
        with tempfile.TemporaryDirectory() as tmp:
            out = keep / f"round_{rnd}" if keep else Path(tmp) / "sweep"
            phases_file = Path(tmp) / "phases.jsonl"
            env = {**os.environ, "RBCTL_CACHE": str(Path(tmp) / "cache"), ENV: str(phases_file)}
            cmd = ([sys.executable, "-m", "rbctl", "ablate"] + ([sweep] if sweep else []) + ["-o", str(out), "--no-report",
                   "-q", "--seeds", seeds, "--jobs", str(jobs)] + (["--arms", arms] if arms else []))
            print(f"round {rnd + 1}/{rounds}:", " ".join(cmd[1:]), f"(empty RBCTL_CACHE, {ENV} set)", flush=True)
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            wall = time.perf_counter() - t0
            if proc.returncode != 0:
                print(proc.stdout[-2000:])
                print(f"the sweep failed (exit {proc.returncode})")
                return proc.returncode
            records = [json.loads(x) for x in phases_file.read_text().splitlines() if x.strip()]
            logged = [sum(r.get("time/step_s") or 0 for r in read_lines(run / METRICS)) for _, run in sweep_runs(out)]
            print("\n".join(split_lines(records, logged, wall, jobs)), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.bench_main_job", description=__doc__.splitlines()[0])
    ap.add_argument("sweep", nargs="?", default=None, help="sweep YAML (default: rbctl ablate's default sweep)")
    ap.add_argument("--keep", type=Path, default=None, help="write the sweep here and keep it (default: a temporary folder; with --split: DIR/round_R)")
    ap.add_argument("--compare", metavar="REV", help="also time the main job at git revision REV, alternating")
    ap.add_argument("--rounds", type=int, default=1, help="with --compare: rounds of (REV, working tree); with --split: timed sweeps")
    ap.add_argument("--split", action="store_true", help="time a selection of the sweep by phase (module docstring)")
    ap.add_argument("--arms", default=None, help="with --split: the arms (comma-separated; default: all)")
    ap.add_argument("--seeds", default="0,1", help="with --split: the seeds (default: 0,1)")
    ap.add_argument("--jobs", type=int, default=2, help="with --split: runs in parallel (default: 2)")
    args = ap.parse_args(argv)
    print(f"machine: {cpu_model()}, {os.cpu_count()} cores; {platform.platform()}")
    print(f"float32 2048^3 matmul: {matmul_gflops(1):.0f} GFLOP/s on 1 thread, {matmul_gflops(2):.0f} on 2 threads")
    if args.split:
        return split(args.sweep, args.arms, args.seeds, args.jobs, args.rounds, args.keep)
    if args.compare:
        return compare(args.compare, args.sweep, args.rounds)
    with tempfile.TemporaryDirectory() as tmp:
        out = args.keep or Path(tmp) / "sweep"
        env = {**os.environ, "RBCTL_CACHE": str(Path(tmp) / "cache")}  # an empty cache: the warm start is timed too
        cmd = [sys.executable, "-m", "rbctl", "ablate"] + ([args.sweep] if args.sweep else []) + ["-o", str(out)]
        print("running:", " ".join(cmd), "(with an empty RBCTL_CACHE)", flush=True)
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        wall = time.perf_counter() - t0
        tail = proc.stdout.strip().splitlines()[-3:]
        print("\n".join(f"  | {line}" for line in tail))
        print(f"main job: exit {proc.returncode}, {wall / 60:.1f} min wall (warm start included)")
        if args.keep:
            from rbctl.store.rundir import REPORT_DIR, REPORT_MD

            print(f"report: {out / REPORT_DIR / REPORT_MD}")
        return proc.returncode


if __name__ == "__main__":
    raise SystemExit(main())
