"""Random generators in the remote copies of a policy: recognised, and seeded per worker.

A policy pickled into every worker carries its random generators' states with it,
so every copy would draw the same numbers. Instead, the generators a policy holds
(anywhere its pickle reaches: attributes, closure cells, containers) travel as
placeholders naming their kind (see :mod:`~parallel_rollouts.policy.shipping`),
and each worker or Ray actor fills them with generators of its own:

- a generator seen for the first time in a copy is new, seeded from the collector's
  root seed, the first env of the worker's slice and how many generators that copy
  has been given so far (:func:`~parallel_rollouts.config.seeding.policy_generator_seed`);
- when the policy is sent again (something about it changed), the generator at the
  same place, of the same kind, is the worker's own one, which carries on its stream.

So the state of a generator in this process never reaches the workers: their streams
follow from the collector's seed alone. The process-wide generators a policy may use
without holding them (Python's ``random``, NumPy's legacy ``numpy.random``, PyTorch's
default generator) are seeded once per worker the same way, PyTorch's as soon as it has
been imported there.

Recognised: ``numpy.random.Generator`` and ``RandomState`` over one of NumPy's own bit
generators, those bit generators held bare, ``random.Random`` (exactly that type) and
``torch.Generator``. Anything else (a subclass, a generator inside a C extension, JAX
keys) is pickled with the policy like any other object, state and all.
"""

from __future__ import annotations

import random
import sys
from typing import Any, Callable

import numpy as np

from ..config.seeding import policy_generator_seed, process_generator_seed

__all__ = ["HeldGenerators", "ProcessGenerators", "generator_kinds"]

_NUMPY_BIT_GENERATORS = tuple(
    getattr(np.random, name) for name in ("MT19937", "PCG64", "PCG64DXSM", "Philox", "SFC64") if hasattr(np.random, name)
)


def _bit_generator_name(bit_generator: Any) -> str | None:
    name = type(bit_generator).__name__
    return name if getattr(np.random, name, None) is type(bit_generator) else None


def _numpy_generator_kind(generator: np.random.Generator) -> tuple | None:
    name = _bit_generator_name(generator.bit_generator)
    return None if name is None else ("numpy.Generator", name)


def _random_state_kind(generator: np.random.RandomState) -> tuple | None:
    name = generator.get_state(legacy=False)["bit_generator"]
    return ("numpy.RandomState", name) if isinstance(getattr(np.random, name, None), type) else None


def generator_kinds() -> dict[type, Callable[[Any], tuple | None]]:
    """``{exact type: kind(obj)}`` for every recognised generator type; ``kind`` returns a
    picklable description from which a worker makes a fresh one (``None``: not recognised)."""
    kinds: dict[type, Callable[[Any], tuple | None]] = {
        np.random.Generator: _numpy_generator_kind,
        np.random.RandomState: _random_state_kind,
        random.Random: lambda generator: ("random.Random",),
    }
    for bit_generator in _NUMPY_BIT_GENERATORS:
        kinds[bit_generator] = lambda generator: ("numpy.BitGenerator", type(generator).__name__)
    torch = sys.modules.get("torch")  # a policy holding a torch.Generator has imported torch
    if torch is not None:
        kinds[torch.Generator] = lambda generator: ("torch.Generator", str(generator.device))
    return kinds


def _fresh(kind: tuple, seed: np.random.SeedSequence) -> Any:
    family = kind[0]
    if family == "numpy.Generator":
        return np.random.Generator(getattr(np.random, kind[1])(seed))
    if family == "numpy.RandomState":
        return np.random.RandomState(getattr(np.random, kind[1])(seed))
    if family == "numpy.BitGenerator":
        return getattr(np.random, kind[1])(seed)
    if family == "random.Random":
        return random.Random(_wide_int(seed))
    import torch

    return torch.Generator(device=kind[1]).manual_seed(_torch_seed(seed))


def _wide_int(seed: np.random.SeedSequence) -> int:
    return int.from_bytes(seed.generate_state(4, np.uint32).tobytes(), "little")


def _torch_seed(seed: np.random.SeedSequence) -> int:
    return int(seed.generate_state(1, np.uint64)[0])


class HeldGenerators:
    """One remote copy's generators, by their place in the policy's pickle."""

    def __init__(self, root_seed: int, first_env: int) -> None:
        self._root_seed = root_seed
        self._first_env = first_env
        self._made = 0
        self._current: dict[int, tuple[tuple, Any]] = {}
        self._next: dict[int, tuple[tuple, Any]] = {}

    def get(self, place: int, kind: tuple) -> Any:
        """The generator for ``place``: the one already there if it is of ``kind``, else a new one."""
        held = self._next.get(place) or self._current.get(place)
        if held is None or held[0] != kind:
            # Counted, not derived from the place: a generator replacing another never
            # repeats a stream this copy has drawn from.
            held = (kind, _fresh(kind, policy_generator_seed(self._root_seed, self._first_env, self._made)))
            self._made += 1
        self._next[place] = held
        return held[1]

    def commit(self) -> None:
        """The policy just rebuilt holds what :meth:`get` gave out; forget the rest."""
        self._current, self._next = self._next, {}

    def discard(self) -> None:
        """Rebuilding the policy failed: keep the generators of the copy still in use."""
        self._next = {}


class ProcessGenerators:
    """Seeds this process's shared generators, each once, from the root seed and the slice."""

    _RANDOM, _NUMPY, _TORCH = 0, 1, 2

    def __init__(self, root_seed: int, first_env: int) -> None:
        self._root_seed = root_seed
        self._first_env = first_env
        self._seeded: set[int] = set()

    def _seed(self, generator: int) -> np.random.SeedSequence:
        self._seeded.add(generator)
        return process_generator_seed(self._root_seed, self._first_env, generator)

    def seed_unseeded(self) -> None:
        """Seed the ones not seeded yet; PyTorch's only once this process has imported it.

        Called before every rollout, so that a policy importing PyTorch on its first call
        draws from a seeded generator from its second rollout on at the latest.
        """
        if self._RANDOM not in self._seeded:
            random.seed(_wide_int(self._seed(self._RANDOM)))
        if self._NUMPY not in self._seeded:
            np.random.set_state(np.random.MT19937(self._seed(self._NUMPY)).state)
        torch = sys.modules.get("torch")
        if torch is not None and self._TORCH not in self._seeded:
            torch.manual_seed(_torch_seed(self._seed(self._TORCH)))
