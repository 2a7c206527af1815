"""ParallelVecEnv against Stable-Baselines3's documented VecEnv behaviour, DummyVecEnv beside it as the control.

Every comparison runs the adapter and a ``DummyVecEnv`` over the same envs in
lockstep; the control's envs are reset with the per-episode seeds the adapter
recorded (:class:`tests.sb3_envs.ReplayRecordedSeeds`), so both must return
the same observations, rewards, dones, infos (``terminal_observation``
included) and ``reset_infos`` at every step.
"""

from __future__ import annotations

import os
from contextlib import ExitStack
from functools import partial

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import data_equivalence
from stable_baselines3.common.vec_env import (
    DummyVecEnv,
    SubprocVecEnv,
    VecFrameStack,
    VecMonitor,
    VecNormalize,
    VecVideoRecorder,
)

from parallel_rollouts import ActionError, ConfigurationError, ObservationError, VectorEnvClosedError, WorkerError
from parallel_rollouts.sb3 import ParallelVecEnv
from parallel_rollouts.config.seeding import episode_seed
from tests.envs import SpaceEnv
from tests.leaks import run_script
from tests.sb3_envs import SPACES, FloatFramesEnv, SeedOnlyResetEnv, failing_cartpole, info_env, replaying, reversed_keys_env

BACKENDS = ["sync", "async"]
NUM_ENVS = 3
COMPOSITE_ACTION_SPACES = {
    "dict": spaces.Dict({"move": spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32), "mode": spaces.Discrete(3)}),
    "tuple": spaces.Tuple((spaces.Discrete(2), spaces.MultiDiscrete([2, 3]), spaces.Box(-1.0, 1.0, shape=(1,)))),
}


def cartpole() -> gym.Env:
    return gym.make("CartPole-v1")


@pytest.fixture
def stack():
    with ExitStack() as resources:
        yield resources


def open_pair(stack: ExitStack, env_fn, backend: str, num_envs: int = NUM_ENVS, seed: int = 0, wrap=lambda venv: venv):
    """The adapter and its control, both closed at the end of the test."""
    ours = ParallelVecEnv([env_fn] * num_envs, backend, seed=seed)
    stack.callback(ours.close)
    control = DummyVecEnv([replaying(env_fn, index, ours) for index in range(num_envs)])
    stack.callback(control.close)
    return wrap(ours), wrap(control)


def assert_same(ours, theirs, what: str) -> None:
    assert data_equivalence(ours, theirs, exact=True), f"{what} differ:\nadapter: {ours!r}\ncontrol: {theirs!r}"


def sampled_actions(space: gym.Space, num_envs: int, rng: np.random.Generator) -> np.ndarray:
    space.seed(int(rng.integers(2**31)))
    return np.stack([space.sample() for _ in range(num_envs)])


def step_both(ours, control, actions, what: str) -> tuple:
    ours_result, control_result = ours.step(actions), control.step(actions)
    for name, mine, theirs in zip(("observations", "rewards", "dones", "infos"), ours_result, control_result):
        assert_same(mine, theirs, f"{what}: {name}")
    assert_same(ours.unwrapped.reset_infos, control.unwrapped.reset_infos, f"{what}: reset_infos")
    return ours_result


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", sorted(SPACES))
def test_steps_like_dummy_vec_env_on_every_space_with_options_and_reseeding(stack, kind, backend):
    env_fn = partial(info_env, kind)
    ours, control = open_pair(stack, env_fn, backend)
    assert ours.observation_space == control.observation_space and ours.action_space == control.action_space
    assert ours.seed(11) == [episode_seed(11, index, 0) for index in range(NUM_ENVS)]
    assert_same(ours.reset(), control.reset(), "first reset: observations")
    assert_same(ours.reset_infos, control.reset_infos, "first reset: reset_infos")
    rng = np.random.default_rng(0)
    ends = {"terminated": 0, "truncated": 0}
    for t in range(45):
        if t == 15:  # the same options for every env: one reset
            for venv in (ours, control):
                venv.set_options({"level": 2})
            assert_same(ours.reset(), control.reset(), f"reset at {t} with options")
        if t == 25:  # options per env, then a new seed stream: resets grouped by options
            for venv in (ours, control):
                venv.set_options([{"level": index % 2} for index in range(NUM_ENVS)])
            ours.seed(5)
            assert_same(ours.reset(), control.reset(), f"reset at {t} with per-env options and seed(5)")
            assert [seeds[-1] for seeds in ours.episode_seeds()] == [episode_seed(5, i, 0) for i in range(NUM_ENVS)]
        assert_same(ours.reset_infos, control.reset_infos, f"step {t}: reset_infos before the step")
        actions = sampled_actions(ours.action_space, NUM_ENVS, rng)
        _, _, dones, infos = step_both(ours, control, actions, f"step {t}")
        for index in np.flatnonzero(dones):
            ends["truncated" if infos[index]["TimeLimit.truncated"] else "terminated"] += 1
    assert ends["terminated"] > 0 and ends["truncated"] > 0, ends  # both kinds of end were compared
    assert all(len(seeds) > 3 for seeds in ours.episode_seeds())


