"""Held-out scores of imported runs that logged none: `rbctl eval` of their checkpoints (TRL's
``checkpoint-N/``, verl's ``global_step_N/actor/huggingface/``) writes into the run's checkpoints
folder, in the layout of an rbctl run's evaluations (``CKPTS/eval/step_N/protocol_X/BENCH/``,
`rbctl.store.rundir`), and the manifest's report reads them from there: per-problem counts under
rbctl's protocol, so the bootstrap over problems, pass@k and maj@k are available as for rbctl's own
runs."""

from __future__ import annotations

from pathlib import Path

from rbctl.errors import UserError
from rbctl.report.sources.roles import HELDOUT
from rbctl.store.read import protocol_evaluations


def checkpoint_evals(folder: Path, protocol: str | None = None) -> list[dict]:
    """``[{"step", "benchmark", "summary", "protocol"}]`` of every complete `rbctl eval` of the
    checkpoints in ``folder`` (only protocol folder ``protocol`` when given). One (step, benchmark)
    evaluated under several protocols is an error unless ``protocol`` names the one to read."""
    if not Path(folder).is_dir():
        return []
    out, seen = [], {}
    for ev in protocol_evaluations(Path(folder)):
        pid = ev["path"].name
        if protocol is not None and pid != protocol:
            continue
        for bench, summary in ev["summaries"].items():
            key = (ev["step"], bench)
            if key in seen:
                raise UserError(f"{folder}: checkpoint {ev['step']} was evaluated on {bench} under several protocols "
                                f"({seen[key]}, {pid}); name the one to read as the manifest's `protocol:`")
            seen[key] = pid
            out.append({"step": ev["step"], "benchmark": bench, "summary": summary, "protocol": pid})
    return sorted(out, key=lambda e: (e["step"], e["benchmark"]))


def eval_record(e: dict) -> dict:
    """A checkpoint evaluation as a line of the run's held-out trajectory (``avg@n`` of its benchmark)."""
    value = (e["summary"].get("metrics") or {}).get(HELDOUT)
    value = value.get("value") if isinstance(value, dict) else value
    return {"step": e["step"], "benchmark": e["benchmark"], HELDOUT: float(value), "protocol": e["protocol"]}


def check_one_protocol(finals_by_run: dict[str, dict[str, dict]]) -> None:
    """The runs' final checkpoint evaluations of one benchmark must share a protocol: a comparison
    across protocols would compare how they were measured."""
    by_bench: dict[str, dict[str, list[str]]] = {}
    for run, finals in finals_by_run.items():
        for bench, f in finals.items():
            if f.get("protocol_folder"):
                by_bench.setdefault(bench, {}).setdefault(f["protocol_folder"], []).append(run)
    for bench, protos in by_bench.items():
        if len(protos) > 1:
            listed = "; ".join(f"{p}: {', '.join(runs)}" for p, runs in sorted(protos.items()))
            raise UserError(f"the runs' final `rbctl eval` of {bench} are under different protocols ({listed}); "
                            "evaluate them alike, or name one as the manifest's `protocol:`")


CHECKPOINT_PATTERNS = (("checkpoint-", ""), ("global_step_", "actor/huggingface"))  # TRL's; verl's HF export


def checkpoint_folders(folder: Path) -> list[tuple[int, Path]]:
    """(step, model folder) of the checkpoints in a run's checkpoints folder: TRL's ``checkpoint-N``
    and verl's ``global_step_N/actor/huggingface`` (its HF export), by step."""
    out = []
    for prefix, model in CHECKPOINT_PATTERNS:
        for d in Path(folder).glob(f"{prefix}*") if Path(folder).is_dir() else []:
            tail = d.name[len(prefix):]
            if tail.isdigit() and (d / model).is_dir():
                out.append((int(tail), d / model if model else d))
    return sorted(out)
