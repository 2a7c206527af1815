"""The spine of the suite: every backend gives the same batch, bit for bit, for every space kind
(serial against sync for each kind, on both cores; every async placement against sync on the
nested Dict/Tuple spaces, which hold every leaf kind; Ray in tests/test_ray_backend.py)."""

import copy
from functools import partial

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from parallel_rollouts import ParallelRolloutCollector, PolicyOutput
from tests.batch_compare import assert_batches_identical
from tests.envs import ObservationDependentPolicy, SpaceEnv, cartpole

IN_PROCESS = ["serial", "sync"]

SPACE_CASES = {
    "box_float32": (spaces.Box(-2, 2, (3,), np.float32), spaces.Box(-1, 1, (2,), np.float32)),
    "box_image_uint8": (spaces.Box(0, 255, (6, 5, 2), np.uint8), spaces.Discrete(3)),
    "box_float64_int32": (spaces.Box(-5, 5, (2, 2), np.float64), spaces.Box(-3, 3, (2,), np.int32)),
    "discrete_start": (spaces.Discrete(7, start=-3), spaces.Discrete(4, start=2)),
    "multidiscrete": (spaces.MultiDiscrete([3, 5, 2]), spaces.MultiDiscrete([[2, 3], [4, 2]])),
    "multibinary": (spaces.MultiBinary(5), spaces.MultiBinary([2, 3])),
    "dict_nested": (
        spaces.Dict({
            "image": spaces.Box(0, 255, (4, 4), np.uint8),
            "state": spaces.Tuple((spaces.Discrete(3), spaces.Box(-1, 1, (2,), np.float32))),
            "flags": spaces.MultiBinary(3),
        }),
        spaces.Dict({"move": spaces.Discrete(4), "aim": spaces.Box(-1, 1, (2,), np.float64)}),
    ),
    "tuple_nested": (
        spaces.Tuple((spaces.Box(-1, 1, (2,), np.float32), spaces.Dict({"k": spaces.MultiDiscrete([2, 2])}))),
        spaces.Tuple((spaces.Discrete(2), spaces.MultiBinary(2))),
    ),
}


def space_env_fns(case, num_envs):
    observation_space, action_space = SPACE_CASES[case]
    return [partial(SpaceEnv, observation_space, action_space) for _ in range(num_envs)]


def collect_batches(backend, env_fns, policy=None, collects=3, **kwargs):
    with ParallelRolloutCollector(env_fns, policy, backend, **kwargs) as collector:
        return [collector.collect() for _ in range(collects)]


@pytest.mark.parametrize("case", sorted(SPACE_CASES))
def test_serial_and_sync_agree_for_every_space_kind(case, core):
    reference = collect_batches("serial", space_env_fns(case, 3), horizon=9, seed=123, core=core)
    other = collect_batches("sync", space_env_fns(case, 3), horizon=9, seed=123, core=core)
    for first, second in zip(reference, other):
        assert_batches_identical(first, second)
    # Episodes did end, by both kinds, so the final-observation path was exercised.
    dones = np.concatenate([b.dones for b in reference])
    assert dones.any()


PLACEMENTS = {
    "per-step async": ("async", {}),
    "per-step async, every env in a worker": ("async", {"main_process_envs": 0}),
    "pipelined": ("async", {"pipelined": True, "num_workers": 2}),
    "rollout workers": ("async", {"policy_placement": "workers", "num_workers": 2}),
}


@pytest.mark.parametrize("placement", sorted(PLACEMENTS))
def test_every_backend_and_placement_agrees_with_sync_on_nested_spaces(placement):
    backend, options = PLACEMENTS[placement]
    policy = None  # random actions: each env samples its own seeded space, wherever it runs
    reference = collect_batches("sync", space_env_fns("dict_nested", 4), policy, horizon=9, seed=321)
    other = collect_batches(backend, space_env_fns("dict_nested", 4), policy, horizon=9, seed=321, **options)
    for first, second in zip(reference, other):
        assert_batches_identical(first, second)


@pytest.mark.parametrize("case", sorted(SPACE_CASES))
def test_storage_mirrors_the_space(case):
    observation_space, action_space = SPACE_CASES[case]
    (batch,) = collect_batches("sync", space_env_fns(case, 2), horizon=4, seed=1, collects=1)

    def check(value, space, leading):
        if isinstance(space, spaces.Dict):
            assert isinstance(value, dict) and list(value) == list(space.spaces)
            for key in space.spaces:
                check(value[key], space.spaces[key], leading)
        elif isinstance(space, spaces.Tuple):
            assert isinstance(value, tuple) and len(value) == len(space.spaces)
            for item, subspace in zip(value, space.spaces):
                check(item, subspace, leading)
        else:
            assert value.shape == leading + space.shape
            assert value.dtype == space.dtype
            flat = value.reshape((-1,) + space.shape)
            assert all(space.contains(item) for item in flat), f"value outside {space}"

    check(batch.observations, observation_space, (4, 2))
    check(batch.final_observations, observation_space, (4, 2))
    check(batch.bootstrap_observations, observation_space, (2,))
    check(batch.actions, action_space, (4, 2))