@pytest.mark.parametrize("backend", BACKENDS)
def test_terminal_observation_keeps_the_key_order_the_env_gave(stack, backend):
    ours, control = open_pair(stack, reversed_keys_env, backend)
    ours.reset(), control.reset()
    rng = np.random.default_rng(3)
    ended = 0
    for t in range(14):
        _, _, dones, infos = step_both(ours, control, sampled_actions(ours.action_space, NUM_ENVS, rng), f"step {t}")
        for index in np.flatnonzero(dones):
            ended += 1
            mine, theirs = infos[index]["terminal_observation"], control.buf_infos[index]["terminal_observation"]
            # Dict equality ignores order: compare the key lists, the env's reverse of the space's sorted keys.
            assert list(mine) == list(theirs) == ["position", "pixels", "mode"], (t, index, list(mine))
    assert ended > 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_sb3_wrappers_on_top_agree_step_for_step(stack, backend):
    def wrap(venv):
        return VecNormalize(VecFrameStack(VecMonitor(venv), n_stack=3), gamma=0.9)

    ours, control = open_pair(stack, cartpole, backend, num_envs=4, wrap=wrap)
    ours.seed(3)
    assert_same(ours.reset(), control.reset(), "reset through the wrappers")
    rng = np.random.default_rng(1)
    episodes = 0
    for t in range(150):
        actions = rng.integers(0, 2, size=4)
        mine, theirs = ours.step(actions), control.step(actions)
        for name, a, b in zip(("observations", "rewards", "dones"), mine[:3], theirs[:3]):
            assert_same(a, b, f"step {t}: {name}")
        for a, b in zip(mine[3], theirs[3]):
            # VecMonitor's episode time is wall-clock: everything else must match.
            a, b = dict(a), dict(b)
            if "episode" in a:
                episodes += 1
                a["episode"], b["episode"] = dict(a["episode"]), dict(b["episode"])
                a["episode"].pop("t"), b["episode"].pop("t")
            assert_same(a, b, f"step {t}: infos")
    assert episodes > 4
    assert_same(ours.obs_rms.mean, control.obs_rms.mean, "VecNormalize's running mean")


@pytest.mark.parametrize("backend", BACKENDS)
def test_render_get_images_and_vec_video_recorder(stack, backend, tmp_path):
    env_fn = partial(info_env, "box", "rgb_array")
    ours, control = open_pair(stack, env_fn, backend)
    assert ours.render_mode == control.render_mode == "rgb_array"
    assert ours.metadata == control.metadata
    ours.reset(), control.reset()
    for t in range(4):
        actions = np.zeros((NUM_ENVS, 2), dtype=np.float32)
        step_both(ours, control, actions, f"step {t}")
        assert_same(ours.get_images(), control.get_images(), f"step {t}: get_images")
        assert_same(ours.render(), control.render(), f"step {t}: render (tiled)")
    folder = tmp_path / backend
    recorder = VecVideoRecorder(ours, str(folder), record_video_trigger=lambda step: step == 0, video_length=5)
    recorder.reset()
    for _ in range(8):
        recorder.step(np.zeros((NUM_ENVS, 2), dtype=np.float32))
    videos = list(folder.glob("*.mp4"))
    assert len(videos) == 1 and videos[0].stat().st_size > 0
    assert recorder.frames_per_sec == 7  # from the envs' metadata, as on DummyVecEnv


