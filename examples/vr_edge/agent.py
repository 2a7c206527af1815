"""The PPO actor-critic for `SyntheticVREdgeEnv`, and the adapter that lets it drive a collector.

The action space is `MultiDiscrete([num_levels] * num_users)`: one categorical choice per user,
independent given the observation, so the joint log-probability and entropy of an action are
sums over the users present (an empty slot's level changes nothing, so it carries no credit).
User slots are interchangeable, so the actor is one small head shared by all of them: it scores
a user's levels from that user's block of the observation (with its last level one-hot and its
throughput history also in log space) together with the mean and the maximum of all users'
blocks (how loaded the shared cell and GPU look) and the shared features.
Sharing lets every step teach the head `num_users` examples at once, which is what makes
training fit in minutes. The critic is a separate MLP over the whole observation, so the value
loss does not pull on the policy's features.
"""

from __future__ import annotations

import ctypes
import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical

from examples.vr_edge.synthetic_env import THROUGHPUT_HISTORY_LEN, SyntheticVREdgeEnv
from parallel_rollouts import PolicyOutput

__all__ = ["MKL_CODE_PATHS", "ActorCritic", "CollectorPolicy", "load_agent", "pin_mkl_code_path", "save_agent", "seed_torch"]

#: `default`: MKL picks its kernels by CPU model, so the same run can round differently on another
#: CPU; `compatible`: MKL's conditional-numerical-reproducibility branch of SSE2 kernels, the same
#: on every x86-64 CPU (for one PyTorch build), at some speed on large matrices (these are small).
MKL_CODE_PATHS = ("default", "compatible")
# mkl_service.h: MKL_CBWR_BRANCH, MKL_CBWR_COMPATIBLE, MKL_CBWR_SUCCESS.
_MKL_CBWR_BRANCH, _MKL_CBWR_COMPATIBLE, _MKL_CBWR_SUCCESS = 1, 3, 0


def seed_torch(seed: int) -> None:
    """Make every torch (and Python `random`) draw in this process follow from `seed`.

    Deterministic kernels are requested so that the same seed and the same batches give the
    same weights bit for bit; one intra-op thread keeps reductions in a fixed order and leaves
    the other cores to the environments.
    """
    random.seed(seed)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)


def pin_mkl_code_path(code_path: str) -> None:
    """Pin the kernels MKL runs torch's matrix products with (`MKL_CODE_PATHS`), before any has run.

    Raises `RuntimeError` when `compatible` cannot be set: a PyTorch build without MKL, or a
    process in which MKL already ran (set `MKL_CBWR=COMPATIBLE` in its environment instead).
    """
    if code_path not in MKL_CODE_PATHS:
        raise ValueError(f"`code_path` must be one of {MKL_CODE_PATHS}; got {code_path!r}.")
    if code_path == "default":
        return
    library = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"
    try:
        mkl = ctypes.CDLL(str(library))
        get, set_ = mkl.mkl_serv_cbwr_get, mkl.mkl_serv_cbwr_set
    except (OSError, AttributeError) as error:
        raise RuntimeError(f"MKL's code path cannot be pinned: this PyTorch build has no MKL ({error}).") from None
    if get(_MKL_CBWR_BRANCH) == _MKL_CBWR_COMPATIBLE:
        return
    status = set_(_MKL_CBWR_COMPATIBLE)
    if status != _MKL_CBWR_SUCCESS:
        raise RuntimeError(
            f"MKL's code path cannot be pinned in this process (mkl_cbwr_set returned {status}: MKL has "
            "already run here); start the process with MKL_CBWR=COMPATIBLE in its environment."
        )


def _layer(in_features: int, out_features: int, gain: float) -> nn.Linear:
    # Orthogonal weights keep activations at a stable scale through the tanh layers; a small
    # gain on the actor's output makes the first policy close to uniform over levels.
    layer = nn.Linear(in_features, out_features)
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


def _mlp(in_features: int, hidden_size: int, out_features: int, output_gain: float) -> nn.Sequential:
    hidden_gain = math.sqrt(2.0)
    return nn.Sequential(
        _layer(in_features, hidden_size, hidden_gain),
        nn.Tanh(),
        _layer(hidden_size, hidden_size, hidden_gain),
        nn.Tanh(),
        _layer(hidden_size, out_features, output_gain),
    )


