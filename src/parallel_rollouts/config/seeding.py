"""One root seed -> a seed for every env, every episode and every action sampler.

The scheme is NumPy's ``SeedSequence`` spawning, addressed by position so that
it does not depend on how envs are grouped into processes or machines::

    root                      SeedSequence(seed)
    env i                     SeedSequence(seed, spawn_key=(i,))            == root.spawn(...)[i]
    episode k of env i        word k % 256 of
                              SeedSequence(seed, spawn_key=(i, 0, k // 256)).generate_state(256)
                                                                            -> env.reset(seed=...)
    episode k of env i after  word k % 256 of
      its r-th restart        SeedSequence(seed, spawn_key=(i, 3, r, k // 256)).generate_state(256)
      (r >= 1)                                                              -> env.reset(seed=...)
    action sampler of env i   SeedSequence(seed, spawn_key=(i, 1))          -> action_space.seed(...)
    generator k held by the   SeedSequence(seed, spawn_key=(i, 2, 0, k))   -> a worker's copy of the policy
      policy in the worker    (k counts the generators that copy came to hold)
      whose slice starts at i
    process-wide generator g  SeedSequence(seed, spawn_key=(i, 2, 1, g))   -> random, numpy.random, torch
      of that worker

An env whose worker died and was replaced (``max_restarts``, async backend) starts a new
stream: its episodes after the ``r``-th replacement draw from stream ``(i, 3, r)``, never
handed to an episode before, so a run with restarts is reproducible from the root seed and
the record of which envs were lost at which row (``batch.valid``, ``batch.lost_env_indices``).

Only the policy's generators in rollout workers and Ray actors follow the grouping: they are
seeded per worker, keyed by the first env of its slice.

Unlike ``seed + i``, neighbouring root seeds do not share env streams. Episode
seeds are drawn 256 at a time (one ``SeedSequence`` per block, not per
episode, keeps resets cheap) and are 32-bit words because many simulators
accept no wider seed. Any single episode can be replayed on its own with
``env.reset(seed=episode_seed)`` and its recorded actions.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigurationError

__all__ = [
    "EpisodeSeedTable",
    "EpisodeSeeds",
    "EPISODE_SEED_MODES",
    "action_sampler_seed",
    "check_episode_seeds",
    "draw_root_seed",
    "episode_seed",
    "policy_generator_seed",
    "process_generator_seed",
    "validate_seed",
]

EPISODE_SEED_BLOCK = 256
_EPISODE_STREAM = 0
_ACTION_STREAM = 1
_POLICY_STREAM = 2
_RESTARTED_EPISODE_STREAM = 3
_HELD_GENERATORS = 0
_PROCESS_GENERATORS = 1


def draw_root_seed() -> int:
    """Draw a fresh root seed from the OS's entropy (used when ``seed=None``)."""
    return int(np.random.SeedSequence().entropy)


def validate_seed(seed: object) -> int:
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ConfigurationError(f"`seed` must be a non-negative int or None; got {seed!r}.")
    return int(seed)


#: ``"every"``: every episode is reset with its own seed; ``"first"``: only each env's first.
EPISODE_SEED_MODES = ("every", "first")


def check_episode_seeds(mode: object) -> str:
    if mode not in EPISODE_SEED_MODES:
        raise ConfigurationError(f"`episode_seeds` must be one of {EPISODE_SEED_MODES!r}; got {mode!r}.")
    return mode


def _episode_seed_block(root_seed: int, env_index: int, block: int, incarnation: int = 0) -> list[int]:
    if incarnation:
        key = (env_index, _RESTARTED_EPISODE_STREAM, incarnation, block)
    else:
        key = (env_index, _EPISODE_STREAM, block)
    sequence = np.random.SeedSequence(root_seed, spawn_key=key)
    return sequence.generate_state(EPISODE_SEED_BLOCK, np.uint32).tolist()