def test_cartpole_with_an_observation_dependent_policy_agrees_across_backends_and_cores():
    policy = ObservationDependentPolicy(2)
    batches = {
        (backend, core): collect_batches(backend, [cartpole] * 5, policy, horizon=40, seed=7, core=core)
        for backend in IN_PROCESS
        for core in ("compiled", "python")
    }
    reference = batches[("serial", "python")]
    assert sum(b.episode_returns.size for b in reference) > 0
    for key, candidate in batches.items():
        for first, second in zip(reference, candidate):
            assert_batches_identical(first, second)


def test_values_and_log_probs_are_stored_identically():
    def policy(observations):
        actions = (observations[:, 0] > 0).astype(np.int64)
        return PolicyOutput(actions, values=observations[:, 1] * 2, log_probs=np.full((observations.shape[0], 1), -0.5))

    serial = collect_batches("serial", [cartpole] * 3, policy, horizon=20, seed=2)
    sync = collect_batches("sync", [cartpole] * 3, policy, horizon=20, seed=2)
    for first, second in zip(serial, sync):
        assert_batches_identical(first, second)
        assert first.values.dtype == np.float32 and first.values.shape == (20, 3)
        np.testing.assert_array_equal(first.values, (first.observations[:, :, 1] * 2).astype(np.float32))
        np.testing.assert_array_equal(first.log_probs, np.full((20, 3), -0.5, np.float32))


def test_random_actions_do_not_depend_on_how_envs_are_grouped():
    # policy=None: each env samples from its own seeded action space.
    (serial,) = collect_batches("serial", space_env_fns("dict_nested", 4), horizon=6, seed=9, collects=1)
    (sync,) = collect_batches("sync", space_env_fns("dict_nested", 4), horizon=6, seed=9, collects=1)
    assert_batches_identical(serial, sync)
    # Env 2's actions are the same whether it runs among 4 envs or among 3.
    (three,) = collect_batches("sync", space_env_fns("dict_nested", 3), horizon=6, seed=9, collects=1)
    np.testing.assert_array_equal(three.actions["move"][:, 2], sync.actions["move"][:, 2])
    np.testing.assert_array_equal(three.actions["aim"][:, :3], sync.actions["aim"][:, :3])


def test_gymnasium_make_envs_with_wrappers_work():
    fns = [partial(gym.make, "Pendulum-v1")] * 2
    (batch,) = collect_batches("sync", fns, horizon=5, seed=0, collects=1)
    assert batch.observations.shape == (5, 2, 3) and batch.actions.shape == (5, 2, 1)


@pytest.mark.parametrize(
    "space",
    [spaces.Discrete(2), spaces.Discrete(7, start=-3), spaces.Discrete(5, dtype=np.int32), spaces.Discrete(300, start=1)],
    ids=["two", "negative-start", "int32", "wide"],
)
def test_random_discrete_actions_are_each_env_s_own_space_sample(space):
    """policy=None on a Discrete space draws without calling ``sample()``: the same numbers, in
    the same order, as a copy of the space seeded as the env's sampler is."""
    from parallel_rollouts.config.seeding import action_sampler_seed
    from parallel_rollouts.data.spaces import SpaceLayout
    from parallel_rollouts.policy.output import RandomActionSampler

    layout = SpaceLayout(space, "action")
    sampler = RandomActionSampler(layout, 11, range(3, 7))
    references = [copy.deepcopy(space) for _ in range(4)]
    for env_index, reference in zip(range(3, 7), references):
        reference.seed(action_sampler_seed(11, env_index))
    for _ in range(50):
        actions = sampler(None)
        assert actions.dtype == layout.leaves[0].dtype and actions.shape == (4,)
        np.testing.assert_array_equal(actions, [reference.sample() for reference in references])


def _remembering_step(observations, state, episode_starts):
    """Act on a running sum of the pole angle this episode (NumPy state: no torch needed)."""
    total = state["angle_sum"] + np.asarray(observations, dtype=np.float64)[:, 2]
    return (total > 0).astype(np.int64), {"angle_sum": total}


def _remembering_initial(num_envs: int) -> dict:
    return {"angle_sum": np.zeros(num_envs)}


def test_a_recurrent_policy_agrees_across_backends_and_cores():
    """The state fields too (``initial_state``, ``episode_starts``, ``final_states``,
    ``bootstrap_states``, ``states``), across autoresets and collects; the process modes and a
    GRU are compared in ``tests/test_recurrent.py``."""
    from parallel_rollouts import RecurrentPolicy

    from tests.recurrent_reference import cartpole_with_short_episodes

    batches = {
        (backend, core): collect_batches(
            backend, [cartpole_with_short_episodes] * 3, RecurrentPolicy(_remembering_step, _remembering_initial),
            horizon=20, seed=4, core=core, store_states=True,
        )
        for backend in IN_PROCESS
        for core in ("compiled", "python")
    }
    reference = batches[("serial", "python")]
    assert all(batch.final_observation_mask.any() for batch in reference)
    assert reference[1].states["angle_sum"].shape == (20, 3)
    for candidate in batches.values():
        for first, second in zip(reference, candidate):
            assert_batches_identical(first, second)
