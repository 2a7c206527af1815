"""CleanRL's PPO agents, as its ``ppo.py`` (an MLP actor and critic) and ``ppo_atari.py`` (the
Nature CNN trunk) define them, and the envs the PPO comparisons train on.

Shared by the recipe (:mod:`examples.ppo_recipe.train`) and the hand-written CleanRL loop it
is measured against (:mod:`.cleanrl_loop`), so that the two differ only in how they
collect."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.distributions.categorical import Categorical

__all__ = ["Agent", "PPOArgs", "make_env", "ppo_update"]


@dataclass
class PPOArgs:
    """CleanRL's PPO hyper-parameters for CartPole, shared by its loop and the recipe."""

    learning_rate: float = 2.5e-4
    """Adam's step size, annealed to 0."""
    num_envs: int = 4
    """Envs stepped side by side."""
    num_steps: int = 128
    """Steps per env per iteration."""
    gamma: float = 0.99
    """Discount."""
    gae_lambda: float = 0.95
    """GAE's mixing factor."""
    num_minibatches: int = 4
    """Minibatches per epoch."""
    update_epochs: int = 4
    """Passes over each batch."""
    norm_adv: bool = True
    """Normalise advantages per minibatch."""
    clip_coef: float = 0.2
    """PPO's ratio clip."""
    clip_vloss: bool = True
    """Clip the value loss."""
    ent_coef: float = 0.01
    """Entropy bonus."""
    vf_coef: float = 0.5
    """Value loss weight."""
    max_grad_norm: float = 0.5
    """Gradient clipping."""


def make_env(env_id: str):
    """A picklable factory of one env: a Gymnasium id with discrete actions, ``frames``
    (84x84x4 uint8 frames at almost no simulation cost) or ``half_ms`` (a ~0.5 ms step);
    wrapped in ``RecordEpisodeStatistics`` as CleanRL wraps its envs."""
    if env_id == "frames":
        from benchmarks.envs import FrameImageEnv

        return partial(_recorded, FrameImageEnv, episode_length=100)
    if env_id == "half_ms":
        from benchmarks.envs import HalfMillisecondEnv

        return partial(_recorded, HalfMillisecondEnv, episode_length=200)
    return partial(_recorded, gym.make, env_id)


def _recorded(make, *args, **kwargs) -> gym.Env:
    return gym.wrappers.RecordEpisodeStatistics(make(*args, **kwargs))


def layer_init(layer: nn.Module, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Module:
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    """CleanRL's agent: for vector observations an actor and a critic of 64-64 tanh layers
    (``ppo.py``); for ``HxWxC`` uint8 frames the Nature CNN trunk shared by both heads
    (``ppo_atari.py``)."""

    def __init__(self, observation_shape: tuple[int, ...], num_actions: int) -> None:
        super().__init__()
        self.frames = len(observation_shape) == 3
        if self.frames:
            channels = observation_shape[2]
            self.network = nn.Sequential(
                layer_init(nn.Conv2d(channels, 32, 8, stride=4)), nn.ReLU(),
                layer_init(nn.Conv2d(32, 64, 4, stride=2)), nn.ReLU(),
                layer_init(nn.Conv2d(64, 64, 3, stride=1)), nn.ReLU(),
                nn.Flatten(),
                layer_init(nn.Linear(64 * 7 * 7, 512)), nn.ReLU(),
            )
            self.actor = layer_init(nn.Linear(512, num_actions), std=0.01)
            self.critic = layer_init(nn.Linear(512, 1), std=1)
        else:
            size = int(np.prod(observation_shape))
            self.critic = nn.Sequential(
                layer_init(nn.Linear(size, 64)), nn.Tanh(),
                layer_init(nn.Linear(64, 64)), nn.Tanh(),
                layer_init(nn.Linear(64, 1), std=1.0),
            )
            self.actor = nn.Sequential(
                layer_init(nn.Linear(size, 64)), nn.Tanh(),
                layer_init(nn.Linear(64, 64)), nn.Tanh(),
                layer_init(nn.Linear(64, num_actions), std=0.01),
            )

    def heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(actor input, critic input)``: the shared trunk's features for frames."""
        if self.frames:
            hidden = self.network(x.permute(0, 3, 1, 2) / 255.0)
            return hidden, hidden
        return x, x

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(self.heads(x)[1])

    def get_action_and_value(self, x: torch.Tensor, action: torch.Tensor | None = None):
        actor_input, critic_input = self.heads(x)
        logits = self.actor(actor_input)
        probs = Categorical(logits=logits)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(critic_input)


def ppo_update(agent: Agent, optimizer: torch.optim.Optimizer, args, b_obs, b_logprobs, b_actions, b_advantages, b_returns, b_values) -> float:
    """CleanRL's optimisation phase, unchanged: ``args.update_epochs`` passes of
    ``args.num_minibatches`` minibatches (flat ``[T * N, ...]`` tensors in); the last
    approximate KL."""
    batch_size = b_obs.shape[0]
    minibatch_size = batch_size // args.num_minibatches
    b_inds = np.arange(batch_size)
    approx_kl = torch.zeros(())
    for _ in range(args.update_epochs):
        np.random.shuffle(b_inds)
        for start in range(0, batch_size, minibatch_size):
            mb_inds = b_inds[start : start + minibatch_size]
            _, newlogprob, entropy, newvalue = agent.get_action_and_value(b_obs[mb_inds], b_actions.long()[mb_inds])
            logratio = newlogprob - b_logprobs[mb_inds]
            ratio = logratio.exp()
            with torch.no_grad():
                approx_kl = ((ratio - 1) - logratio).mean()
            mb_advantages = b_advantages[mb_inds]
            if args.norm_adv:
                mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)
            pg_loss1 = -mb_advantages * ratio
            pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
            pg_loss = torch.max(pg_loss1, pg_loss2).mean()
            newvalue = newvalue.view(-1)
            if args.clip_vloss:
                v_loss_unclipped = (newvalue - b_returns[mb_inds]) ** 2
                v_clipped = b_values[mb_inds] + torch.clamp(newvalue - b_values[mb_inds], -args.clip_coef, args.clip_coef)
                v_loss = 0.5 * torch.max(v_loss_unclipped, (v_clipped - b_returns[mb_inds]) ** 2).mean()
            else:
                v_loss = 0.5 * ((newvalue - b_returns[mb_inds]) ** 2).mean()
            loss = pg_loss - args.ent_coef * entropy.mean() + v_loss * args.vf_coef
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
            optimizer.step()
    return float(approx_kl)