class ActorCritic(nn.Module):
    """A per-user actor head shared by all users, and a critic over the whole observation.

    The flat observation must be laid out as `num_users` blocks of `per_user_features`
    followed by `shared_features` features common to all users (the layout of
    `SyntheticVREdgeEnv`; `for_env` reads the sizes from an env). Both networks are two
    tanh layers of `hidden_size` units. `last_level_feature` (an index in a user's block) adds
    that user's last level one-hot to its head's input, `log_features` (a `(start, stop)` range
    of the block) adds those features in log space.
    """

    def __init__(
        self,
        num_users: int,
        per_user_features: int,
        shared_features: int,
        num_levels: int,
        hidden_size: int = 64,
        last_level_feature: int | None = None,
        log_features: tuple[int, int] | None = None,
    ) -> None:
        super().__init__()
        for name, value, minimum in (
            ("num_users", num_users, 1),
            ("per_user_features", per_user_features, 1),
            ("shared_features", shared_features, 0),
            ("num_levels", num_levels, 2),
            ("hidden_size", hidden_size, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f"`{name}` must be an int >= {minimum}; got {value!r}.")
        if last_level_feature is not None and not 0 <= last_level_feature < per_user_features:
            raise ValueError(
                f"`last_level_feature` must index a per-user feature (0..{per_user_features - 1}); "
                f"got {last_level_feature!r}."
            )
        if log_features is not None:
            log_features = tuple(int(index) for index in log_features)
            if len(log_features) != 2 or not 0 <= log_features[0] < log_features[1] <= per_user_features:
                raise ValueError(
                    f"`log_features` must be a (start, stop) range of per-user features within "
                    f"0..{per_user_features}; got {log_features!r}."
                )
        self.constructor_args = {
            "num_users": num_users,
            "per_user_features": per_user_features,
            "shared_features": shared_features,
            "num_levels": num_levels,
            "hidden_size": hidden_size,
            "last_level_feature": last_level_feature,
            "log_features": log_features,
        }
        self.last_level_feature = last_level_feature
        self.num_users = num_users
        self.per_user_features = per_user_features
        self.num_levels = num_levels
        self.observation_size = num_users * per_user_features + shared_features
        # The level a user streamed at last is also fed one-hot: holding it or stepping to a
        # neighbour is then a simple function of the input, as it is for a feedback rule.
        one_hot_size = 0 if last_level_feature is None else num_levels
        # The measured throughput history is also fed in log space: a trend or a dip is then a
        # difference of inputs, whatever the user's rate.
        self.log_features = log_features
        log_size = 0 if log_features is None else log_features[1] - log_features[0]
        actor_inputs = 3 * per_user_features + shared_features + one_hot_size + log_size
        self.actor = _mlp(actor_inputs, hidden_size, num_levels, output_gain=0.01)
        self.critic = _mlp(self.observation_size, hidden_size, 1, output_gain=1.0)

    @classmethod
    def for_env(cls, env: SyntheticVREdgeEnv, hidden_size: int = 64) -> ActorCritic:
        """An agent sized for `env`'s observation layout and bitrate ladder."""
        layout = env.observation_layout
        return cls(
            num_users=layout.num_users,
            per_user_features=layout.per_user_features,
            shared_features=layout.shared_features,
            num_levels=layout.num_levels,
            hidden_size=hidden_size,
            last_level_feature=layout.feature("last_level"),
            log_features=(
                layout.feature(f"throughput_{THROUGHPUT_HISTORY_LEN}"), layout.feature("throughput_1") + 1
            ),
        )

    def value(self, observations: torch.Tensor) -> torch.Tensor:
        """State values `[batch]` of observations `[batch, observation_size]`."""
        self._check_observations(observations)
        return self.critic(observations).squeeze(-1)

    def _check_observations(self, observations: torch.Tensor) -> None:
        if observations.ndim != 2 or observations.shape[1] != self.observation_size:
            raise ValueError(
                f"expected observations of shape [batch, {self.observation_size}] "
                f"({self.num_users} users); got {tuple(observations.shape)!r}."
            )

    def _distribution(self, observations: torch.Tensor) -> tuple[Categorical, torch.Tensor]:
        """Per-user level distributions and the `[batch, num_users]` float mask of users present."""
        self._check_observations(observations)
        batch_size = observations.shape[0]
        split = self.num_users * self.per_user_features
        users = observations[:, :split].reshape(batch_size, self.num_users, self.per_user_features)
        # The first feature of a user's block is 1 for a user present, 0 for an empty slot.
        present = (users[..., 0] > 0.5).float()
        mean_users = users.mean(dim=1, keepdim=True).expand(-1, self.num_users, -1)
        max_users = users.max(dim=1, keepdim=True).values.expand(-1, self.num_users, -1)
        shared = observations[:, split:].unsqueeze(1).expand(-1, self.num_users, -1)
        inputs = [users, mean_users, max_users, shared]
        if self.last_level_feature is not None:
            last_level = (users[..., self.last_level_feature] * (self.num_levels - 1)).round().long()
            inputs.append(torch.nn.functional.one_hot(last_level.clamp(0, self.num_levels - 1), self.num_levels).float())
        if self.log_features is not None:
            start, stop = self.log_features
            # log(x + 0.01) / 3 maps the scaled throughputs (0 to a few) to about [-1.5, 0.5].
            inputs.append(torch.log(users[..., start:stop] + 0.01) * (1.0 / 3.0))
        logits = self.actor(torch.cat(inputs, dim=-1))
        return Categorical(logits=logits), present

    def act(
        self, observations: torch.Tensor, deterministic: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Choose actions for `[batch, observation_size]` observations.

        Returns `(actions [batch, num_users] int64, log_probs [batch], values [batch])`.
        With `deterministic`, every user takes its most probable level (for evaluation);
        otherwise levels are sampled from torch's global generator.
        """
        distribution, present = self._distribution(observations)
        if deterministic:
            actions = distribution.logits.argmax(dim=-1)
        else:
            actions = distribution.sample()
        log_probs = (distribution.log_prob(actions) * present).sum(dim=-1)
        return actions, log_probs, self.value(observations)

    def evaluate(
        self, observations: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Score stored `actions [batch, num_users]` under the current weights.

        Returns `(log_probs [batch], entropy [batch], values [batch])`, log-probability and
        entropy summed over the users present.
        """
        distribution, present = self._distribution(observations)
        log_probs = (distribution.log_prob(actions.long()) * present).sum(dim=-1)
        entropy = (distribution.entropy() * present).sum(dim=-1)
        return log_probs, entropy, self.value(observations)


class CollectorPolicy:
    """Makes an `ActorCritic` a collector policy: NumPy observations in, `PolicyOutput` out.

    Runs without autograd, since rollout values and log-probabilities are constants to the
    PPO loss. The observations the collector passes are read-only views of its storage; they
    are copied into a tensor, never written to.
    """

    def __init__(self, agent: ActorCritic, deterministic: bool = False) -> None:
        self.agent = agent
        self.deterministic = deterministic

    # Only `backend="async"` with `policy_placement="workers"` uses these: on each collect its
    # workers load the weights (and the modules' training flags) from shared memory, while plain
    # attributes such as `deterministic` stay as the workers first unpickled them. The Ray
    # backend ignores them: it pickles the whole policy and, while nothing but the weights has
    # changed since the last collect, sends only the weights' storages to its actors.
    def state_dict(self) -> dict[str, Any]:
        return self.agent.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.agent.load_state_dict(state_dict)

    def __call__(self, observations: np.ndarray) -> PolicyOutput:
        with torch.no_grad():
            observation_tensor = torch.tensor(observations, dtype=torch.float32)
            actions, log_probs, values = self.agent.act(observation_tensor, self.deterministic)
        return PolicyOutput(actions, values=values, log_probs=log_probs)


def save_agent(agent: ActorCritic, path: str | Path, **extra: Any) -> None:
    """Write the weights, the constructor arguments that rebuild the network, and `extra`."""
    checkpoint = {"constructor_args": dict(agent.constructor_args), "state_dict": agent.state_dict(), **extra}
    torch.save(checkpoint, path)


def load_agent(path: str | Path) -> tuple[ActorCritic, dict[str, Any]]:
    """Rebuild the agent saved by `save_agent`; return it (in eval mode) and the whole checkpoint."""
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(checkpoint, dict) or not {"constructor_args", "state_dict"} <= checkpoint.keys():
        raise ValueError(
            f"{str(path)!r} is not a policy checkpoint written by `save_agent`: expected a dict "
            "with 'constructor_args' and 'state_dict'."
        )
    agent = ActorCritic(**checkpoint["constructor_args"])
    agent.load_state_dict(checkpoint["state_dict"])
    agent.eval()
    return agent, checkpoint
