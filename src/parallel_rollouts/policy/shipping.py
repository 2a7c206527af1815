"""Keeping the remote copies of a policy equal to this process's, sending only what changed.

Rollout workers (``policy_placement="workers"``) and Ray actors both run a copy of the
policy; this module is the one way those copies follow the policy here. At every
``collect()`` a copy is brought to the policy's state as it is at that moment, whatever
the policy is: a module, a function closing over modules, an object holding one, plain
attributes, persistent and non-persistent buffers, each submodule's ``training`` flag.

The policy is pickled whole (with cloudpickle), with two kinds of objects set aside:

- the bytes of every PyTorch storage (weights, buffers), compared with the bytes last
  sent; only storages whose bytes differ travel, and a copy writes them into the storages
  its policy already views;
- its random generators, which travel as placeholders and are filled in by each copy
  with generators of its own (:mod:`~parallel_rollouts.policy.generators`).

The rest, the *skeleton* (structure, attributes, modes, shapes, NumPy arrays), travels
only when it differs from the one last sent; a copy then rebuilds its policy from it
(around the storages it holds). Unchanged, a collect costs one pickling of the skeleton
and one comparison of the storages' bytes; nothing but a few bytes travels.

State the remote copy changes in itself while it runs (a call counter, a statistic it
updates in place) stays with that copy until this process changes the same part:
comparisons are against what was last sent, not against what a copy holds now.

A function that cloudpickle pickles by reference (one defined at the top level of an
importable module) is imported afresh by each worker, module globals and all: what it
reads from those globals is never this process's. :class:`PolicyShipper` warns of that,
once, with :class:`~parallel_rollouts.errors.StalePolicyWarning`.
"""

from __future__ import annotations

import io
import pickle
import sys
import types
import warnings
from dataclasses import dataclass, field
from typing import Any

import cloudpickle
import numpy as np

from ..errors import ConfigurationError, PolicyTransferError, StalePolicyWarning
from .generators import HeldGenerators, ProcessGenerators, generator_kinds

__all__ = ["PolicyReplica", "PolicyShipper", "PolicySnapshot"]

_STORAGE, _GENERATOR = "storage", "generator"


@dataclass(frozen=True)
class PolicySnapshot:
    """What travels to every copy at one collect.

    ``skeleton`` is ``None`` when it did not change. ``storages`` maps the index of each
    storage whose bytes changed to a flat ``uint8`` tensor holding them (PyTorch cannot
    unpickle a bare untyped storage); ``storage_count`` is how many storages the policy has.
    """

    skeleton: bytes | None
    storage_count: int
    storages: dict[int, Any] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return self.skeleton is None and not self.storages


def _torch_storage_types() -> tuple[type, ...]:
    # Only look for torch if the policy's process already imported it: a policy
    # holding tensors has, and nothing else needs torch.
    torch = sys.modules.get("torch")
    if torch is None:
        return ()
    return (torch.storage.TypedStorage, torch.UntypedStorage)


