"""Generalised advantage estimation that tells truncated episodes from terminated ones."""

from __future__ import annotations

import numpy as np

__all__ = ["compute_gae"]


def compute_gae(
    rewards: np.ndarray,
    values: np.ndarray,
    terminations: np.ndarray,
    truncations: np.ndarray,
    final_values: np.ndarray,
    bootstrap_values: np.ndarray,
    gamma: float,
    gae_lambda: float,
) -> tuple[np.ndarray, np.ndarray]:
    r"""Advantages and value targets of one rollout, `[T, N]` arrays in, float64 out.

    For the step at `[t, n]` (index `n` dropped below), the value of what follows it is

    .. math::

        v'_t = \begin{cases}
            0                  & \text{terminated}_t \text{ (a terminal state is worth nothing)} \\
            \text{final}_t     & \text{truncated}_t \text{ (the episode was cut, not finished)} \\
            V_{t+1}            & t < T - 1 \\
            \text{bootstrap}   & t = T - 1
        \end{cases}

    and, with :math:`d_t` = terminated or truncated,

    .. math::

        \delta_t = r_t + \gamma v'_t - V_t, \qquad
        A_t = \delta_t + \gamma \lambda (1 - d_t) A_{t+1}, \qquad A_T = 0.

    The :math:`(1 - d_t)` factor stops the recursion at every episode end, so no advantage
    leaks from the next episode (whose first observation is `observations[t + 1]`) into this
    one. A truncated episode still gets credit for the state it was cut off in through
    `final_values`, the value of that final observation; treating truncation as termination
    would instead teach the critic that time limits are disasters. Past the last row, the
    unfinished episodes are bootstrapped from `bootstrap_values`, the value of the observation
    the next rollout starts from. The value targets are `returns = advantages + values`.

    Parameters
    ----------
    rewards, values:
        `[T, N]` rewards and the critic's values of the observations the actions were taken in.
    terminations, truncations:
        `[T, N]` bool episode ends (`RolloutBatch.terminations` / `.truncations`). A step
        marked both counts as terminated.
    final_values:
        `[T, N]` values of `RolloutBatch.final_observations`; read only where `truncations`
        is true, so entries elsewhere may hold anything (zeros, typically).
    bootstrap_values:
        `[N]` values of `RolloutBatch.bootstrap_observations`.
    gamma, gae_lambda:
        Discount and GAE mixing factor, each in `[0, 1]`.

    Returns
    -------
    advantages, returns:
        `[T, N]` float64 each.

    Raises
    ------
    ValueError
        If a shape does not match `rewards`' `[T, N]`, or `gamma` / `gae_lambda` lies
        outside `[0, 1]`.
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    if rewards.ndim != 2:
        raise ValueError(f"`rewards` must be a [T, N] array; got shape {rewards.shape!r}.")
    horizon, num_envs = rewards.shape
    values = _as_shape("values", values, rewards.shape, np.float64)
    terminations = _as_shape("terminations", terminations, rewards.shape, bool)
    truncations = _as_shape("truncations", truncations, rewards.shape, bool)
    final_values = _as_shape("final_values", final_values, rewards.shape, np.float64)
    bootstrap_values = _as_shape("bootstrap_values", bootstrap_values, (num_envs,), np.float64)
    for name, factor in (("gamma", gamma), ("gae_lambda", gae_lambda)):
        if not 0.0 <= factor <= 1.0:
            raise ValueError(f"`{name}` must lie in [0, 1]; got {factor!r}.")

    next_values = np.empty_like(values)
    next_values[:-1] = values[1:]
    next_values[-1] = bootstrap_values
    next_values = np.where(truncations, final_values, next_values)
    next_values = np.where(terminations, 0.0, next_values)
    deltas = rewards + gamma * next_values - values
    continues = ~(terminations | truncations)

    advantages = np.empty_like(values)
    following_advantage = np.zeros(num_envs)
    for t in range(horizon - 1, -1, -1):
        following_advantage = deltas[t] + gamma * gae_lambda * continues[t] * following_advantage
        advantages[t] = following_advantage
    return advantages, advantages + values


def _as_shape(name: str, array: np.ndarray, shape: tuple[int, ...], dtype: type) -> np.ndarray:
    array = np.asarray(array)
    if array.shape != shape:
        raise ValueError(f"`{name}` must have shape {shape!r} to match `rewards`; got {array.shape!r}.")
    return array.astype(dtype, copy=False)