def episode_seed(root_seed: int, env_index: int, episode_number: int, incarnation: int = 0) -> int:
    """The reset seed of episode ``episode_number`` (counting from 0) of env ``env_index``,
    after its ``incarnation``-th restart (0: never restarted)."""
    block, offset = divmod(episode_number, EPISODE_SEED_BLOCK)
    return _episode_seed_block(root_seed, env_index, block, incarnation)[offset]


class EpisodeSeeds:
    """The episode seeds of one env (after its ``incarnation``-th restart), in order, a block at a time."""

    def __init__(self, root_seed: int, env_index: int, incarnation: int = 0) -> None:
        self._root_seed = root_seed
        self._env_index = env_index
        self._incarnation = incarnation
        self._block_index = -1
        self._block: list[int] = []

    def seed_of(self, episode_number: int) -> int:
        block, offset = divmod(episode_number, EPISODE_SEED_BLOCK)
        if block != self._block_index:
            self._block = _episode_seed_block(self._root_seed, self._env_index, block, self._incarnation)
            self._block_index = block
        return self._block[offset]


class EpisodeSeedTable:
    """The next episode seeds of a run of envs, as arrays both cores read without calling back.

    The envs' seeds come from the stream of their ``incarnation`` (how many times their worker
    was replaced), as :class:`EpisodeSeeds` does. ``seeds[c]`` holds the block of :data:`EPISODE_SEED_BLOCK` seeds that env ``c``
    (global index ``first_env + c``) is in, ``blocks[c]`` which block that is (-1: none
    yet), and ``episodes_started[c]`` how many episodes env ``c`` has started: its next
    reset uses episode number ``episodes_started[c]``. The compiled step reads the seed
    from the table and calls :meth:`fill` only when an env crosses into a new block.
    """

    def __init__(self, root_seed: int, first_env: int, episodes_started, incarnation: int = 0) -> None:
        self._root_seed = root_seed
        self._first_env = first_env
        self._incarnation = incarnation
        self.episodes_started = np.array(episodes_started, dtype=np.int64).reshape(-1)
        num_envs = self.episodes_started.shape[0]
        self.seeds = np.zeros((num_envs, EPISODE_SEED_BLOCK), dtype=np.int64)
        self.blocks = np.full(num_envs, -1, dtype=np.int64)

    def fill(self, column: int, block: int) -> None:
        """Load block ``block`` of env ``column``'s episode seeds into ``seeds[column]``."""
        self.seeds[column] = _episode_seed_block(self._root_seed, self._first_env + column, block, self._incarnation)
        self.blocks[column] = block

    def next_seed(self, column: int) -> int:
        """The seed of env ``column``'s next episode (:meth:`advance` once it has started)."""
        block, offset = divmod(int(self.episodes_started[column]), EPISODE_SEED_BLOCK)
        if self.blocks[column] != block:
            self.fill(column, block)
        return int(self.seeds[column, offset])

    def advance(self, column: int) -> None:
        """Env ``column`` started the episode :meth:`next_seed` named."""
        self.episodes_started[column] += 1


def action_sampler_seed(root_seed: int, env_index: int) -> int:
    """The seed of env ``env_index``'s own action-space sampler (``policy=None``)."""
    sequence = np.random.SeedSequence(root_seed, spawn_key=(env_index, _ACTION_STREAM))
    return int(sequence.generate_state(1, np.uint32)[0])


def policy_generator_seed(root_seed: int, first_env: int, serial: int) -> np.random.SeedSequence:
    """The seed of the ``serial``-th generator (counting from 0) that the copy of the policy in the
    worker or actor whose slice starts at env ``first_env`` came to hold."""
    return np.random.SeedSequence(root_seed, spawn_key=(first_env, _POLICY_STREAM, _HELD_GENERATORS, serial))


def process_generator_seed(root_seed: int, first_env: int, generator: int) -> np.random.SeedSequence:
    """The seed of process-wide generator ``generator`` (Python's, NumPy's legacy one, PyTorch's)
    in the worker or actor whose slice starts at env ``first_env``."""
    return np.random.SeedSequence(root_seed, spawn_key=(first_env, _POLICY_STREAM, _PROCESS_GENERATORS, generator))
