"""Keeping remote copies of a policy equal to the driver's, sending as little as possible.

A policy's behaviour depends on more than its weights: a PyTorch module's
``training`` flag (dropout, batch norm), attributes such as a ``deterministic``
switch or an exploration rate, whole sub-objects swapped in. Sending only a
``state_dict`` misses all of those, silently. So the policy is pickled whole,
with one split: the bytes of PyTorch storages (the weights) travel on their
own, and everything else (the *skeleton*: structure, attributes, modes, tensor
shapes) is compared with what was sent last time.

- Skeleton unchanged: only the storages travel, and each replica copies them
  into the storages its policy already views. State the replica's policy keeps
  on its own (a random generator, a step counter) carries on.
- Skeleton changed (any attribute, mode or shape differs from the last one
  sent): the whole policy travels and replaces each replica's copy.

So after every :func:`PolicyShipper.snapshot` a replica behaves as the driver's
policy did when the snapshot was taken, except for state the policy changes in
itself while it runs, which each replica keeps until the driver's skeleton
changes.
"""

from __future__ import annotations

import io
import pickle
import sys
from dataclasses import dataclass
from typing import Any

import cloudpickle

from ..errors import ConfigurationError

__all__ = ["PolicyReplica", "PolicyShipper", "PolicySnapshot"]


@dataclass(frozen=True)
class PolicySnapshot:
    """What travels: the skeleton when it changed (else ``None``), and every storage.

    Each storage travels as a flat ``uint8`` tensor viewing it (PyTorch cannot
    unpickle a bare untyped storage).
    """

    skeleton: bytes | None
    storages: list


def _torch_storage_types() -> tuple[type, ...]:
    # Only look for torch if the policy's process already imported it: a policy
    # holding tensors has, and nothing else needs torch.
    torch = sys.modules.get("torch")
    if torch is None:
        return ()
    return (torch.storage.TypedStorage, torch.UntypedStorage)


class _SkeletonPickler(cloudpickle.CloudPickler):
    """Pickles everything but PyTorch storages, which it collects into ``storages``."""

    def __init__(self, file: io.BytesIO, storage_types: tuple[type, ...]) -> None:
        super().__init__(file)
        self._storage_types = storage_types
        self.storages: list = []
        self._index_by_key: dict[int, int] = {}

    def persistent_id(self, obj: Any) -> Any:
        # Called for every object pickled: an exact type test keeps it cheap. (A
        # storage subclass, which tensors never produce, is pickled whole instead.)
        if type(obj) not in self._storage_types:
            return None
        typed = type(obj) is self._storage_types[0]
        untyped = obj._untyped_storage if typed else obj
        # Tensors sharing memory (tied weights, views) share one untyped storage:
        # ship it once so that the replica's tensors share it too.
        key = untyped._cdata
        index = self._index_by_key.get(key)
        if index is None:
            import torch

            index = self._index_by_key[key] = len(self.storages)
            byte_view = torch.empty(0, dtype=torch.uint8, device=untyped.device)
            byte_view.set_(untyped, 0, (untyped.nbytes(),))
            self.storages.append(byte_view)
        # Everything an in-place copy relies on is in the skeleton, so an equal
        # skeleton means the storages line up one for one.
        dtype = obj.dtype if typed else None
        return (index, dtype, untyped.nbytes(), untyped.device.type)


class _SkeletonUnpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, storages: list) -> None:
        super().__init__(file)
        self._storages = storages

    def persistent_load(self, pid: Any) -> Any:
        index, dtype, _, _ = pid
        untyped = self._storages[index].untyped_storage()
        if dtype is None:
            return untyped
        import torch

        return torch.storage.TypedStorage(wrap_storage=untyped, dtype=dtype, _internal=True)


class PolicyShipper:
    """Driver side: turns the current policy into the smallest :class:`PolicySnapshot`."""

    def __init__(self, policy: Any, destination: str) -> None:
        """``destination`` starts the error message, e.g. "backend='ray' ships the policy to every actor"."""
        self._policy = policy
        self._destination = destination
        self._sent_skeleton: bytes | None = None

    def _pickle(self) -> tuple[bytes, list]:
        buffer = io.BytesIO()
        pickler = _SkeletonPickler(buffer, _torch_storage_types())
        try:
            pickler.dump(self._policy)
        except Exception as error:
            raise ConfigurationError(
                f"{self._destination}, but it cannot be serialised "
                f"({type(error).__name__}: {error}). Keep unpicklable state (locks, open files, "
                "sockets, generators) out of the policy, or make it a module or a top-level class."
            ) from error
        return buffer.getvalue(), pickler.storages

    def full(self) -> PolicySnapshot:
        """The whole policy, for new replicas.

        Replicas made earlier may hold an older skeleton, so the next
        :meth:`snapshot` sends the whole policy again.
        """
        skeleton, storages = self._pickle()
        self._sent_skeleton = None
        return PolicySnapshot(skeleton, storages)

    def snapshot(self) -> PolicySnapshot:
        """What every replica needs to match the policy now; records it as sent."""
        skeleton, storages = self._pickle()
        if skeleton == self._sent_skeleton:
            return PolicySnapshot(None, storages)
        self._sent_skeleton = skeleton
        return PolicySnapshot(skeleton, storages)


class PolicyReplica:
    """Remote side: holds the copy of the policy and applies snapshots to it."""

    def __init__(self, snapshot: PolicySnapshot) -> None:
        self.policy: Any = None
        self._storages: list = []
        self.apply(snapshot)

    def apply(self, snapshot: PolicySnapshot) -> None:
        if snapshot.skeleton is not None:
            self.policy = _SkeletonUnpickler(io.BytesIO(snapshot.skeleton), snapshot.storages).load()
            self._storages = snapshot.storages
            return
        for kept, new in zip(self._storages, snapshot.storages, strict=True):
            kept.untyped_storage().copy_(new.untyped_storage())