@pytest.mark.parametrize("backend", BACKENDS)
def test_get_attr_set_attr_env_method_env_is_wrapped_with_indices(stack, backend):
    ours, control = open_pair(stack, partial(info_env, "discrete"), backend)
    ours.reset(), control.reset()
    step_both(ours, control, np.array([0, 1, 2]), "step")
    for indices in (None, 1, [2, 0], [-1], range(2)):
        assert_same(ours.get_attr("steps", indices), control.get_attr("steps", indices), f"get_attr at {indices}")
        assert_same(
            ours.env_method("bump", 2, indices=indices), control.env_method("bump", 2, indices=indices), f"env_method at {indices}"
        )
    for venv in (ours, control):
        venv.set_attr("colour", 40, indices=[0, 2])
    assert ours.get_attr("colour") == control.get_attr("colour") == [40, 6, 40]
    assert_same(ours.env_method("render"), control.env_method("render"), "render through env_method")
    assert ours.env_is_wrapped(gym.wrappers.TimeLimit) == control.env_is_wrapped(gym.wrappers.TimeLimit) == [False] * 3
    assert ours.has_attr("colour") and not ours.has_attr("no_such_attribute")
    with pytest.raises(AttributeError, match="no_such_attribute"):
        ours.get_attr("no_such_attribute", indices=[1])
    with pytest.raises(IndexError):
        control.get_attr("steps", indices=[3])
    with pytest.raises(IndexError, match="env index 3"):
        ours.get_attr("steps", indices=[3])
    step_both(ours, control, np.array([2, 2, 2]), "step after the refused requests")  # still usable


@pytest.mark.parametrize("backend", BACKENDS)
def test_env_is_wrapped_sees_the_users_wrappers_only(stack, backend):
    ours, control = open_pair(stack, cartpole, backend, num_envs=2)
    for wrapper in (gym.wrappers.TimeLimit, gym.wrappers.OrderEnforcing, gym.wrappers.RecordEpisodeStatistics):
        assert ours.env_is_wrapped(wrapper) == control.env_is_wrapped(wrapper), wrapper
    assert ours.env_is_wrapped(gym.wrappers.TimeLimit, indices=[1]) == [True]
    assert ours.get_attr("spec")[0].id == "CartPole-v1"


def test_the_same_root_seed_gives_the_same_run_on_both_backends_and_the_collectors_seeds(stack):
    runs = []
    for backend in BACKENDS:
        venv = ParallelVecEnv([cartpole] * 4, backend, seed=21)
        stack.callback(venv.close)
        observations = [venv.reset()]
        rng = np.random.default_rng(2)
        for _ in range(60):
            observations.append(venv.step(rng.integers(0, 2, size=4))[0])
        runs.append((np.stack(observations), venv.episode_seeds()))
    assert np.array_equal(runs[0][0], runs[1][0])
    assert runs[0][1] == runs[1][1]
    for index, seeds in enumerate(runs[0][1]):
        assert seeds == [episode_seed(21, index, k) for k in range(len(seeds))]
        assert len(seeds) >= 2
    assert venv.root_seed == 21