class _SkeletonPickler(cloudpickle.CloudPickler):
    """Pickles everything but PyTorch storages and random generators, which it sets aside."""

    def __init__(self, file: io.BytesIO, destination: str, cpu_only: bool) -> None:
        super().__init__(file)
        self._destination = destination
        self._cpu_only = cpu_only
        storage_types = _torch_storage_types()
        self._typed_storage = storage_types[0] if storage_types else None
        # One dict lookup per pickled object: exact types only.
        self._special = {storage_type: self._storage_id for storage_type in storage_types}
        self._special.update({kind: self._generator_id(describe) for kind, describe in generator_kinds().items()})
        torch = sys.modules.get("torch")
        if cpu_only and torch is not None:
            # A tensor on the meta device (or any device without storage) pickles without one,
            # so the storage check below never sees it: check the tensors themselves.
            for tensor_type in (torch.Tensor, torch.nn.Parameter):
                self._special[tensor_type] = self._refuse_off_cpu
        self.storages: list = []
        self._storage_index: dict[int, int] = {}
        self._generator_index: dict[int, int] = {}

    def persistent_id(self, obj: Any) -> Any:
        special = self._special.get(type(obj))
        return None if special is None else special(obj)

    def _generator_id(self, describe):
        def generator_id(generator: Any) -> Any:
            kind = describe(generator)
            if kind is None:
                return None
            # One generator referred to twice is one generator in the copy too.
            place = self._generator_index.setdefault(id(generator), len(self._generator_index))
            return (_GENERATOR, place, kind)

        return generator_id

    def _refuse_off_cpu(self, tensor: Any) -> None:
        """``None`` (pickle the tensor as usual) for a CPU tensor; refuse any other device."""
        self._require_cpu(tensor.device)
        return None

    def _require_cpu(self, device: Any) -> None:
        if device.type != "cpu":
            raise ConfigurationError(
                f"{self._destination} to run it on their CPUs, but it holds a tensor on {device}"
                + (" (a meta tensor holds no data to run with)" if device.type == "meta" else "")
                + ". Keep a GPU policy in the main process (policy_placement='main'), or move it to the CPU "
                "(`policy.to('cpu')`; materialize meta tensors first, e.g. `module.to_empty(device='cpu')` and load "
                "the weights)."
            )

    def _storage_id(self, storage: Any) -> Any:
        typed = type(storage) is self._typed_storage
        untyped = storage._untyped_storage if typed else storage
        if self._cpu_only:
            self._require_cpu(untyped.device)
        # Tensors sharing memory (tied weights, views) share one untyped storage:
        # ship it once so that the copy's tensors share it too.
        index = self._storage_index.get(untyped._cdata)
        if index is None:
            import torch

            index = self._storage_index[untyped._cdata] = len(self.storages)
            byte_view = torch.empty(0, dtype=torch.uint8, device=untyped.device)
            byte_view.set_(untyped, 0, (untyped.nbytes(),))
            self.storages.append(byte_view)
        # Everything an in-place copy relies on is in the skeleton, so an equal
        # skeleton means the storages line up one for one.
        dtype = storage.dtype if typed else None
        return (_STORAGE, index, dtype, untyped.nbytes(), untyped.device.type)


class _SkeletonUnpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, storages: list, generators: HeldGenerators) -> None:
        super().__init__(file)
        self._storages = storages
        self._generators = generators

    def persistent_load(self, pid: Any) -> Any:
        if pid[0] == _GENERATOR:
            return self._generators.get(pid[1], pid[2])
        _, index, dtype, _, _ = pid
        untyped = self._storages[index].untyped_storage()
        if dtype is None:
            return untyped
        import torch

        return torch.storage.TypedStorage(wrap_storage=untyped, dtype=dtype, _internal=True)


def _same_bytes(first: Any, second: Any) -> bool:
    if first.device.type != "cpu":
        import torch

        return bool(torch.equal(first, second))
    first, second = first.numpy(), second.numpy()
    if first.size % 8 == 0:
        # Eight bytes at a time: the comparison runs at memory speed.
        first, second = first.view(np.uint64), second.view(np.uint64)
    return bool(np.array_equal(first, second))


def _name(policy: Any) -> str:
    name = getattr(policy, "__qualname__", None) or type(policy).__qualname__
    return f"{getattr(policy, '__module__', '?')}.{name}"


def pickled_by_reference(policy: Any) -> bool:
    """Whether cloudpickle sends ``policy`` as a name to import rather than by value."""
    if not isinstance(policy, types.FunctionType):
        return False
    module = sys.modules.get(policy.__module__)
    if policy.__module__ == "__main__" or module is None or module in cloudpickle.list_registry_pickle_by_value():
        return False
    found: Any = module
    for part in policy.__qualname__.split("."):
        found = getattr(found, part, None)
    return found is policy


