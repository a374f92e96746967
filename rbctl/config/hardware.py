"""The GPUs a training config can be planned for (`hardware.gpu`): what `rbctl train --dry-run` needs of
each card to check a recipe's memory and time against it (rbctl.train.footprint)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Card:
    memory: int  # bytes, as nvidia-smi reports the card's total
    bf16_flops: float  # dense bf16 tensor-core peak, FLOP/s (NVIDIA datasheets)
    hbm: float  # memory bandwidth, bytes/s (NVIDIA datasheets)


CARDS = {
    "H100-80GB": Card(81_559 * 2**20, 989e12, 3.35e12),  # SXM
    "H200-141GB": Card(143_771 * 2**20, 989e12, 4.8e12),
    "A100-80GB": Card(81_920 * 2**20, 312e12, 2.04e12),  # SXM
}
