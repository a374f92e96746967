"""Every seed a training run derives from its run seed, and the salts that keep the streams apart.

Each stream is a NumPy generator seeded by a key of the form [run seed, where in the run, salt]:
the salt names the stream, so no two draw the same numbers, and every key depends on (run seed,
step, …) only, so a resumed run draws exactly what an uninterrupted one would. The values are
part of the runs' reproducibility: changing one changes every run's samples.
"""

from __future__ import annotations

import numpy as np

STEP_SALT = 7  # the step's sampling seed (round 0)
ROUND_PROMPTS_SALT = 11  # a sampling hook's resampling: the prompts of a round r > 0
ROUND_SEED_SALT = 13  # a sampling hook's resampling: the sampling seed of a round r > 0
POLICY_LOSS_SALT = 17  # a policy loss's random choice (Clip-Cov's tokens), per micro-batch
MINI_BATCH_SALT = 29  # the deal of a rollout batch's groups into mini-batches, per epoch
RANK_STRIDE = 1_000_003  # rank k samples with the round's seed + k · this (different streams per process)

SEED_BOUND = 2**31 - 1  # sampling seeds are drawn below this (31 bits)


def epoch_permutation(seed: int, epoch: int, pool: int) -> np.ndarray:
    """The order in which epoch `epoch` reads the prompt pool (`pool` prompts)."""
    return np.random.default_rng([seed, epoch]).permutation(pool)


def step_seed(seed: int, step: int) -> int:
    """The sampling seed of step `step` (its round 0)."""
    return int(np.random.default_rng([seed, step, STEP_SALT]).integers(SEED_BOUND))


def round_prompt_rng(seed: int, step: int, rnd: int) -> np.random.Generator:
    """The generator that draws the prompts of round `rnd` > 0 of step `step`."""
    return np.random.default_rng([seed, step, rnd, ROUND_PROMPTS_SALT])


def round_seed(seed: int, step: int, rnd: int) -> int:
    """The sampling seed of round `rnd` > 0 of step `step`."""
    return int(np.random.default_rng([seed, step, rnd, ROUND_SEED_SALT]).integers(SEED_BOUND))


def rank_seed(round_seed: int, rank: int) -> int:
    """The sampling seed of process `rank` for a round whose seed is `round_seed` (rank 0: that seed)."""
    return round_seed + RANK_STRIDE * rank


def mini_batch_rng(seed: tuple[int, ...]) -> np.random.Generator:
    """The generator that deals one epoch's groups into mini-batches; `seed` = (run seed, step, epoch)."""
    return np.random.default_rng([*seed, MINI_BATCH_SALT])


def policy_loss_seed(seed: int, draw: tuple[int, ...]) -> int:
    """The seed of a policy loss's random choice at `draw` = (step, epoch, micro-batch)."""
    return int(np.random.default_rng([seed, *draw, POLICY_LOSS_SALT]).integers(2**62))