@pytest.mark.parametrize("backend", BACKENDS)
def test_actions_are_checked_and_a_refused_batch_steps_nothing(stack, backend):
    ours, control = open_pair(stack, partial(info_env, "discrete"), backend)
    ours.reset(), control.reset()
    with pytest.raises(ActionError, match="env 1"):
        ours.step(np.array([0, 3, 1]))  # outside Discrete(3)
    with pytest.raises(ActionError, match="needs integers"):
        ours.step(np.array([0.0, 1.5, 1.0]))  # DummyVecEnv hands 1.5 to the env
    with pytest.raises(ActionError, match="shape"):
        ours.step(np.array([0, 1]))
    assert ours.get_attr("steps") == [0, 0, 0]
    step_both(ours, control, np.array([1, 0, 2]), "step after the refused batches")
    with pytest.raises(RuntimeError, match="step_async"):
        ours.step_wait()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", sorted(COMPOSITE_ACTION_SPACES))
def test_dict_and_tuple_actions_given_one_per_env_step_like_dummy_vec_env(stack, kind, backend):
    action_space = COMPOSITE_ACTION_SPACES[kind]
    env_fn = partial(SpaceEnv, spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32), action_space)
    ours, control = open_pair(stack, env_fn, backend)
    assert_same(ours.reset(), control.reset(), "reset")
    action_space.seed(3)
    for t in range(12):
        # SB3's form, as its own tests write it: actions[i] is env i's action.
        step_both(ours, control, [action_space.sample() for _ in range(NUM_ENVS)], f"step {t}")
    incomplete = [action_space.sample() for _ in range(NUM_ENVS)]
    incomplete[1] = {"mode": 1} if kind == "dict" else incomplete[1][:2]
    with pytest.raises(ActionError, match="action of env 1 does not match"):
        ours.step(incomplete)
    fractional = [action_space.sample() for _ in range(NUM_ENVS)]
    if kind == "dict":
        fractional[2] = {"move": fractional[2]["move"], "mode": 1.5}
    else:
        fractional[2] = (1.5, *fractional[2][1:])
    with pytest.raises(ActionError, match=r"needs integers \(env 2 got 1.5\)"):
        ours.step(fractional)
    step_both(ours, control, [action_space.sample() for _ in range(NUM_ENVS)], "step after the refused batches")


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_env_whose_reset_takes_no_options_steps_like_dummy_vec_env(stack, backend):
    observation_space, action_space = SPACES["box"]
    ours, control = open_pair(stack, partial(SeedOnlyResetEnv, observation_space, action_space), backend)
    assert_same(ours.reset(), control.reset(), "reset")
    rng = np.random.default_rng(4)
    episodes_ended = 0
    for t in range(20):
        _, _, dones, _ = step_both(ours, control, sampled_actions(action_space, NUM_ENVS, rng), f"step {t}")
        episodes_ended += int(dones.sum())
    assert episodes_ended > 0  # the autoresets reached the env too
    assert_same(ours.reset(), control.reset(), "second reset")


def test_an_unknown_start_method_is_refused_as_subproc_vec_env_refuses_it(no_leaks):
    with pytest.raises(ValueError, match="cannot find context for 'illegal_method'"):
        SubprocVecEnv([cartpole], start_method="illegal_method")
    with pytest.raises(ValueError, match="cannot find context for 'illegal_method'"):
        ParallelVecEnv([cartpole], "async", context="illegal_method")


@pytest.mark.parametrize("backend", BACKENDS)
def test_float_frames_for_a_uint8_space_are_refused_where_dummy_vec_env_casts_them(stack, backend):
    control = DummyVecEnv([FloatFramesEnv])
    stack.callback(control.close)
    assert control.reset().tolist() == [[1, 2]]  # silently truncated
    ours = ParallelVecEnv([FloatFramesEnv, FloatFramesEnv], backend, seed=0)
    stack.callback(ours.close)
    with pytest.raises(ObservationError, match="env 0") as refused:
        ours.reset()
    assert "uint8" in str(refused.value)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_env_failure_names_the_env_and_leaks_nothing(backend, no_leaks):
    venv = ParallelVecEnv([cartpole, partial(failing_cartpole, 3), cartpole], backend, seed=0)
    try:
        venv.reset()
        venv.step(np.zeros(3, dtype=np.int64))
        venv.step(np.zeros(3, dtype=np.int64))
        with pytest.raises(WorkerError, match="env 1") as failed:
            venv.step(np.zeros(3, dtype=np.int64))
        assert "step 3 exploded" in str(failed.value)
        with pytest.raises(VectorEnvClosedError):
            venv.reset()
    finally:
        venv.close()
    venv.close()  # again: nothing
    with pytest.raises(VectorEnvClosedError):
        venv.step(np.zeros(3, dtype=np.int64))


