"""ParallelVectorEnv as a drop-in for SyncVectorEnv: the actions each env receives, what is refused, Gymnasium's errors."""

from __future__ import annotations

from contextlib import closing
from functools import partial

import numpy as np
import pytest
from gymnasium.error import ClosedEnvironmentError, ResetNeeded
from gymnasium.utils.env_checker import data_equivalence
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from parallel_rollouts import ActionError, ConfigurationError, ParallelVectorEnv
from tests.vector_envs import action_recorder, cartpole, pendulum

NUM_ENVS = 3
BACKENDS = ["sync", "async"]


def _ours(env_fns, backend, **options):
    extra = {"num_workers": 2} if backend == "async" else {}
    return ParallelVectorEnv(env_fns, backend=backend, **extra, **options)


def _recorders(space_name):
    return [partial(action_recorder, space_name)] * NUM_ENVS


# Per action space, the steps of one run: the dtypes a caller may pass, changing between steps.
_RNG = np.random.default_rng(0)
ACTION_RUNS = {
    "discrete": [
        np.array([0, 2, 1], dtype=np.int64),
        np.array([2, 0, 1], dtype=np.int32),
        np.array([1, 1, 0], dtype=np.uint8),
        np.array([True, False, True]),
        np.array([0, 2, 1], dtype=np.int64),
    ],
    "float_box": [
        _RNG.uniform(-1, 1, (NUM_ENVS, 2)),  # float64: no rounding to float32 on the way
        _RNG.uniform(-1, 1, (NUM_ENVS, 2)).astype(np.float32),
        _RNG.uniform(-1, 1, (NUM_ENVS, 2)).astype(np.float16),
        np.array([[5.0, -7.5], [0.1, 0.2], [np.inf, 1.0]]),  # out of bounds: handed over, as Gymnasium does
        np.array([[1, 0], [0, -1], [1, 1]], dtype=np.int64),
        _RNG.uniform(-1, 1, (NUM_ENVS, 2)).astype(np.longdouble),
        _RNG.uniform(-1, 1, (NUM_ENVS, 2)).astype(">f8"),
    ],
    "uint8_box": [
        np.array([[0, 255], [7, 8], [128, 1]], dtype=np.int64),
        np.array([[0, 255], [7, 8], [128, 1]], dtype=np.uint8),
        np.array([[1, 2], [3, 4], [5, 6]], dtype=np.int16),
    ],
    "multi_discrete": [
        np.array([[0, 3], [2, 1], [1, 0]], dtype=np.int16),
        np.array([[2, 2], [0, 0], [1, 3]], dtype=np.int64),
    ],
    "dict": [
        {"move": _RNG.uniform(-1, 1, (NUM_ENVS, 2)), "tool": np.array([3, 0, 1], dtype=np.int32)},
        {"move": _RNG.uniform(-1, 1, (NUM_ENVS, 2)).astype(np.float32), "tool": np.array([0, 1, 2], dtype=np.int64)},
    ],
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("space_name", sorted(ACTION_RUNS))
def test_each_env_receives_the_type_dtype_and_value_sync_vector_env_hands_it(space_name, backend, core):
    reference = SyncVectorEnv(_recorders(space_name))
    with closing(reference), closing(_ours(_recorders(space_name), backend, core=core)) as ours:
        reference.reset(seed=0)
        ours.reset(seed=0)
        for actions in ACTION_RUNS[space_name]:
            reference.step(actions)
            ours.step(actions)
        expected = reference.get_attr("received")
        got = ours.get_attr("received")
        assert len(got[0]) == len(ACTION_RUNS[space_name])
        assert got == expected


@pytest.mark.parametrize("backend", BACKENDS)
def test_pendulum_with_float64_actions_steps_bit_for_bit_like_sync_vector_env(backend, core):
    # Pendulum computes in float64; rounding its actions to float32 drifts the state by 1e-5
    # within an episode. 230 steps cross the truncation at 200.
    reference = SyncVectorEnv([pendulum] * NUM_ENVS)
    with closing(reference), closing(_ours([pendulum] * NUM_ENVS, backend, core=core)) as ours:
        assert data_equivalence(reference.reset(seed=3), ours.reset(seed=3), exact=True)
        rng = np.random.default_rng(1)
        for t in range(230):
            actions = rng.uniform(-2.5, 2.5, (NUM_ENVS, 1))  # float64, some past the +-2 bounds
            expected, got = reference.step(actions), ours.step(actions)
            assert data_equivalence(expected, got, exact=True), f"step {t}:\n{expected!r}\n{got!r}"


# (action space, a batch with one bad action, what the error names)
BAD_ACTIONS = [
    ("discrete", np.array([0, 1.0, 0.5]), r"needs integers \(env 2 got 0\.5\)"),
    ("discrete", np.array([0, 3, 1]), r"action for env 1 is outside the action space Discrete\(3\): got 3"),
    ("discrete", np.array([0, 1, -1]), r"action for env 2 is outside the action space Discrete\(3\): got -1"),
    ("uint8_box", np.array([[0, 1], [7, 300], [0, 0]]), r"action for env 1 is outside .*: got \[7, 300\]"),
    ("uint8_box", np.array([[0, 1], [7, 3], [-1, 0]]), r"action for env 2 is outside .*: got \[-1, 0\]"),
    ("uint8_box", np.array([[0, 1], [7, 3.5], [0, 0]]), r"needs integers \(env 1 got \[7\.0, 3\.5\]\)"),
    ("multi_discrete", np.array([[0, 1], [0.0, 1.0], [1, 4]]), r"needs integers \(env 0 got \[0\.0, 1\.0\]\)"),
    ("multi_discrete", np.array([[0, 1], [2, 1], [1, 4]]), r"action for env 2 is outside .*: got \[1, 4\]"),
    ("float_box", np.array([[0.0, 0.0], [0.5, np.nan], [0.0, 0.0]]), r"action for env 1 is outside .*: got \[0\.5, nan\]"),
    ("float_box", np.zeros((NUM_ENVS, 3)), r"shape \(3, 3\); expected \(3, 2\)"),
    ("dict", {"move": np.zeros((NUM_ENVS, 2)), "tool": np.array([0, 4, 0])}, r"action at \['tool'\] for env 1 .*: got 4"),
]


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_action_outside_the_space_is_refused_before_any_env_steps(backend):
    for space_name, bad, message in BAD_ACTIONS:
        with closing(_ours(_recorders(space_name), backend)) as ours:
            ours.reset(seed=0)
            with pytest.raises(ActionError, match=message):
                ours.step(bad)
            assert [len(received) for received in ours.get_attr("received")] == [0] * NUM_ENVS, (
                f"{space_name}: an env was stepped with a refused batch"
            )
            good = ACTION_RUNS[space_name][0]
            ours.step(good)
            assert [len(received) for received in ours.get_attr("received")] == [1] * NUM_ENVS


@pytest.mark.parametrize("backend", BACKENDS)
def test_np_random_seed_is_every_env_seed_as_in_sync_vector_env(backend):
    reference = SyncVectorEnv([cartpole] * NUM_ENVS)
    with closing(reference), closing(_ours([cartpole] * NUM_ENVS, backend)) as ours:
        reference.reset(seed=5)
        ours.reset(seed=5)
        assert ours.np_random_seed == reference.np_random_seed == (5, 6, 7)
        reference.reset(seed=[9, None, 11])
        ours.reset(seed=[9, None, 11])
        seeds = ours.np_random_seed
        assert isinstance(seeds, tuple) and all(isinstance(seed, int) for seed in seeds)
        assert (seeds[0], seeds[2]) == (reference.np_random_seed[0], reference.np_random_seed[2]) == (9, 11)


@pytest.mark.parametrize("backend", BACKENDS)
def test_use_after_close_raises_gymnasiums_closed_environment_error(backend):
    ours = _ours([cartpole] * NUM_ENVS, backend)
    ours.reset(seed=0)
    ours.close()
    for use in (
        lambda: ours.step(np.zeros(NUM_ENVS, dtype=np.int64)),
        lambda: ours.reset(seed=0),
        lambda: ours.get_attr("np_random_seed"),
        lambda: ours.np_random_seed,
    ):
        with pytest.raises(ClosedEnvironmentError, match="is closed"):
            use()


@pytest.mark.parametrize("backend", BACKENDS)
def test_step_before_reset_raises_reset_needed_and_the_env_stays_usable(backend):
    with closing(_ours([cartpole] * NUM_ENVS, backend)) as ours:
        with pytest.raises(ResetNeeded, match=r"before envs \[0, 1, 2\] were ever reset"):
            ours.step(np.zeros(NUM_ENVS, dtype=np.int64))
        ours.reset(seed=0)
        observations, *_ = ours.step(np.zeros(NUM_ENVS, dtype=np.int64))
        assert observations.shape == (NUM_ENVS, 4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_step_after_a_masked_first_reset_names_the_envs_never_reset(backend):
    with closing(_ours([cartpole] * NUM_ENVS, backend, autoreset_mode=AutoresetMode.DISABLED)) as ours:
        ours.reset(seed=0, options={"reset_mask": np.array([True, False, True])})
        with pytest.raises(ResetNeeded, match=r"before envs \[1\] were ever reset"):
            ours.step(np.zeros(NUM_ENVS, dtype=np.int64))
        ours.reset(seed=0, options={"reset_mask": np.array([False, True, False])})
        ours.step(np.zeros(NUM_ENVS, dtype=np.int64))


@pytest.mark.parametrize("backend", BACKENDS)
def test_reset_takes_the_seeds_sync_vector_env_takes_and_names_the_wrong_ones(backend):
    reference = SyncVectorEnv([cartpole] * NUM_ENVS)
    with closing(reference), closing(_ours([cartpole] * NUM_ENVS, backend)) as ours:
        for seed in (None, 4, [1, 2, 3], (1, None, 3), np.array([7, 8, 9])):
            got, _ = ours.reset(seed=seed)
            expected, _ = reference.reset(seed=seed if not isinstance(seed, np.ndarray) else seed.tolist())
            if seed is not None:
                seeded = [index for index in range(NUM_ENVS) if not isinstance(seed, tuple) or seed[index] is not None]
                np.testing.assert_array_equal(got[seeded], expected[seeded])
        for seed, message in (
            ([1, 2], r"one entry per env \(num_envs=3\); got 2"),
            ("abc", r"`seed` must be None, a non-negative int, or a list .*got 'abc'"),
            (-1, r"`seed` must be None, a non-negative int.*got -1"),
            (True, r"`seed` must be None, a non-negative int.*got True"),
            (2.5, r"`seed` must be None, a non-negative int.*got 2\.5"),
            ([1, 2.5, 3], r"`seed\[1\]` \(for env 1\) must be a non-negative int or None; got 2\.5"),
            ([1, 2, -3], r"`seed\[2\]` \(for env 2\) must be a non-negative int or None; got -3"),
        ):
            with pytest.raises(ConfigurationError, match=message):
                ours.reset(seed=seed)
        observations, _ = ours.reset(seed=0)
        assert observations.shape == (NUM_ENVS, 4)
