"""A policy's state, carried to rollout workers through one shared-memory segment.

Rollout workers unpickle the policy once, at start-up. After that, a policy with
``state_dict()`` / ``load_state_dict()`` (a PyTorch module, or any object whose state
is a flat mapping of tensors or NumPy arrays) sends its state each ``collect()`` by
writing it into this segment: raw bytes of every entry, at offsets fixed at start-up.
Nothing is pickled; a worker whose copy is older than the segment's version loads it.

For a PyTorch module the ``training`` flag of every submodule travels too (as one
more entry), so ``policy.eval()`` / ``policy.train()`` reach the workers. Other changes
(plain attributes, swapped sub-objects) do not: the workers keep the copy they started
with. The architecture (keys, shapes, dtypes) is fixed at start-up: a state dict of
another shape is refused with an error that says so.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ConfigurationError
from .shared_memory import attach_segment, create_segment, release_segment

__all__ = ["PolicyState", "StateEntry", "StateLayout", "StateReader", "has_state", "load_state"]

_ALIGNMENT = 64
#: The entry holding a PyTorch module's per-submodule ``training`` flags.
TRAINING_MODES_KEY = "\x00training_modes"


@dataclass(frozen=True)
class StateEntry:
    key: str
    #: ``"torch"`` or ``"numpy"``: what the worker hands ``load_state_dict``.
    kind: str
    dtype: str
    shape: tuple[int, ...]
    offset: int
    nbytes: int


@dataclass(frozen=True)
class StateLayout:
    segment_name: str
    entries: tuple[StateEntry, ...]


def has_state(policy: Any) -> bool:
    """Whether ``policy`` exposes its state as ``state_dict()`` / ``load_state_dict()``."""
    return callable(getattr(policy, "state_dict", None)) and callable(getattr(policy, "load_state_dict", None))


def _is_tensor(value: Any) -> bool:
    return type(value).__module__.startswith("torch") and hasattr(value, "detach")


def _is_module(policy: Any) -> bool:
    torch = sys.modules.get("torch")  # a module policy has imported it already
    return torch is not None and isinstance(policy, torch.nn.Module)


def _state_with_modes(policy: Any) -> dict[str, Any]:
    """``policy.state_dict()``, plus the training flags of a PyTorch module's submodules."""
    state = dict(policy.state_dict())
    if _is_module(policy):
        state[TRAINING_MODES_KEY] = np.array([module.training for module in policy.modules()], dtype=np.bool_)
    return state


def _entry_bytes(key: str, value: Any) -> tuple[str, str, tuple[int, ...], np.ndarray]:
    """``(kind, dtype, shape, flat uint8 view)`` of one state-dict entry."""
    if _is_tensor(value):
        if value.device.type != "cpu":
            raise ConfigurationError(
                f"policy_placement='workers' runs the policy on the workers' CPUs, but its state "
                f"{key!r} is on {value.device}. Keep a GPU policy in the main process "
                "(policy_placement='main'), or move the policy to the CPU."
            )
        import torch

        flat = value.detach().contiguous().reshape(-1)
        # Raw bytes, so every dtype (bfloat16 included) travels exactly.
        raw = flat.view(torch.uint8).numpy()
        return "torch", str(value.dtype).removeprefix("torch."), tuple(value.shape), raw
    if isinstance(value, np.ndarray):
        array = np.ascontiguousarray(value)
        return "numpy", array.dtype.str, array.shape, array.reshape(-1).view(np.uint8)
    raise ConfigurationError(
        f"policy_placement='workers' ships the policy's state_dict() through shared memory, but entry "
        f"{key!r} is a {type(value).__name__}; only tensors and NumPy arrays can be shipped. Return "
        "those from state_dict(), or give the policy no state_dict() (it is then pickled once, at start-up)."
    )


class PolicyState:
    """The segment one collector's rollout workers read the policy's state from (main-process side)."""

    def __init__(self, segment, layout: StateLayout) -> None:
        self._segment = segment
        self.layout = layout
        self._base = np.frombuffer(segment.buf, dtype=np.uint8)
        self.version = 0

    @classmethod
    def create(cls, policy: Any) -> PolicyState:
        entries, offset = [], 0
        for key, value in _state_with_modes(policy).items():
            kind, dtype, shape, raw = _entry_bytes(key, value)
            start = -(-offset // _ALIGNMENT) * _ALIGNMENT
            entries.append(StateEntry(str(key), kind, dtype, shape, start, raw.nbytes))
            offset = start + raw.nbytes
        segment = create_segment(offset)
        state = cls(segment, StateLayout(segment.name, tuple(entries)))
        state.write(policy)
        return state

    def write(self, policy: Any) -> int:
        """Copy ``policy``'s current state into the segment; return the new version number."""
        state = _state_with_modes(policy)
        keys = [entry.key for entry in self.layout.entries]
        if list(map(str, state.keys())) != keys:
            raise ConfigurationError(
                f"the policy's state_dict() keys changed since the collector started ({keys!r} -> "
                f"{list(state.keys())!r}); rollout workers hold the architecture they started with. "
                "Create a new collector for a new architecture."
            )
        for entry, value in zip(self.layout.entries, state.values()):
            kind, dtype, shape, raw = _entry_bytes(entry.key, value)
            if (kind, dtype, shape) != (entry.kind, entry.dtype, entry.shape):
                raise ConfigurationError(
                    f"the policy's state {entry.key!r} changed from {entry.dtype}{list(entry.shape)} to "
                    f"{dtype}{list(shape)} since the collector started; rollout workers hold the "
                    "architecture they started with. Create a new collector for a new architecture."
                )
            self._base[entry.offset : entry.offset + entry.nbytes] = raw
        self.version += 1
        return self.version

    def release(self) -> None:
        self._base = None
        release_segment(self._segment, owner=True)


class StateReader:
    """A worker's view of the state segment."""

    def __init__(self, layout: StateLayout) -> None:
        self._layout = layout
        self._segment = attach_segment(layout.segment_name)
        self._base = np.frombuffer(self._segment.buf, dtype=np.uint8)
        self.loaded_version = 0

    def load_into(self, policy: Any, version: int) -> None:
        """``policy.load_state_dict`` with the segment's state, unless ``version`` is loaded already."""
        if version == self.loaded_version:
            return
        state = load_state(self._layout, self._base)
        modes = state.pop(TRAINING_MODES_KEY, None)
        policy.load_state_dict(state)
        if modes is not None:
            for module, training in zip(policy.modules(), modes.tolist()):
                module.training = training
        self.loaded_version = version

    def release(self) -> None:
        self._base = None
        release_segment(self._segment, owner=False)


def load_state(layout: StateLayout, base: np.ndarray) -> dict[str, Any]:
    """The state dict laid out in ``base`` (views: ``load_state_dict`` copies from them)."""
    state: dict[str, Any] = {}
    for entry in layout.entries:
        raw = base[entry.offset : entry.offset + entry.nbytes]
        if entry.kind == "torch":
            import torch

            state[entry.key] = torch.from_numpy(raw).view(getattr(torch, entry.dtype)).reshape(entry.shape)
        else:
            state[entry.key] = raw.view(np.dtype(entry.dtype)).reshape(entry.shape)
    return state
