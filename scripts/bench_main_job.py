"""Time the main job the way a new user runs it: `rbctl ablate` (the default sweep, or SWEEP) with an
empty warm-start cache and a fresh output folder, and print the machine's matmul rate beside it,
since machines of the same kind differ about 2x in speed.

    python -m scripts.bench_main_job [SWEEP.yaml] [--keep DIR]

Prints: the machine (CPU model, cores), float32 GFLOP/s of a 2048^3 matmul on 1 and 2 threads,
the wall time of the warm start and of the whole sweep (warm start included), and where the
report is.
"""

from __future__ import annotations

import argparse
import os
import platform
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.bench_main_job", description=__doc__.splitlines()[0])
    ap.add_argument("sweep", nargs="?", default=None, help="sweep YAML (default: rbctl ablate's default sweep)")
    ap.add_argument("--keep", type=Path, default=None, help="write the sweep here and keep it (default: a temporary folder)")
    args = ap.parse_args(argv)
    print(f"machine: {cpu_model()}, {os.cpu_count()} cores; {platform.platform()}")
    print(f"float32 2048^3 matmul: {matmul_gflops(1):.0f} GFLOP/s on 1 thread, {matmul_gflops(2):.0f} on 2 threads")
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
            print(f"report: {out / 'report' / 'report.md'}")
        return proc.returncode


if __name__ == "__main__":
    raise SystemExit(main())