def test_a_failing_factory_names_the_env_and_leaks_nothing(no_leaks):
    with pytest.raises(WorkerError, match="env 1"):
        ParallelVecEnv([cartpole, partial(failing_factory)], "async", seed=0)
    with pytest.raises(ValueError, match=r"env_fns\[0\]"):
        ParallelVecEnv([gym.make("CartPole-v1")], "sync")


def failing_factory() -> gym.Env:
    raise RuntimeError("no env today")


def test_workers_never_import_stable_baselines3(stack):
    # Every env in a worker: by default this process would step a share itself.
    venv = ParallelVecEnv([partial(info_env, "box")] * 2, "async", seed=0, main_process_envs=0)
    stack.callback(venv.close)
    assert venv.get_attr("stable_baselines3_loaded") == [False, False]
    assert os.getpid() not in venv.get_attr("process_id")  # asked in the workers, not here


def test_the_main_process_steps_its_own_share_by_default_on_two_cores(stack, monkeypatch):
    monkeypatch.setattr("parallel_rollouts.processes.local_share.usable_cores", lambda: 2)
    venv = ParallelVecEnv([partial(info_env, "box")] * 4, "async", seed=0)
    stack.callback(venv.close)
    pids = venv.get_attr("process_id")
    assert list(pids[:2]) == [os.getpid()] * 2 and os.getpid() not in pids[2:], pids


