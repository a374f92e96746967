"""An evaluation's identity is its protocol: what decides the samples and their grading. `rbctl eval`
keeps the results of each protocol in a folder of its own (`rbctl.store.rundir.protocol_dir_name`:
``RUN/eval/step_N/protocol_XXXXXXXXXX/BENCH/``, or ``runs/eval/MODEL/protocol_XXXXXXXXXX/BENCH/``
for a model outside a run), so that an evaluation under one protocol never replaces or deletes
another's, and an interrupted one's message is about its own protocol only. The folder's
protocol.json (`record`) names the protocol in full and in words, and says whether it is the run's
own declared protocol (its config's ``eval:``, which the report scores): any other is a side
evaluation, listed by the report and never taken for the run's final score.

What is in the identity (`IDENTITY_KEYS`): n, temperature, top-p, the token limit (resolved), the
seed, the answer extraction, the prompt template and instruction, the problem limit, the engine,
the weights' dtype, the device and the precision's autocast. The checkpoint is the folder above
(``eval/step_N``), the benchmark the folder below. Threads and batch limits are not: they change
how fast, not what, is measured (`rbctl.eval.reuse.same_protocol`).
"""

from __future__ import annotations

from rbctl.config.eval import BUILTIN_MAX_NEW_TOKENS, DEFAULT_MAX_NEW_TOKENS, EvalConfig

IDENTITY_KEYS = ("n", "temperature", "top_p", "max_new_tokens", "seed", "extraction", "template", "instruction",
                 "limit", "engine", "dtype", "device", "precision")


def identity(cfg: EvalConfig, builtin: bool) -> dict:
    """The protocol of an evaluation with `cfg` of a built-in policy (`builtin`) or another model:
    `IDENTITY_KEYS` of `cfg`, resolved as the evaluation resolves them: the token limit, the device
    (its type: "auto" is "cpu" on a machine without CUDA) and the dtype ("auto": float32 but on a
    bf16 GPU)."""
    from rbctl.rollout.models import resolve_device, resolve_dtype

    out = {k: getattr(cfg, k) for k in IDENTITY_KEYS}
    out["max_new_tokens"] = cfg.max_new_tokens or (BUILTIN_MAX_NEW_TOKENS if builtin else DEFAULT_MAX_NEW_TOKENS)
    device = resolve_device(cfg.device)
    out["device"], out["dtype"] = device.type, str(resolve_dtype(cfg.dtype, device)).removeprefix("torch.")
    return out


def words(protocol: dict) -> str:
    """A protocol in words: ``n=4, temperature 1.0, top-p 1.0, at most 20 new tokens, seed 0,
    engine hf`` (and the problem limit, the extraction and the dtype where they are set)."""
    sampling = "greedy" if protocol["temperature"] == 0 else \
        f"temperature {float(protocol['temperature'])}, top-p {float(protocol['top_p'])}"
    parts = [f"n={protocol['n']}", sampling, f"at most {protocol['max_new_tokens']} new tokens",
             f"seed {protocol['seed']}", f"engine {protocol['engine']}"]
    if protocol.get("limit"):
        parts.append(f"first {protocol['limit']} problems")
    if protocol.get("extraction") not in (None, "final"):
        parts.append(f"extraction {protocol['extraction']}")
    return ", ".join(parts)


def record(protocol: dict, name: str, run_protocol: bool, run_benchmarks: list[str]) -> dict:
    """protocol.json of a protocol folder `name`: the protocol, in words, and whether it is the run's
    own declared protocol (`run_protocol`; `run_benchmarks` the benchmarks that protocol declares)."""
    return {"id": name, "protocol": protocol, "text": words(protocol), "run_protocol": run_protocol,
            "run_benchmarks": list(run_benchmarks) if run_protocol else []}


def summary_matches(summary: dict, protocol: dict) -> bool:
    """Whether a benchmark's summary was sampled under `protocol`: the same n, temperature, top-p,
    token limit, seed, engine and answer extraction (what a summary records of the identity)."""
    p = summary.get("protocol") or {}
    return ((p.get("n"), p.get("temperature"), p.get("top_p"), p.get("max_new_tokens"), p.get("seed"), p.get("engine"),
             p.get("answer_extraction"))
            == (protocol["n"], protocol["temperature"], protocol["top_p"], protocol["max_new_tokens"], protocol["seed"],
                protocol["engine"], protocol["extraction"]))
