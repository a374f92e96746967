"""A fingerprint of the main job's files: one short run of each arm of the main job
(configs/ablate_fixpoint.yaml: grpo, grpo_budget, grpo_entropy, seed 0, `STEPS` steps with a
periodic evaluation, a checkpoint and samples every 2 steps), run as `rbctl ablate` runs it (its
local workers, one job, so that a worker runs the three runs one after another), and a SHA-256 of
every file it writes, times and provenance aside. tests/integration/test_main_job_identity.py
compares a fresh fingerprint with the one recorded in tests/fixtures/main_job_fingerprint.json: a change
of the code that changes any number a run writes fails it.

    python -m scripts.main_job_fingerprint            # compare with the fingerprint recorded for this machine
    python -m scripts.main_job_fingerprint --write    # record it (only for a change meant to change the runs)
    python -m scripts.main_job_fingerprint --add      # record this machine's beside the others (runs unchanged)

What is left out, and why: provenance.json (versions, commit, host: the provenance); the lock files
(empty); every time, time/* and throughput/* value of the logs and summaries (the key stays, so its
place in the line is compared; its value is wall time); an evaluation's `max_batch_tokens` (sized
from the memory free at the time; it changes no sample); the first-seen time of a sweep version and the history's chain hashes (`prev`, `chain`: hashes over that
time and the sweep file's path, so they differ from run to run; the record's content is compared); the
Python and NumPy global random states inside trainer_state.pt (unseeded process state no run draws
from: every stream a run uses is seeded) and that file's hash and size in its checkpoint's COMPLETE
(its tensors and every other value are compared); the sweep and checkout paths (written as <SWEEP>
and <REPO>).

A fingerprint holds what it was made with: the torch version, the CPU's capability and the CPU's
vendor. Float arithmetic may differ on another machine, so the file keeps one fingerprint per such
machine and the test compares with this machine's (it skips where none is recorded, saying so).
`--write` keeps this machine's alone: a change meant to change the runs leaves every other machine's
stale. `--add` records this machine's beside the others, for code whose runs the others still
fingerprint.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "tests" / "fixtures" / "main_job_fingerprint.json"
ARMS = ["grpo", "grpo_budget", "grpo_entropy"]
STEPS = 4
OVERRIDES = [f"steps={STEPS}", "eval.every=2", "save_every=2", "sample_every=2"]
TIMED = ("time/", "throughput/")  # metric-name prefixes of wall-time values
TIMED_KEYS = {"time_s", "tokens_per_s", "max_batch_tokens", "first_seen",
              "prev", "chain"}  # a sweep history record's chain hashes cover its first-seen time and source path
UNSEEDED_RNG = ("python", "numpy")  # keys of trainer_state.pt's "rng" left out


def run_main_job_arms(out: Path) -> Path:
    """Run the main job's arms, shortened (module docstring), into sweep directory `out`."""
    from rbctl.sweep.ablate import DEFAULT_SWEEP, run_sweep

    run_sweep(DEFAULT_SWEEP, out, jobs=1, progress=False, log=lambda *a: None, arms=ARMS, seeds=[0],
              overrides=OVERRIDES)
    return out


def machine() -> dict:
    """What the float arithmetic of a fingerprint depends on beside the code."""
    import torch

    from rbctl.rollout.cpu_linear import cpu_vendor  # MKL picks its kernels by vendor: same capability, other rounding

    return {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "cpu_vendor": cpu_vendor()}


def recorded_files(recorded: dict, here: dict) -> dict[str, str] | None:
    """The files of the fingerprint `recorded` (the fixture's content) holds for machine `here`, or None."""
    return next((m["files"] for m in recorded["machines"] if m["machine"] == here), None)


def with_fingerprint(recorded: dict | None, here: dict, files: dict[str, str], keep_others: bool) -> dict:
    """The fixture's content with `files` as machine `here`'s fingerprint; every other machine's kept
    only if `keep_others` (`--add`), and only if it was made with the same arms and overrides."""
    same_run = recorded is not None and (recorded["arms"], recorded["overrides"]) == (ARMS, OVERRIDES)
    others = [m for m in recorded["machines"] if m["machine"] != here] if keep_others and same_run else []
    return {"arms": ARMS, "overrides": OVERRIDES, "machines": [*others, {"machine": here, "files": files}]}


