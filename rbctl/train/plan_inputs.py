"""What a training plan (`rbctl.train.dry_run`) resolves offline: the model (its directory in the
Hugging Face cache, its parameter count from the cached config, a GGUF file's header or a table of
known sizes) and the data (cached files, a sample of records, the prompt length by the cached
tokenizer or by characters), each with where it came from. Never the network:
`try_to_load_from_cache` / `scan_cache_dir` only."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from rbctl.config.train import TrainConfig
from rbctl.train.footprint import KNOWN_ARCHITECTURES, Architecture, count_parameters, known_architecture

# Hub organisations whose models are gated: the first download needs the license accepted on the
# model's page and a logged-in token (Meta's Llama models, as of 2025).
GATED_ORGS = ("meta-llama/",)
ASSUMED_PROMPT_TOKENS = 200  # a competition problem + instruction + chat template: ~100–300 tokens
CHARS_PER_TOKEN = 4.0  # English text with BPE tokenizers
SAMPLE_RECORDS = 256  # records read to estimate prompt length
DATA_SUFFIXES = (".parquet", ".jsonl", ".json")


@dataclass
class Resolved:
    """What was found offline, each with where it came from."""

    model_dir: Path | None = None
    model_note: str = ""
    n_params: float | None = None
    n_source: str = "unknown"
    arch: Architecture | None = None  # the sizes memory and time are estimated from
    tokenizer: object | None = None
    data_files: list[Path] = field(default_factory=list)
    data_note: str = ""
    records: list[dict] | None = None
    warnings: list[str] = field(default_factory=list)


# --- the Hugging Face cache (read only) ----------------------------------------------------------


def _cached_model_dir(repo_id: str, cache_dir) -> Path | None:
    from huggingface_hub import try_to_load_from_cache

    try:
        path = try_to_load_from_cache(repo_id, "config.json", cache_dir=cache_dir)
    except Exception:  # an id that is not a valid repo id, an unreadable cache: not cached
        return None
    return Path(path).parent if isinstance(path, str) else None


def _cached_dataset_files(repo_id: str, cache_dir) -> list[Path]:
    """Data files of the newest cached snapshot of a Hub dataset (no download)."""
    from huggingface_hub import scan_cache_dir

    try:
        info = scan_cache_dir(cache_dir)
    except Exception:  # no cache directory at all
        return []
    for repo in info.repos:
        if repo.repo_type == "dataset" and repo.repo_id == repo_id and repo.revisions:
            rev = max(repo.revisions, key=lambda r: ("main" in r.refs, r.last_modified))
            return sorted(f.file_path for f in rev.files if f.file_path.suffix in DATA_SUFFIXES)
    return []


def _read_some(path: Path, limit: int) -> list[dict]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(path)
        rows: list[dict] = []
        for batch in pf.iter_batches(batch_size=limit):
            rows.extend(batch.to_pylist())
            break
        return rows[:limit]
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)  # a .json file: a list of records, or {"data": [...]}
        if isinstance(data, dict):
            data = next((v for v in data.values() if isinstance(v, list)), [])
        return [r for r in data[:limit] if isinstance(r, dict)]
    except json.JSONDecodeError:  # JSON lines
        rows = []
        for line in text.splitlines():
            if line.strip():
                rows.append(json.loads(line))
            if len(rows) >= limit:
                break
        return rows


def _get_field(record: dict, dotted: str):
    from rbctl.tasks.benchmarks import _get_field

    return _get_field(record, dotted)


# --- resolution ----------------------------------------------------------------------------------


def _size(r: Resolved, config, source: str) -> None:
    """N (counted on the meta device) and the architecture of `config`, into `r`."""
    r.n_params, r.arch, r.n_source = count_parameters(config), Architecture.of(config), source


GGUF_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}  # value type -> struct code
GGUF_STRING, GGUF_ARRAY = 8, 9


def gguf_parameter_count(path: Path) -> float:
    """The parameter count of a GGUF file from its header alone (no tensor data read): the sum over
    its tensor infos of the product of their dimensions (the GGUF format, v2 and v3: magic, version,
    tensor count, metadata key-value pairs, then each tensor's name, dims, type and offset). A tied
    output embedding is stored once, so it counts once, as the loaded model's parameters do."""
    import struct

    with open(path, "rb") as f:
        def read(fmt: str):
            size = struct.calcsize("<" + fmt)
            data = f.read(size)
            if len(data) != size:
                raise ValueError("truncated GGUF header")
            return struct.unpack("<" + fmt, data)[0]

        def skip_string() -> None:
            f.seek(read("Q"), 1)

        def skip_value(kind: int) -> None:
            if kind == GGUF_STRING:
                skip_string()
            elif kind == GGUF_ARRAY:
                inner, count = read("I"), read("Q")
                if inner in GGUF_SCALARS:
                    f.seek(struct.calcsize("<" + GGUF_SCALARS[inner]) * count, 1)
                else:
                    for _ in range(count):
                        skip_value(inner)
            elif kind in GGUF_SCALARS:
                f.seek(struct.calcsize("<" + GGUF_SCALARS[kind]), 1)
            else:
                raise ValueError(f"unknown GGUF value type {kind}")

        if f.read(4) != b"GGUF":
            raise ValueError("not a GGUF file (no GGUF magic)")
        if read("I") < 2:
            raise ValueError("GGUF version 1 is not supported")
        n_tensors, n_kv = read("Q"), read("Q")
        for _ in range(n_kv):
            skip_string()
            skip_value(read("I"))
        total = 0
        for _ in range(n_tensors):
            skip_string()
            dims = [read("Q") for _ in range(read("I"))]
            read("I"), read("Q")  # the tensor's type and offset
            count = 1
            for d in dims:
                count *= d
            total += count
    return float(total)


def _load_tokenizer(model_dir: Path):
    if not any((model_dir / f).exists() for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")):
        return None
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(model_dir))
    except Exception:
        return None


def resolve_model(cfg: TrainConfig, r: Resolved, cache_dir) -> None:
    from rbctl.rollout.models import expand_model_name

    name = expand_model_name(cfg.model.name)  # a package's file (pkg:PACKAGE/FILE): its path here
    if name == "builtin":
        from rbctl.tasks import builtin
        from rbctl.train.training_data import task_spec, warm_start_spec

        spec, ws = task_spec(cfg), warm_start_spec(cfg)
        r.tokenizer = builtin.build_tokenizer(spec)
        _size(r, builtin.model_config(spec, ws, len(r.tokenizer)), f"the {spec.kind} task's model config, counted on the meta device")
        if cfg.data.builtin.warm_start:
            builtin.warm_started(spec, ws, shipped=cfg.data.builtin.warm_start)  # refuses a mismatched or changed one
            r.model_note = f"the built-in policy, shipped warm start {cfg.data.builtin.warm_start} (SHA-256 checked)"
            return
        cached = (builtin.warm_start_path(spec, ws) / "config.json").exists()
        r.model_note = f"the built-in {spec.kind} policy" + (
            "" if cached else f" (its warm start, {ws.steps} SFT steps, is trained at the first run and cached)")
        return
    p = Path(name).expanduser()
    if p.exists():
        from rbctl.rollout.models import resolve_source

        try:
            src, gguf = resolve_source(name)
        except Exception as e:
            r.warnings.append(str(e))
            r.model_note = "a local path that is not a model"
            return
        r.model_dir = Path(src)
        r.model_note = f"local GGUF file {Path(src) / gguf}" if gguf else f"local directory {src}"
        if gguf:
            try:
                r.n_params, r.n_source = gguf_parameter_count(Path(src) / gguf), "counted from the GGUF file's tensor headers"
            except (OSError, ValueError) as e:
                r.warnings.append(f"cannot read the GGUF header of {Path(src) / gguf}: {e}")
    else:
        r.model_dir = _cached_model_dir(name, cache_dir)
        r.model_note = f"in the local Hugging Face cache ({r.model_dir})" if r.model_dir else "not in the local Hugging Face cache"
    if r.model_dir is not None and (r.model_dir / "config.json").exists():
        from transformers import AutoConfig

        try:
            _size(r, AutoConfig.from_pretrained(str(r.model_dir)), "counted from the cached config")
        except Exception as e:
            r.warnings.append(f"cannot build the model config of {name}: {type(e).__name__}: {e}")
        r.tokenizer = _load_tokenizer(r.model_dir)
    if r.model_dir is None and name.startswith(GATED_ORGS) and not p.exists():
        r.warnings.append(f"'{name}' is gated on the Hugging Face Hub: accept its license on "
                          f"https://huggingface.co/{name} and log in (hf auth login, or HF_TOKEN) before the first run")
    if r.n_params is None and name in KNOWN_ARCHITECTURES:
        r.n_params, r.arch, r.n_source = known_architecture(name)
    if r.n_params is None:
        r.warnings.append(f"parameter count of '{name}' unknown (not cached, not in the table): no FLOP estimate")
    elif r.model_dir is None and not p.exists():
        r.warnings.append(f"'{name}' is not cached: the first run downloads ≈ {gigabytes(r.n_params * 2)} of bf16 weights "
                          "(offline machines: cache it first, or point model.name at a local directory)")


def resolve_data(cfg: TrainConfig, r: Resolved, cache_dir) -> None:
    d = cfg.data
    if d.source == "builtin":
        from rbctl.tasks import builtin
        from rbctl.train.training_data import task_spec

        spec = task_spec(cfg)
        # prompts measured on the test split: drawn like the training pool, and cheap to make (a pool
        # can be large: the maze's paper scale)
        probs = builtin.module_of(spec).problems(spec, "test")
        r.records = [{"problem": q.problem, "answer": q.answer} for q in probs[:SAMPLE_RECORDS]]
        r.data_note = f"the built-in {spec.kind} task ({spec.train_size} training problems, generated in code)"
        return
    p = Path(d.source).expanduser()
    if p.exists() or d.source.endswith((".jsonl", ".parquet")):
        if not p.exists():
            r.warnings.append(f"data file {p} does not exist")
            r.data_note = "a local file that does not exist"
            return
        r.data_files, r.data_note = [p], f"local file {p}"
    else:
        r.data_files = _cached_dataset_files(d.source, cache_dir)
        split = f" [{d.hf_config + ', ' if d.hf_config else ''}{d.split}]"
        if r.data_files:
            r.data_note = f"Hub dataset {d.source}{split}, in the local Hugging Face cache ({len(r.data_files)} data files)"
        else:
            r.data_note = f"Hub dataset {d.source}{split}, not in the local Hugging Face cache"
            r.warnings.append(f"dataset '{d.source}' is not cached: the first run downloads it")
            return
    split_files = [f for f in r.data_files if d.split in f.name] or r.data_files
    try:
        r.records = _read_some(split_files[0], SAMPLE_RECORDS)
    except Exception as e:
        r.warnings.append(f"cannot read {split_files[0]}: {type(e).__name__}: {e}")
        return
    if r.records:
        missing = [f for f in (d.problem_field, d.answer_field) if not _has(r.records[0], f)]
        if missing:
            r.warnings.append(f"data records lack field(s) {', '.join(missing)}; they have: {', '.join(map(str, r.records[0]))}")
            r.records = None


def _has(record: dict, dotted: str) -> bool:
    try:
        _get_field(record, dotted)
        return True
    except KeyError:
        return False


def prompt_tokens(cfg: TrainConfig, r: Resolved) -> tuple[float, str]:
    """Mean prompt length in tokens, and how it was obtained."""
    from rbctl.tasks.prompting import encode_prompts, render_prompt, resolve_template

    if r.records:
        problems = [str(_get_field(rec, cfg.data.problem_field)) for rec in r.records]
        if r.tokenizer is not None:
            template = resolve_template(r.tokenizer, cfg.data.template, builtin_model=cfg.model.name == "builtin")
            ids = encode_prompts(r.tokenizer, problems, template, cfg.data.instruction, cfg.data.builtin.task)
            return sum(map(len, ids)) / len(ids), f"measured: {template} template and the tokenizer on {len(ids)} records"
        texts = [render_prompt(None, q, "plain", cfg.data.instruction) for q in problems]
        chars = sum(map(len, texts)) / len(texts)
        return chars / CHARS_PER_TOKEN, (f"≈ {CHARS_PER_TOKEN:g} characters per token over {len(texts)} cached records; "
                                         "no cached tokenizer, chat-template tokens not counted")
    return float(ASSUMED_PROMPT_TOKENS), ("an assumption, no data cached: a competition math problem with the "
                                          "instruction and chat template is ~100–300 tokens")


# --- the plan ------------------------------------------------------------------------------------


def gigabytes(nbytes: float) -> str:
    return f"{nbytes / 1e9:.1f} GB" if nbytes >= 1e8 else f"{nbytes / 1e6:.1f} MB"
