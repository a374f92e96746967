"""One training run of the GPU check, in a process of its own, on deterministic settings (deterministic
kernels asked for, warn only; cuBLAS's fixed workspace): `python -m scripts.gpu_checks.train_run
CONFIG.json RUN_DIR`. A config key `peak_file` (not a training key) names a JSON file to write the
run's peak CUDA memory and its prompt length to."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before CUDA starts


def prompt_tokens(cfg) -> int:
    """Tokens of the run's first training prompt (all of the check's prompts are as long)."""
    from transformers import AutoTokenizer

    from rbctl.tasks.prompting import encode_prompts

    first = json.loads(Path(cfg.data.source).read_text().splitlines()[0])["problem"]
    tok = AutoTokenizer.from_pretrained(cfg.model.name)
    return len(encode_prompts(tok, [first], cfg.data.template, cfg.data.instruction)[0])


def main(argv: list[str]) -> int:
    cfg_path, run_dir = argv
    data = json.loads(Path(cfg_path).read_text())
    peak_file = data.pop("peak_file", None)
    import torch

    torch.use_deterministic_algorithms(True, warn_only=True)
    from rbctl.config.train import TrainConfig
    from rbctl.train.loop import train

    cfg = TrainConfig.model_validate(data)
    cuda = torch.cuda.is_available() and cfg.model.device != "cpu"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    train(cfg, Path(run_dir), progress=False, log=lambda *a: None)
    if peak_file:
        Path(peak_file).write_text(json.dumps({"max_memory_allocated": torch.cuda.max_memory_allocated() if cuda else 0,
                                               "prompt_tokens": prompt_tokens(cfg)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
