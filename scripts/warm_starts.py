"""Make, check and probe the warm starts shipped inside the package (rbctl/tasks/warm_starts/).

    python -m scripts.warm_starts make configs/fixpoint.yaml --seeds 0 1 2 3 4 [--cache DIR]  # train, probe, ship
    python -m scripts.warm_starts check                                           # regenerate, compare
    python -m scripts.warm_starts probe                                           # re-measure, targets

`make` trains the SFT recipe of the config's `data.builtin` section once per SFT seed (in a
temporary cache), measures each warm start on the task's held-out split (`scripts.fixpoint_probe.probe`)
and ships it as `<task>-ws<seed>` when it meets the index's targets for its task (a seed that misses
them is reported and not shipped; no seed is silently dropped: the index records every seed tried).
`check` retrains every shipped warm start from its recorded recipe and says, per file, whether the
regenerated copy is bit-identical and, if not, how far its weights and properties are from the
shipped one (another CPU's floating-point kernels give another policy: the reason they are shipped).
`probe` re-measures the shipped ones here and checks them against the targets.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import asdict, replace
from pathlib import Path

from rbctl.store.rundir import BUILTIN_MARKER
from scripts.bench_main_job import cpu_model

# What a fixpoint warm start of the main job's recipe (configs/fixpoint.yaml) must be like
# (docs/plateau_task.md, "The warm start"): its look-up circuit formed (the shortcut right on
# depth-1 problems), the demonstrators' strategy mix (15% walks) and their per-hop early stop (0.5:
# a walk is right half the time at depth 1), hence, with 80% depth-1 problems,
# pass@1 ≈ 0.8·(0.85 + 0.15·0.5) + 0.2·0.15·0.1 ≈ 0.74, pass@8, and an entropy in a narrow band.
# The bands allow the sampling error of 256 problems × 8 samples and the spread of SFT seeds.
TARGETS = {"fixpoint": {"shortcut_acc_depth1": [0.97, 1.0], "walk_share": [0.11, 0.18], "walk_acc_depth1": [0.38, 0.62],
                        "pass@1": [0.69, 0.77], "pass@8": [0.76, 0.86], "entropy": [0.13, 0.20]}}
FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
         BUILTIN_MARKER)


def _commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _train(spec, ws, cache: Path) -> Path:
    os.environ["RBCTL_CACHE"] = str(cache)
    from rbctl.tasks import builtin

    return builtin.warm_started(spec, ws, log=print)


def _probe(folder: Path, spec) -> dict:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from scripts.fixpoint_probe import probe

    return probe(AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder), spec)


def make(config: Path, seeds: list[int], cache: Path | None = None) -> None:
    import torch

    from rbctl.config.train import load_train_config
    from rbctl.tasks.shipped import INDEX, SHIPPED_DIR, file_hashes, index
    from rbctl.train.training_data import task_spec, warm_start_spec

    torch.set_num_threads(1)
    cfg = load_train_config(config)
    spec, base_ws = task_spec(cfg), warm_start_spec(cfg)
    idx = index()
    idx["targets"] = {**idx.get("targets", {}), **TARGETS}
    idx.setdefault("tried", {})
    targets = TARGETS[spec.kind]
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            ws = replace(base_ws, seed=seed)
            name = f"{spec.kind}-ws{seed}"
            folder = _train(spec, ws, cache or Path(tmp))  # a recipe's cached warm start is reused
            props = _probe(folder, spec)
            misses = [f"{k} = {props.get(k)} not in {lo, hi}" for k, (lo, hi) in targets.items()
                      if props.get(k) is None or not lo <= props[k] <= hi]
            idx["tried"][name] = {"properties": props, "shipped": not misses, "misses": misses}
            print(json.dumps({"name": name, "shipped": not misses, **props, "misses": misses}))
            if misses:
                continue
            dest = SHIPPED_DIR / name
            shutil.rmtree(dest, ignore_errors=True)
            dest.mkdir(parents=True)
            for f in FILES:
                if (folder / f).exists():
                    shutil.copy(folder / f, dest / f)
            idx.setdefault("warm_starts", {})[name] = {
                "kind": spec.kind, "task": asdict(spec), "warm_start": asdict(ws), "sha256": file_hashes(dest),
                "properties": props,
                "made": {"date": dt.date.today().isoformat(), "commit": _commit(), "cpu": cpu_model(),
                         "torch": torch.__version__, "command": f"python -m scripts.warm_starts make {config} --seeds "
                                                                + " ".join(map(str, seeds))},
            }
    (SHIPPED_DIR / INDEX).write_text(json.dumps(idx, indent=1, sort_keys=True) + "\n")


def check() -> int:
    """Regenerate every shipped warm start from its recipe; 0 when all are bit-identical."""
    import torch
    from safetensors.torch import load_file

    from rbctl.tasks import builtin
    from rbctl.tasks.shipped import SHIPPED_DIR, file_hashes, index

    torch.set_num_threads(1)
    differ = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, rec in sorted(index()["warm_starts"].items()):
            mod = builtin.task(rec["kind"])
            spec, ws = mod.TaskSpec(**rec["task"]), mod.WarmStartSpec(**rec["warm_start"])
            folder = _train(spec, ws, Path(tmp))
            new = file_hashes(folder)
            same = {f: new.get(f) == h for f, h in rec["sha256"].items()}
            a, b = load_file(str(SHIPPED_DIR / name / "model.safetensors")), load_file(str(folder / "model.safetensors"))
            dmax = max((a[k] - b[k]).abs().max().item() for k in a)
            line = {"name": name, "weights_identical": same.get("model.safetensors"), "max_abs_weight_diff": dmax}
            if not same.get("model.safetensors"):
                differ += 1
                props = _probe(folder, spec)
                line["regenerated_properties"] = props
                line["shipped_properties"] = rec["properties"]
            print(json.dumps(line))
    print(f"{differ} of {len(index()['warm_starts'])} regenerated warm starts differ from the shipped ones "
          f"on this machine ({cpu_model()})")
    return 1 if differ else 0


def probe_shipped() -> int:
    from rbctl.tasks import builtin
    from rbctl.tasks.shipped import SHIPPED_DIR, check_targets, index

    bad = 0
    for name, rec in sorted(index()["warm_starts"].items()):
        spec = builtin.task(rec["kind"]).TaskSpec(**rec["task"])
        props = _probe(SHIPPED_DIR / name, spec)
        misses = check_targets(rec["kind"], props)
        bad += bool(misses)
        print(json.dumps({"name": name, **props, "recorded": rec["properties"], "misses": misses}))
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("config", type=Path)
    m.add_argument("--seeds", type=int, nargs="+", required=True)
    m.add_argument("--cache", type=Path, default=None, help="reuse warm starts already trained in this RBCTL_CACHE")
    sub.add_parser("check")
    sub.add_parser("probe")
    a = ap.parse_args()
    if a.cmd == "make":
        make(a.config, a.seeds, a.cache)
        return 0
    return check() if a.cmd == "check" else probe_shipped()


if __name__ == "__main__":
    raise SystemExit(main())
