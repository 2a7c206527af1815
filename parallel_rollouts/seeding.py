"""One root seed -> a seed for every env, every episode and every action sampler.

The scheme is NumPy's ``SeedSequence`` spawning, addressed by position so that
it does not depend on how envs are grouped into processes or machines::

    root                      SeedSequence(seed)
    env i                     SeedSequence(seed, spawn_key=(i,))         == root.spawn(...)[i]
    episode k of env i        SeedSequence(seed, spawn_key=(i, 0, k))    -> env.reset(seed=...)
    action sampler of env i   SeedSequence(seed, spawn_key=(i, 1))       -> action_space.seed(...)

Unlike ``seed + i``, neighbouring root seeds do not share env streams. Each
episode's reset seed is the first 32-bit word of its sequence's state (32 bits
because many simulators accept no wider seed), so any single episode can be
replayed on its own with ``env.reset(seed=episode_seed)`` and its recorded actions.
"""

from __future__ import annotations

import numpy as np

__all__ = ["action_sampler_seed", "draw_root_seed", "episode_seed", "validate_seed"]

_EPISODE_STREAM = 0
_ACTION_STREAM = 1


def draw_root_seed() -> int:
    """Draw a fresh root seed from the OS's entropy (used when ``seed=None``)."""
    return int(np.random.SeedSequence().entropy)


def validate_seed(seed: object) -> int:
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"`seed` must be a non-negative int or None; got {seed!r}.")
    if seed < 0:
        raise ValueError(f"`seed` must be a non-negative int or None; got {seed!r}.")
    return int(seed)


def episode_seed(root_seed: int, env_index: int, episode_number: int) -> int:
    """The reset seed of episode ``episode_number`` (counting from 0) of env ``env_index``."""
    sequence = np.random.SeedSequence(root_seed, spawn_key=(env_index, _EPISODE_STREAM, episode_number))
    return int(sequence.generate_state(1, np.uint32)[0])


def action_sampler_seed(root_seed: int, env_index: int) -> int:
    """The seed of env ``env_index``'s own action-space sampler (``policy=None``)."""
    sequence = np.random.SeedSequence(root_seed, spawn_key=(env_index, _ACTION_STREAM))
    return int(sequence.generate_state(1, np.uint32)[0])