def test_importing_the_package_never_imports_stable_baselines3():
    result = run_script(
        """
        import sys
        import parallel_rollouts
        from parallel_rollouts import ParallelVectorEnv, ParallelRolloutCollector
        assert "stable_baselines3" not in sys.modules, "importing parallel_rollouts imported stable_baselines3"
        import parallel_rollouts.sb3.env_side  # what a worker imports
        assert "stable_baselines3" not in sys.modules, "the env side imported stable_baselines3"
        from parallel_rollouts.sb3 import ParallelVecEnv
        assert "stable_baselines3" in sys.modules
        print("ok")
        """
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_a_vec_env_is_closed_by_its_context_manager(no_leaks):
    with ParallelVecEnv([cartpole] * 2, "async", seed=0) as venv:
        venv.reset()
    with pytest.raises(VectorEnvClosedError):
        venv.reset()


class _SeededOnce(gym.Wrapper):
    """The control for ``episode_seeds="first"``: the env's first reset (after each ``seed_next``)
    takes the given seed, every later one continues its generator, as DummyVecEnv's autoresets do."""

    def __init__(self, env: gym.Env, seed: int) -> None:
        super().__init__(env)
        self.pending = seed

    def reset(self, *, seed=None, options=None):
        seed, self.pending = (self.pending, None) if seed is None else (seed, None)
        return self.env.reset(seed=seed, options=options)


@pytest.mark.parametrize("backend", BACKENDS)
def test_first_episode_seeds_only_step_like_dummy_vec_env_seeded_once(stack, backend):
    ours = ParallelVecEnv([cartpole] * NUM_ENVS, backend, seed=9, episode_seeds="first")
    stack.callback(ours.close)
    controls = [_SeededOnce(cartpole(), episode_seed(9, index, 0)) for index in range(NUM_ENVS)]
    control = DummyVecEnv([lambda env=env: env for env in controls])
    stack.callback(control.close)
    assert_same(ours.reset(), control.reset(), "reset")
    rng = np.random.default_rng(4)
    ended = 0
    for t in range(120):
        _, _, dones, _ = step_both(ours, control, rng.integers(0, 2, size=NUM_ENVS), f"step {t}")
        ended += int(dones.sum())
        if t == 60:
            # seed() restarts every env's stream: the next reset is seeded again, the rest are not.
            ours.seed(11)
            for index, env in enumerate(controls):
                env.pending = episode_seed(11, index, 0)
            assert_same(ours.reset(), control.reset(), "reset after seed()")
    assert ended > NUM_ENVS
    for index, seeds in enumerate(ours.episode_seeds()):
        first_stream = seeds.index(episode_seed(11, index, 0))
        assert seeds[0] == episode_seed(9, index, 0) and set(seeds[1:first_stream]) <= {-1}
        assert set(seeds[first_stream + 1 :]) <= {-1} and len(seeds) > first_stream + 1


def test_episode_seeds_names_its_choices():
    from parallel_rollouts import ConfigurationError

    with pytest.raises(ConfigurationError, match="episode_seeds"):
        ParallelVecEnv([cartpole], "sync", seed=0, episode_seeds="once")


@pytest.mark.parametrize("backend", BACKENDS)
def test_step_async_starts_the_step_and_step_wait_takes_it(stack, backend):
    """step_async checks the actions and starts every env's step (a refused batch steps nothing);
    step_wait returns it; other calls between them ask for step_wait."""
    ours, control = open_pair(stack, cartpole, backend)
    ours.reset(), control.reset()
    rng = np.random.default_rng(6)
    for t in range(30):
        actions = rng.integers(0, 2, size=NUM_ENVS)
        ours.step_async(actions)
        control.step_async(actions)
        for name, mine, theirs in zip(("observations", "rewards", "dones", "infos"), ours.step_wait(), control.step_wait()):
            assert_same(mine, theirs, f"step {t}: {name}")
    with pytest.raises(ActionError, match="env 1"):
        ours.step_async(np.array([0, 5, 1]))
    with pytest.raises(RuntimeError, match="call `step_async"):
        ours.step_wait()  # the refused batch started nothing
    ours.step_async(np.zeros(NUM_ENVS, dtype=np.int64))
    with pytest.raises(ConfigurationError, match="step_wait"):
        ours.get_attr("spec")
    ours.step_wait()
    assert ours.get_attr("spec")[0].id == "CartPole-v1"


@pytest.mark.parametrize("backend", BACKENDS)
def test_reset_between_step_async_and_step_wait_books_the_step_as_step_wait_would(stack, backend):
    """The step left in flight ends an episode: reset takes it (its end and the next episode's seed
    booked) and resets, exactly as step_wait then reset do."""
    def run(wait: bool):
        venv = ParallelVecEnv([cartpole] * NUM_ENVS, backend, seed=4)
        stack.callback(venv.close)
        venv.reset()
        pushes = 0
        while True:  # pushing left, a pole falls within a few steps: stop at the step that ends one
            pushes += 1
            venv.step_async(np.zeros(NUM_ENVS, dtype=np.int64))
            if pushes == ends_at:
                break
            venv.step_wait()
        if wait:
            venv.step_wait()
        return venv.reset(), venv.reset_infos, venv.episode_seeds()

    probe = ParallelVecEnv([cartpole] * NUM_ENVS, "sync", seed=4)
    stack.callback(probe.close)
    probe.reset()
    ends_at = 1
    while not probe.step(np.zeros(NUM_ENVS, dtype=np.int64))[2].any():
        ends_at += 1
    waited, dropped = run(wait=True), run(wait=False)
    assert_same(dropped[0], waited[0], "reset observations")
    assert dropped[1:] == waited[1:]
    assert any(len(seeds) == 3 for seeds in dropped[2])  # first episode, the one the step began, the reset's


@pytest.mark.parametrize("backend", BACKENDS)
def test_close_with_a_step_in_flight_leaves_nothing_to_take(backend):
    venv = ParallelVecEnv([cartpole] * NUM_ENVS, backend, seed=0)
    venv.reset()
    venv.step_async(np.zeros(NUM_ENVS, dtype=np.int64))
    venv.close()
    with pytest.raises(VectorEnvClosedError):
        venv.step_wait()
    with pytest.raises(VectorEnvClosedError):
        venv.reset()
