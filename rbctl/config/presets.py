"""The shipped presets (`configs/*.yaml`): in the wheel they are package data (`rbctl/configs/`,
force-included by the build); in a source checkout they are the repository's top-level `configs/`."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def presets_dir() -> Path:
    packaged = Path(str(resources.files("rbctl"))) / "configs"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "configs"  # editable install / source checkout


def preset(name: str) -> Path:
    """Path of a shipped preset by file name, e.g. `preset("ablate_quickstart.yaml")`."""
    return presets_dir() / name
