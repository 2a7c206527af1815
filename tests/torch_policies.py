"""PyTorch policies for the rollout-worker tests (top level: worker processes unpickle them)."""

from __future__ import annotations

import numpy as np
import torch

from parallel_rollouts import PolicyOutput


def _float_tensor(observations) -> torch.Tensor:
    """A float32 tensor of the observations: the collector's read-only NumPy rows are copied, a tensor is converted.

    (``np.array`` of a tensor goes through ``Tensor.__array__``, which NumPy 2 warns about.)
    """
    if isinstance(observations, torch.Tensor):
        return observations.to(torch.float32)
    return torch.from_numpy(np.array(observations, dtype=np.float32))


class MLPPolicy(torch.nn.Module):
    """A small PyTorch MLP policy: greedy action from logits, and a value head."""

    def __init__(self, observation_size: int = 4, num_actions: int = 2, hidden: int = 64):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(observation_size, hidden), torch.nn.Tanh())
        self.logits = torch.nn.Linear(hidden, num_actions)
        self.value = torch.nn.Linear(hidden, 1)

    @torch.no_grad()
    def forward(self, observations):
        hidden = self.body(_float_tensor(observations))
        return PolicyOutput(self.logits(hidden).argmax(dim=1), values=self.value(hidden).squeeze(1))


class ModeReportingPolicy(torch.nn.Module):
    """Action 1 in training mode, 0 in evaluation mode: shows which mode a copy is in."""

    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(1))

    def forward(self, observations):
        return np.full(len(observations), int(self.training), dtype=np.int64)


class ModuleHolder:
    """Holds a module; the action is its bias, rounded."""

    def __init__(self):
        self.network = torch.nn.Linear(1, 1)
        with torch.no_grad():
            self.network.weight.zero_()
            self.network.bias.zero_()

    def __call__(self, observations):
        return np.full(observations.shape[0], int(round(self.network.bias.item())), dtype=np.int64)


class NonPersistentBufferPolicy(torch.nn.Module):
    """The action is a running statistic kept in a non-persistent buffer (not in ``state_dict()``)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("running_mean", torch.zeros(1), persistent=False)

    def forward(self, observations):
        return np.full(observations.shape[0], int(self.running_mean.item()), dtype=np.int64)


class GlobalGeneratorSampler:
    """Samples its actions from PyTorch's global generator (no generator of its own)."""

    def __call__(self, observations):
        return torch.randint(0, 2, (len(observations),)).numpy()


class OwnGeneratorSampler:
    """Samples its actions from a ``torch.Generator`` it holds."""

    def __init__(self, seed: int = 0) -> None:
        self.generator = torch.Generator().manual_seed(seed)

    def __call__(self, observations):
        return torch.randint(0, 2, (len(observations),), generator=self.generator).numpy()
