"""A collector's settings before its envs exist: what every stepper and runner starts from."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gymnasium import Env, Space

from .layout import RolloutLayout

__all__ = ["RolloutSpec"]


@dataclass(frozen=True)
class RolloutSpec:
    """The env factories, seed, horizon, core and checks of a collector.

    The spaces are not known until the envs are made (in this process, in worker
    processes or in Ray actors); whoever makes them calls :meth:`resolve` with what
    they declared and hands the :class:`~parallel_rollouts.config.layout.RolloutLayout` on.
    """

    #: Not compared: two specs are equal when their settings are (a layout sent to another
    #: process carries the settings without the factories).
    env_fns: tuple[Callable[[], Env], ...] = field(compare=False)
    root_seed: int
    horizon: int
    info_keys: tuple[str, ...] = ()
    core_name: str = "compiled"
    observation_check: str = "warn"
    #: ``"every"`` episode reset with its own seed, or only each env's ``"first"``.
    episode_seeds: str = "every"
    #: Store each action with the dtype it was given (the VectorEnv adapter's envs receive
    #: the caller's dtype, as in ``SyncVectorEnv``; see ``typed_actions``).
    typed_actions: bool = False
    #: Store a recurrent policy's state at every row (``batch.states``).
    store_states: bool = False
    #: ``"protected"``, ``"copies"`` or ``"views"``: what the policy is called with (``data.policy_inputs``).
    policy_inputs: str = "protected"
    #: Batches whose memory is kept for recycling: the one the caller holds and the one being
    #: written (2), and with ``max_policy_lag=1`` also the next one, already in flight (3).
    batches_recycled: int = 2
    #: Rollout workers lower their scheduling priority (``WORKER_NICENESS``), so that the learner
    #: running beside them (``max_policy_lag=1``) keeps its core; they take every core it leaves.
    yield_to_learner: bool = False
    #: Async workers host ``group_builder(envs, env_offset, layout)`` instead of the rollout
    #: groups when set (the VectorEnv adapter does); picklable.
    group_builder: Callable | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "env_fns", tuple(self.env_fns))
        object.__setattr__(self, "info_keys", tuple(self.info_keys))

    @property
    def num_factories(self) -> int:
        """Env factories; the batch has more columns when a factory returns a vector env."""
        return len(self.env_fns)

    def resolve(
        self,
        observation_space: Space,
        action_space: Space,
        num_envs: int,
        column_agents: tuple = (),
        column_envs: tuple = (),
    ) -> RolloutLayout:
        """The layout of this collector's rollouts, given env 0's spaces, the env count and the columns' agents."""
        return RolloutLayout(
            self, observation_space=observation_space, action_space=action_space, num_envs=num_envs,
            column_agents=column_agents, column_envs=column_envs,
        )