class PolicyShipper:
    """This process's side: turns the policy's current state into the smallest :class:`PolicySnapshot`.

    Every copy is at the same state, the one last sent: :meth:`snapshot` moves them
    all on together, :meth:`resend` gives a new copy that state whole, and
    :meth:`forget` makes the next snapshot whole after a copy failed to apply one.
    """

    def __init__(self, policy: Any, destination: str, cpu_only: bool = False) -> None:
        """``destination`` starts the error messages, e.g. "policy_placement='workers' sends the policy to every worker"."""
        self._policy = policy
        self._destination = destination
        self._cpu_only = cpu_only
        self._sent_skeleton: bytes | None = None
        self._sent_storages: list = []
        if pickled_by_reference(policy):
            warnings.warn(
                f"the policy {_name(policy)} is a function that cloudpickle sends by name: {destination}, each of "
                "which imports that module afresh, so what the function reads from the module's globals (a network "
                "updated here, an exploration rate) is never this process's. Pass an object that holds what the "
                "policy uses (a module, or a closure over it), or register the module with "
                "cloudpickle.register_pickle_by_value.",
                StalePolicyWarning,
                stacklevel=4,
            )

    def _pickle(self) -> tuple[bytes, list]:
        buffer = io.BytesIO()
        pickler = _SkeletonPickler(buffer, self._destination, self._cpu_only)
        try:
            pickler.dump(self._policy)
        except ConfigurationError:
            raise
        except Exception as error:
            raise ConfigurationError(
                f"{self._destination}, but it cannot be serialised "
                f"({type(error).__name__}: {error}). Keep unpicklable state (locks, open files, "
                "sockets, generators) out of the policy, or make it a module or a top-level class."
            ) from error
        return buffer.getvalue(), pickler.storages

    def snapshot(self) -> PolicySnapshot:
        """What every copy needs to match the policy now; recorded as sent."""
        skeleton, storages = self._pickle()
        sent = self._sent_storages
        lined_up = len(storages) == len(sent) and all(
            now.numel() == before.numel() and now.device == before.device for now, before in zip(storages, sent)
        )
        changed = {
            index: storage.clone()
            for index, storage in enumerate(storages)
            if not (lined_up and _same_bytes(storage, sent[index]))
        }
        self._sent_storages = [changed.get(index, before) for index, before in enumerate(sent)] if lined_up else [
            changed[index] for index in range(len(storages))
        ]
        new_skeleton = None if skeleton == self._sent_skeleton else skeleton
        self._sent_skeleton = skeleton
        return PolicySnapshot(new_skeleton, len(storages), changed)

    def resend(self) -> PolicySnapshot:
        """The state every copy is at, whole: for a copy made after the others."""
        if self._sent_skeleton is None:
            return self.snapshot()
        return PolicySnapshot(self._sent_skeleton, len(self._sent_storages), dict(enumerate(self._sent_storages)))

    def forget(self) -> None:
        """Some copy may not be at the recorded state: send everything next time."""
        self._sent_skeleton = None
        self._sent_storages = []


class PolicyReplica:
    """A worker's or actor's side: holds its copy of the policy and applies snapshots to it.

    ``first_env`` (the first env of this copy's slice) and ``root_seed`` seed the copy's
    random generators and this process's shared ones.
    """

    def __init__(self, root_seed: int, first_env: int) -> None:
        self.policy: Any = None
        self._storages: list = []
        self._generators = HeldGenerators(root_seed, first_env)
        self._process_generators = ProcessGenerators(root_seed, first_env)

    def apply(self, snapshot: PolicySnapshot | None) -> None:
        """Bring the copy to ``snapshot`` (``None``: nothing changed); raises
        :class:`PolicyTransferError` if it cannot be rebuilt here (the copy is then unchanged)."""
        if snapshot is not None and not snapshot.empty:
            self._apply(snapshot)
        self._process_generators.seed_unseeded()

    def _apply(self, snapshot: PolicySnapshot) -> None:
        storages = self._storages[: snapshot.storage_count]
        for index, new in sorted(snapshot.storages.items()):
            if index < len(storages) and storages[index].numel() == new.numel() and storages[index].device == new.device:
                # In place: the tensors of the policy as it stands view these storages.
                storages[index].untyped_storage().copy_(new.untyped_storage())
            elif index < len(storages):
                storages[index] = new
            else:
                storages.append(new)
        if snapshot.skeleton is not None:
            try:
                policy = _SkeletonUnpickler(io.BytesIO(snapshot.skeleton), storages, self._generators).load()
            except Exception as error:
                self._generators.discard()
                raise PolicyTransferError(
                    f"the policy sent for this collect could not be rebuilt here ({type(error).__name__}: {error}); "
                    "the rollout was not run. Check that everything the policy refers to can be imported in the "
                    "worker (its classes, the modules its functions use)."
                ) from error
            self._generators.commit()
            self.policy = policy
        self._storages = storages
