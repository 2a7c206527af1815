"""Whether a policy run on the background thread draws from PyTorch's global generator.

With ``max_policy_lag=1`` a per-step runner collects the next batch on a thread of this process
while the learner trains. A policy that samples from PyTorch's global generator (``torch.multinomial``
or ``torch.rand`` without ``generator=``, ``Categorical(...).sample()``, dropout left in train mode)
then draws from it at the same time as the learner (minibatch shuffling, dropout, initialisation):
which numbers each gets depends on how the two threads interleave, so batches no longer follow
from the seeds, and the learner's own stream changes with them.

One batch can be watched without a race: the first one, which ``collect()`` launches and then
waits for, so that nothing else in this process draws while it runs. :class:`GlobalGeneratorWatch`
takes the generator's state before it and compares it after (two copies of a few kilobytes, once
per collector; nothing per step), and warns once if it moved. PyTorch is looked at only when
something has imported it already: it is never imported here.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

from ..errors import GlobalGeneratorWarning

__all__ = ["GLOBAL_GENERATOR_MESSAGE", "GlobalGeneratorWatch"]

GLOBAL_GENERATOR_MESSAGE = (
    "PyTorch's global generator moved while the first batch was collected on the background thread "
    "(max_policy_lag=1) and nothing else ran: the policy (or an env this process steps) draws from it, e.g. "
    "torch.multinomial or torch.rand without `generator=`, Categorical(...).sample(), or dropout in train mode. "
    "From now on it draws while your learner draws from the same generator (minibatch shuffling, dropout), so "
    "which numbers each gets depends on how the two threads interleave: batches no longer follow from the seed, "
    "and the learner's own random stream changes too. Give the policy a generator of its own: "
    "`self.generator = torch.Generator().manual_seed(seed)` and "
    "`torch.multinomial(probs, 1, generator=self.generator)` (docs/training.md, 'Collecting while the learner "
    "trains'). Said once per collector."
)


class GlobalGeneratorWatch:
    """One collector's watch over the first background batch it waits for (see the module)."""

    def __init__(self) -> None:
        #: Whether a batch was watched to its end: the watch is then over.
        self.done = False

    def before(self) -> list | None:
        """The global generators' states now, or ``None`` when there is nothing to watch."""
        torch = sys.modules.get("torch")
        if self.done or torch is None:
            return None
        return _states(torch)

    def after(self, before: list | None, stacklevel: int = 2) -> None:
        """The batch watched since :meth:`before` ended: warn if a generator moved, and stop watching."""
        if before is None:
            return
        self.done = True
        torch = sys.modules["torch"]
        # A CUDA generator first used during the batch has no state before it: compared as far as both go.
        if not all(torch.equal(old, new) for old, new in zip(before, _states(torch))):
            warnings.warn(GLOBAL_GENERATOR_MESSAGE, GlobalGeneratorWarning, stacklevel=stacklevel + 1)


def _states(torch: Any) -> list:
    """The CPU generator's state, and each CUDA device's when CUDA is in use (asking does not start it)."""
    states = [torch.random.get_rng_state()]
    cuda = getattr(torch, "cuda", None)
    if cuda is not None and cuda.is_initialized():
        states.extend(cuda.get_rng_state_all())
    return states
