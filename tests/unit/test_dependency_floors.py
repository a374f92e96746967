"""pyproject.toml's floors of torch, transformers and vLLM are the versions the code needs: for each
version-bound feature rbctl/ uses (found in its source), the floor admits no release without it, and
no floor is higher than the newest of them."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

from tests.conftest import REPO

# (package, feature, a pattern that finds its use in rbctl/, the first release that has it, how that is known)
FEATURES = [
    ("torch", "FSDPModule.set_reshard_after_forward (rbctl.train.parallel)", r"\.set_reshard_after_forward\(", "2.8",
     "absent from torch 2.7.0's torch/distributed/fsdp/_fully_shard/_fully_shard.py, present in 2.8.0's (pytorch PR 149103)"),
    ("transformers", "from_pretrained(..., dtype=...)", r"from_pretrained\([^)]*\bdtype=", "4.56",
     "4.55.4's from_pretrained pops only torch_dtype (a `dtype=` falls through to the config and the model loads "
     "in float32); 4.56.0's pops dtype"),
    ("vllm", "LLM(logprobs_mode='processed_logprobs')", r"logprobs_mode=", "0.10.2",
     "the post-temperature log-probs of colocated engines (TRL raised its vLLM floor to 0.10.2 for them)"),
]


def floors() -> dict[str, Version]:
    """{package: floor} of pyproject.toml's dependencies and extras (the `>=` bound of each)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    reqs += [Requirement(r) for extra in project["optional-dependencies"].values() for r in extra]
    out = {}
    for r in reqs:
        for spec in r.specifier:
            if spec.operator == ">=":
                out.setdefault(r.name, Version(spec.version))
    return out


def used(pattern: str) -> list[Path]:
    return [p for p in sorted((REPO / "rbctl").rglob("*.py")) if re.search(pattern, p.read_text())]


def test_every_feature_in_the_table_is_used_and_within_the_floor():
    have = floors()
    for package, feature, pattern, since, _ in FEATURES:
        assert used(pattern), f"{feature} is no longer used: drop it from the table (and maybe lower the floor)"
        assert have[package] >= Version(since), f"{package}>={have[package]} admits releases without {feature} ({since})"


def test_each_floor_is_the_newest_feature_it_needs():
    have = floors()
    for package in ("torch", "transformers", "vllm"):
        need = max(Version(since) for p, _, _, since, _ in FEATURES if p == package)
        assert have[package] == need, f"{package}: floor {have[package]}, the code needs {need}"
