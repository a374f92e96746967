"""The RNG part of the trainer state a checkpoint holds. Writing and reading checkpoints is
`rbctl.store.checkpoint`'s.

The RNG states are stored as tensors, lists and numbers, so that the trainer state unpickles as
data (`torch.load(weights_only=True)`).
"""

from __future__ import annotations

import random

import numpy as np
import torch


def rng_state() -> dict:
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    return {"torch": torch.get_rng_state(), "python": random.getstate(),
            "numpy": [kind, keys.tolist(), int(pos), int(has_gauss), float(gauss)]}


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