def _blank_times(value, key: str = ""):
    """`value` with every wall-time entry (`TIMED`, `TIMED_KEYS`) replaced by "<time>"."""
    if isinstance(value, dict):
        return {k: "<time>" if (k.startswith(TIMED) or k in TIMED_KEYS) else _blank_times(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_blank_times(v) for v in value]
    return value


def _text(path: Path, roots: dict[str, str]) -> str:
    text = path.read_text(encoding="utf-8")
    for root, name in roots.items():
        text = text.replace(root, name)
    return text


def _tensor_state(value):
    """A checkpoint's trainer state as plain data: tensors as (dtype, shape, SHA-256 of the bytes)."""
    import torch

    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous().reshape(-1)  # flat: a 0-d tensor has no byte view
        return ["tensor", str(value.dtype), list(value.shape), hashlib.sha256(t.view(torch.uint8).numpy().tobytes()).hexdigest()]
    if isinstance(value, dict):
        return {str(k): _tensor_state(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_tensor_state(v) for v in value]
    return value


def canonical(path: Path, roots: dict[str, str]) -> bytes | None:
    """What is compared of one file (module docstring); None for a file left out."""
    from rbctl.store.rundir import CKPT_DONE, LOCK, PROVENANCE, SWEEP_LOCK, TRAINER_STATE

    if path.name in (PROVENANCE, LOCK, SWEEP_LOCK):
        return None
    if path.name == TRAINER_STATE:
        import torch

        state = torch.load(io.BytesIO(path.read_bytes()), weights_only=True)
        state["rng"] = {k: v for k, v in state["rng"].items() if k not in UNSEEDED_RNG}
        return json.dumps(_tensor_state(state)).encode()
    if path.name == CKPT_DONE:
        done = json.loads(path.read_text(encoding="utf-8"))
        done["files"][TRAINER_STATE] = "<compared as its tensors>"
        return json.dumps(done).encode()
    if path.suffix == ".json":
        return json.dumps(_blank_times(json.loads(_text(path, roots)))).encode()
    if path.suffix == ".jsonl":
        lines = [json.dumps(_blank_times(json.loads(line))) for line in _text(path, roots).splitlines() if line.strip()]
        return "\n".join(lines).encode()
    if path.suffix in (".yaml", ".txt"):
        return _text(path, roots).encode()
    return path.read_bytes()


def fingerprint(sweep_dir: Path) -> dict[str, str]:
    """Relative path -> SHA-256 of `canonical(path)`, for every file of the sweep directory not left out."""
    sweep_dir = Path(sweep_dir)
    roots = {str(sweep_dir.resolve()): "<SWEEP>", str(sweep_dir): "<SWEEP>", str(REPO): "<REPO>"}
    out = {}
    for path in sorted(p for p in sweep_dir.rglob("*") if p.is_file()):
        data = canonical(path, roots)
        if data is not None:
            out[str(path.relative_to(sweep_dir))] = hashlib.sha256(data).hexdigest()
    return out


def differences(recorded: dict[str, str], now: dict[str, str]) -> list[str]:
    """The files whose fingerprint differs, is new or is missing, one line each."""
    out = [f"differs: {p}" for p in sorted(set(recorded) & set(now)) if recorded[p] != now[p]]
    out += [f"missing now: {p}" for p in sorted(set(recorded) - set(now))]
    return out + [f"new: {p}" for p in sorted(set(now) - set(recorded))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true",
                      help=f"record this machine's fingerprint alone in {REFERENCE.relative_to(REPO)}")
    mode.add_argument("--add", action="store_true", help="record this machine's fingerprint beside the others")
    args = ap.parse_args(argv)
    here = machine()
    recorded = json.loads(REFERENCE.read_text()) if REFERENCE.exists() else None
    if not (args.write or args.add) and (recorded is None or recorded_files(recorded, here) is None):
        print(f"no fingerprint recorded for {here} in {REFERENCE.relative_to(REPO)}: --add records one")
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        now = fingerprint(run_main_job_arms(Path(tmp) / "sweep"))
    if args.write or args.add:
        fixture = with_fingerprint(recorded, here, now, keep_others=args.add)
        REFERENCE.parent.mkdir(parents=True, exist_ok=True)
        REFERENCE.write_text(json.dumps(fixture, indent=1) + "\n")
        print(f"recorded {len(now)} files for {here} in {REFERENCE.relative_to(REPO)}; machines there: "
              + "; ".join(str(m["machine"]) for m in fixture["machines"]))
        return 0
    diff = differences(recorded_files(recorded, here), now)
    print("\n".join(diff) if diff else f"the same {len(now)} files as recorded for {here}")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
