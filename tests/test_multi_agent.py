"""Multi-agent (PettingZoo parallel) envs as columns of the batch, on every backend.

The oracle is a plain loop over the env from the recorded seeds and actions
(:func:`tests.agent_envs.replay_relay`, and a plain PettingZoo loop for ``mpe2``); the
backends are compared with ``sync`` field by field.
"""

from __future__ import annotations

import os
from functools import partial

import numpy as np
import pytest

from parallel_rollouts import (
    ActionError,
    ConfigurationError,
    PadAgentSpaces,
    ParallelRolloutCollector,
    SpaceError,
    WorkerError,
    make_collector,
)
from tests.agent_envs import Relay, make_relay, replay_relay
from tests.batch_compare import assert_batches_identical
from tests.recurrent_policies import counting_policy

pytestmark = pytest.mark.timeout(180)

AGENTS = 4


class StepPolicy:
    """Deterministic per row: an action from the row's step count and noise (all three actions used)."""

    def __call__(self, observations):
        return ((observations[:, 1] + (observations[:, 2] > 0)).astype(np.int64)) % 3


step_policy = StepPolicy()


def collect(backend="sync", env_fns=None, collects=2, policy=step_policy, **kwargs):
    env_fns = env_fns or [make_relay] * 3
    kwargs.setdefault("horizon", 24)
    kwargs.setdefault("seed", 5)
    with ParallelRolloutCollector(env_fns, policy, backend, **kwargs) as collector:
        return [collector.collect() for _ in range(collects)]


def test_each_agent_is_a_column_and_the_batch_replays_from_the_recorded_seeds(core):
    batches = collect("sync", core=core, info_keys=("k",))
    joined = lambda name, columns: np.concatenate([getattr(batch, name)[:, columns] for batch in batches])  # noqa: E731
    for env in range(3):
        columns = slice(env * AGENTS, (env + 1) * AGENTS)
        rewards, terminations, truncations, observations, valid = replay_relay(batches, env)
        np.testing.assert_array_equal(joined("valid", columns), valid)
        np.testing.assert_array_equal(joined("rewards", columns), rewards)
        np.testing.assert_array_equal(joined("terminations", columns), terminations)
        np.testing.assert_array_equal(joined("truncations", columns), truncations)
        np.testing.assert_array_equal(joined("observations", columns)[valid], observations[valid])
    for batch in batches:
        assert batch.observations.shape == (24, 3 * AGENTS, 3)
        # Rows of agents that are not live: no reward, nothing ends, no info.
        assert not batch.rewards[~batch.valid].any() and not batch.dones[~batch.valid].any()
        assert np.isnan(batch.infos["k"][~batch.valid]).all() and not np.isnan(batch.infos["k"][batch.valid]).any()
    # The late agent is not live at the start of each env episode, the others are.
    first = batches[0]
    assert first.valid[0].reshape(3, AGENTS).tolist() == [[True, True, True, False]] * 3
    assert first.valid.all(axis=0).sum() < first.num_columns  # agents die at different times


def test_episode_books_are_per_agent_and_every_agent_of_an_env_episode_has_its_seed(core):
    (batch,) = collect("sync", collects=1, core=core, horizon=40)
    ended = batch.final_observation_mask
    assert ended.sum() == batch.episode_returns.size
    for k in range(batch.episode_returns.size):
        t, column = int(batch.episode_end_steps[k]), int(batch.episode_columns[k])
        assert ended[t, column]
        assert batch.episode_seeds[k] == batch.step_episode_seeds[t, column]
        # The agent's own rows of this env episode: valid rows back to where its episode began.
        rows = [s for s in range(t + 1) if batch.step_episode_seeds[s, column] == batch.episode_seeds[k] and batch.valid[s, column]]
        if batch.step_episode_seeds[0, column] != batch.episode_seeds[k]:  # started within the batch
            assert batch.episode_lengths[k] == len(rows)
            assert batch.episode_returns[k] == pytest.approx(batch.rewards[rows, column].sum())
        # The terminal observation is the one the step returned for that agent.
        assert batch.final_observations[t, column, 1] == batch.observations[t, column, 1] + 1
    # All agents of one env share the env episode's seed on every row.
    seeds = batch.step_episode_seeds.reshape(batch.horizon, 3, AGENTS)
    assert (seeds == seeds[:, :, :1]).all()


@pytest.mark.parametrize(
    "backend, options",
    [
        ("serial", {}),
        ("async", {}),
        ("async", {"pipelined": True, "num_workers": 2}),
        ("async", {"policy_placement": "workers", "num_workers": 2}),
        ("async", {"main_process_envs": 1, "num_workers": 2}),
        ("async", {"max_policy_lag": 1}),
    ],
    ids=["serial", "per-step", "pipelined", "rollout-workers", "main-share", "overlapped"],
)
def test_every_backend_gives_syncs_batch(backend, options, no_leaks):
    reference = collect("sync", max_policy_lag=options.get("max_policy_lag", 0))
    for expected, got in zip(reference, collect(backend, **options)):
        assert_batches_identical(expected, got)


def test_ray_gives_syncs_batch():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        got = collect("ray", num_workers=2)
    finally:
        ray.shutdown()
    for expected, batch in zip(collect("sync"), got):
        assert_batches_identical(expected, batch)


def test_a_recurrent_policy_keeps_one_state_per_agent_and_resets_it_where_an_agent_arrives():
    reference = collect("sync", policy=counting_policy())
    for expected, got in zip(reference, collect("async", policy=counting_policy(), policy_placement="workers", num_workers=2)):
        assert_batches_identical(expected, got)
    batch = reference[0]
    late = np.arange(3) * AGENTS + 3
    arrivals = (~batch.valid[:-1, late]) & batch.valid[1:, late]
    assert arrivals.any()
    assert batch.episode_starts[1:, late][arrivals].all()
    # The state counts the rows each agent has seen in its own episode.
    counts = batch.states["count"] if batch.states is not None else None
    assert counts is None or counts.shape[:2] == batch.rewards.shape


def test_a_lost_worker_loses_every_agent_of_its_env_and_the_replacement_goes_on(tmp_path, no_leaks):
    marker = str(tmp_path / "crashed")
    env_fns = [make_relay, partial(Relay, 9, 2, 30, marker)]
    with ParallelRolloutCollector(env_fns, step_policy, "async", horizon=24, seed=5, max_restarts=1) as collector:
        batches = [collector.collect() for _ in range(3)]
    assert os.path.exists(marker)
    lost = [batch for batch in batches if batch.lost_columns.size]
    assert len(lost) == 1
    assert lost[0].lost_columns.tolist() == [4, 5, 6, 7]
    assert lost[0].valid[:, :4].any()  # the other env's columns stand
    position = next(k for k, batch in enumerate(batches) if batch is lost[0])
    # The replacement's env starts a fresh episode: its three first agents live from the next batch's row 0.
    assert position < 2 and batches[position + 1].valid[0, 4:7].all()


def test_agents_with_different_spaces_are_refused_naming_them_and_padding_is_opt_in():
    mpe2 = pytest.importorskip("mpe2")
    from mpe2 import simple_tag_v3

    with pytest.raises(SpaceError) as info:
        make_collector(simple_tag_v3, num_envs=1, horizon=4, seed=0)
    message = str(info.value)
    assert "['adversary_0', 'adversary_1', 'adversary_2'] declare Box(-inf, inf, (16,), float32)" in message
    assert "['agent_0'] declare Box(-inf, inf, (14,), float32)" in message
    assert "PadAgentSpaces" in message
    with make_collector(simple_tag_v3, num_envs=2, horizon=30, seed=0, wrappers=[PadAgentSpaces]) as collector:
        batch = collector.collect()
    assert batch.observations.shape == (30, 8, 16)
    # The good agent's observation is padded with zeros after its 14 values.
    assert not batch.observations[:, 3::4, 14:].any() and batch.observations[:, 3::4, :14].any()
    assert mpe2 is not None


def test_padding_follows_supersuits_rules_and_passes_pettingzoos_api_test():
    pytest.importorskip("mpe2")
    from mpe2 import simple_tag_v3
    from pettingzoo.test import parallel_api_test

    padded = PadAgentSpaces(simple_tag_v3.parallel_env(continuous_actions=True))
    parallel_api_test(padded, num_cycles=30)
    assert padded.observation_space("agent_0") is padded.observation_space("adversary_0")
    # A Discrete action past an agent's own space becomes its action 0.
    tag = PadAgentSpaces(Uneven())
    tag.reset(seed=0)
    tag.step({"small": np.int64(4), "big": np.int64(4)})
    assert tag.env.received == {"small": 0, "big": 4}


class Uneven(Relay):
    """Two agents: ``small`` acts in Discrete(2), ``big`` in Discrete(5); observations of 2 and 3 values."""

    def __init__(self):
        super().__init__()
        from gymnasium import spaces

        self.possible_agents = ["small", "big"]
        self._spaces = {"small": (spaces.Box(-1, 1, (2,), np.float32), spaces.Discrete(2)),
                        "big": (spaces.Box(-1, 1, (3,), np.float32), spaces.Discrete(5))}
        self.received = {}

    def observation_space(self, agent):
        return self._spaces[agent][0]

    def action_space(self, agent):
        return self._spaces[agent][1]

    def reset(self, seed=None, options=None):
        self.agents = list(self.possible_agents)
        return {agent: np.zeros(self._spaces[agent][0].shape, np.float32) for agent in self.agents}, {}

    def step(self, actions):
        self.received = {agent: int(action) for agent, action in actions.items()}
        observations = {agent: np.zeros(self._spaces[agent][0].shape, np.float32) for agent in self.agents}
        zeros = dict.fromkeys(self.agents, 0.0)
        flags = dict.fromkeys(self.agents, False)
        return observations, zeros, flags, dict(flags), {agent: {} for agent in self.agents}


def test_mpe2_simple_spread_matches_a_plain_pettingzoo_loop_and_every_backend():
    pytest.importorskip("mpe2")
    from mpe2 import simple_spread_v3

    kwargs = {"max_cycles": 10}
    policy = lambda observations: (np.abs(observations[:, 0] * 1000).astype(np.int64)) % 5  # noqa: E731
    with make_collector(simple_spread_v3, num_envs=2, policy=policy, horizon=25, seed=3, env_kwargs=kwargs) as collector:
        batch = collector.collect()
    with make_collector(simple_spread_v3, num_envs=2, policy=policy, horizon=25, seed=3, env_kwargs=kwargs,
                        backend="async") as collector:
        assert_batches_identical(batch, collector.collect())
    agents = 3
    for env_index in range(2):
        env = simple_spread_v3.parallel_env(**kwargs)
        columns = slice(env_index * agents, (env_index + 1) * agents)
        observations, _ = env.reset(seed=int(batch.step_episode_seeds[0, columns][0]))
        for t in range(batch.horizon):
            if not env.agents:
                observations, _ = env.reset(seed=int(batch.step_episode_seeds[t, columns][0]))
            np.testing.assert_array_equal(batch.observations[t, columns], np.stack([observations[a] for a in env.possible_agents]))
            actions = {agent: batch.actions[t, columns][k] for k, agent in enumerate(env.possible_agents)}
            observations, rewards, terminations, truncations, _ = env.step(actions)
            np.testing.assert_array_equal(batch.rewards[t, columns], [rewards[a] for a in env.possible_agents])
            np.testing.assert_array_equal(batch.truncations[t, columns], [truncations[a] for a in env.possible_agents])
    assert batch.truncations[9].all() and batch.valid.all()
    assert batch.episode_returns.size == 2 * agents * 2  # two env episodes of 10 steps in 25 rows, per agent


def test_pistonball_frames_for_twenty_agents_are_the_same_on_sync_and_async():
    pytest.importorskip("pettingzoo.butterfly")
    from pettingzoo.butterfly import pistonball_v6

    with make_collector(pistonball_v6, num_envs=1, horizon=3, seed=0, env_kwargs={"max_cycles": 2}) as collector:
        batch = collector.collect()
    with make_collector(pistonball_v6, num_envs=1, horizon=3, seed=0, env_kwargs={"max_cycles": 2}, backend="async") as collector:
        assert_batches_identical(batch, collector.collect())
    assert batch.observations.shape == (3, 20, 457, 120, 3) and batch.observations.dtype == np.uint8
    assert batch.truncations[1].all() and batch.final_observation_mask[1].all()


def test_the_library_drives_envs_that_pass_pettingzoos_own_tests():
    pytest.importorskip("pettingzoo")
    from pettingzoo.test import parallel_api_test, parallel_seed_test

    parallel_api_test(Relay(), num_cycles=50)
    parallel_seed_test(Relay)


class BadAgents(Relay):
    """Breaks one rule of the API at step ``at``: ``how`` says which."""

    def __init__(self, how, at=2):
        super().__init__()
        self.how, self.at = how, at

    def step(self, actions):
        observations, rewards, terminations, truncations, infos = super().step(actions)
        if self._steps == self.at:
            if self.how == "missing reward":
                rewards.pop("a1")
            elif self.how == "bad shape":
                observations["a2"] = np.zeros(5, np.float32)
            elif self.how == "missing observation":
                observations.pop("a0")
                self.agents = [agent for agent in self.agents if agent != "a0"] + ["a0"]
            elif self.how == "left without end":
                self.agents = [agent for agent in self.agents if agent != "a1" or terminations["a1"] or truncations["a1"]]
                self.agents = [agent for agent in self.agents if agent != "a1"]
                terminations["a1"] = truncations["a1"] = False
            elif self.how == "raise":
                raise RuntimeError("the simulator broke")
        return observations, rewards, terminations, truncations, infos


@pytest.mark.parametrize(
    "how, error, expected",
    [
        ("missing reward", WorkerError, "env 5 .*agent 'a1' of the multi-agent env at envs 4..7.*without agent 'a1'"),
        ("bad shape", Exception, "env 6 returned an observation at step t=1 .*agent 'a2' of the multi-agent env at envs 4..7"),
        ("left without end", WorkerError, "env 5 .*agent 'a1'.* left env.agents at step t=1 without being terminated"),
        ("raise", WorkerError, r"multi-agent env BadAgents hosting envs 4..7 \(agents \['a0', 'a1', 'a2', 'late'\]\) raised RuntimeError in `step`"),
    ],
)
@pytest.mark.parametrize("backend", ["sync", "async"])
def test_an_env_breaking_the_api_is_named_by_env_column_and_agent(how, error, expected, backend, no_leaks):
    env_fns = [make_relay, partial(BadAgents, how)]
    with pytest.raises(error, match=expected):
        collect(backend, env_fns=env_fns, collects=1)


class MarkedRelay(Relay):
    """Relay whose agents' observations start with their index + 10, so a policy can single them out."""

    def _observation(self, agent):
        observation = super()._observation(agent)
        observation[0] += 10
        return observation


class OutOfRange:
    """Action 7 (outside Discrete(3)) for agent a2 of a MarkedRelay (first entry 12)."""

    def __call__(self, observations):
        actions = np.zeros(len(observations), dtype=np.int64)
        actions[observations[:, 0] == 12] = 7
        return actions


@pytest.mark.parametrize("placement", ["here", "workers"])
def test_an_action_outside_the_space_is_refused_naming_the_batch_column_and_its_agent(placement):
    # With rollout workers the second env's slice runs in its own worker: the column is still the batch's.
    options = {"policy_placement": "workers", "num_workers": 2} if placement == "workers" else {}
    with pytest.raises(ActionError, match=r"for env 6 \(agent 'a2'\) is outside the action space Discrete\(3\): got 7"):
        collect("sync" if placement == "here" else "async", env_fns=[make_relay, MarkedRelay], policy=OutOfRange(), collects=1, **options)


def test_an_aec_env_and_a_mix_of_kinds_are_refused_with_what_to_do():
    pytest.importorskip("mpe2")
    import gymnasium
    from mpe2 import simple_spread_v3

    with pytest.raises(SpaceError, match="AEC env .* `parallel_env` constructor instead"):
        collect("sync", env_fns=[simple_spread_v3.env], collects=1)
    with pytest.raises(SpaceError, match=r"env_fns\[1\] returned a single env but env_fns\[0\] returned a multi-agent"):
        collect("sync", env_fns=[make_relay, partial(gymnasium.make, "CartPole-v1")], collects=1)
    with pytest.raises(ConfigurationError, match="has no `parallel_env`"):
        make_collector(os, num_envs=1)


def run_vec_env(backend, steps=40):
    """Step an SB3 ParallelVecEnv of two Relays with a fixed action stream; every return, in order."""
    from parallel_rollouts.sb3 import ParallelVecEnv

    vec_env = ParallelVecEnv([make_relay, make_relay], backend=backend, seed=7)
    try:
        assert vec_env.num_envs == 8 and vec_env.column_agents == ("a0", "a1", "a2", "late") * 2
        record = [(vec_env.reset(), list(vec_env.reset_infos))]
        rng = np.random.default_rng(0)
        for _ in range(steps):
            record.append(vec_env.step(rng.integers(0, 3, size=8)))
        return record, vec_env.episode_seeds()
    finally:
        vec_env.close()


def test_the_sb3_adapter_takes_multi_agent_envs_with_sb3s_conventions(no_leaks):
    (expected, seeds), (got, _) = run_vec_env("sync"), run_vec_env("async")
    for first, second in zip(expected, got):
        for a, b in zip(first[:-1], second[:-1]):
            np.testing.assert_array_equal(a, b)
        for info_a, info_b in zip(first[-1], second[-1]):
            assert info_a.keys() == info_b.keys()
    saw_agent_end, saw_env_end = False, False
    for observations, rewards, dones, infos in expected[1:]:
        for column in np.flatnonzero(dones):
            # Every done sub-env reports its terminal observation, as SB3 expects of a done env.
            assert "terminal_observation" in infos[column]
        for env in range(2):
            columns = range(4 * env, 4 * env + 4)
            env_done = any(infos[c].get("env_done") for c in columns)
            if env_done:
                # The env's episode ended: every agent's sub-env is done with it (black-death rows
                # included), so no SB3 episode runs across two of the env's.
                saw_env_end = True
                assert dones[4 * env : 4 * env + 4].all()
            else:
                for c in columns:
                    if dones[c]:
                        saw_agent_end = True
                        assert not observations[c].any()  # zeros while its env goes on without it
                        assert infos[c]["agent_live"] is True
    assert saw_agent_end and saw_env_end
    # Each agent's sub-env lists the episodes of its env, seeded from its env's stream.
    assert seeds[0] == seeds[1] == seeds[3] and seeds[4] == seeds[7] and seeds[0] != seeds[4] and len(seeds[0]) > 1


def test_sb3_ppo_trains_on_a_multi_agent_env_through_the_adapter():
    pytest.importorskip("mpe2")
    from mpe2 import simple_spread_v3
    from stable_baselines3 import PPO

    from parallel_rollouts.sb3 import ParallelVecEnv

    factory = partial(simple_spread_v3.parallel_env, max_cycles=10, continuous_actions=False)
    vec_env = ParallelVecEnv([factory] * 2, backend="sync", seed=0)
    try:
        model = PPO("MlpPolicy", vec_env, n_steps=16, batch_size=32, n_epochs=1, seed=0, device="cpu")
        model.learn(total_timesteps=96)
        assert vec_env.num_envs == 6 and model.num_timesteps == 96
    finally:
        vec_env.close()


def run_vector_env(backend, steps=40, autoreset_mode="NextStep", seed=3, **options):
    """Step a ParallelVectorEnv of two Relays with a fixed action stream; every return, in order."""
    from parallel_rollouts import ParallelVectorEnv

    envs = ParallelVectorEnv([make_relay, make_relay], backend=backend, autoreset_mode=autoreset_mode, **options)
    try:
        assert envs.num_envs == 8 and envs.column_agents == ("a0", "a1", "a2", "late") * 2
        record = [envs.reset(seed=seed)]
        rng = np.random.default_rng(0)
        for _ in range(steps):
            record.append(envs.step(rng.integers(0, 3, size=8)))
        return record
    finally:
        envs.close()


def test_parallel_vector_env_steps_agents_as_sub_envs_the_same_on_sync_and_async(no_leaks):
    for mode in ("NextStep", "SameStep"):
        expected, got = run_vector_env("sync", autoreset_mode=mode), run_vector_env("async", autoreset_mode=mode)
        for first, second in zip(expected, got):
            for a, b in zip(first[:-1], second[:-1]):
                np.testing.assert_array_equal(a, b)
            assert_same_infos(first[-1], second[-1])


def assert_same_infos(first, second):
    """Gymnasium's merged infos equal, nested dicts and object arrays included."""
    if isinstance(first, dict):
        assert isinstance(second, dict) and first.keys() == second.keys()
        for key in first:
            assert_same_infos(first[key], second[key])
    elif isinstance(first, np.ndarray) and first.dtype == object:
        assert first.shape == second.shape
        for a, b in zip(first, second):
            assert_same_infos(a, b)
    else:
        np.testing.assert_array_equal(first, second)


def test_parallel_vector_env_matches_a_plain_loop_over_the_envs():
    record = run_vector_env("sync", steps=40)
    rng = np.random.default_rng(0)
    envs = [Relay(), Relay()]
    observations = [env.reset(seed=3 + 4 * index)[0] for index, env in enumerate(envs)]
    ended = [False, False]
    (first_observations, first_infos) = record[0]
    for index in range(2):
        for k, agent in enumerate(envs[index].possible_agents):
            expected = observations[index].get(agent, np.zeros(3, np.float32))
            np.testing.assert_array_equal(first_observations[4 * index + k], expected)
    # A reset is no transition: nobody acted; agent_present says who acts next.
    assert not first_infos["agent_live"].any()
    assert first_infos["agent_present"].tolist() == [True, True, True, False] * 2
    for observations_got, rewards_got, terminations_got, truncations_got, infos_got in record[1:]:
        actions = rng.integers(0, 3, size=8)
        for index, env in enumerate(envs):
            columns = slice(4 * index, 4 * index + 4)
            if ended[index]:  # NEXT_STEP: this step resets the env and ignores its actions
                observations, _ = env.reset()
                ended[index] = False
                live = set()
                rewards, terminations, truncations = {}, {}, {}
            else:
                live = set(env.agents)
                observations, rewards, terminations, truncations, _ = env.step(
                    {agent: actions[4 * index + k] for k, agent in enumerate(env.possible_agents) if agent in live}
                )
                ended[index] = not env.agents
            shown = live | set(env.agents)
            for k, agent in enumerate(env.possible_agents):
                column = 4 * index + k
                expected = observations[agent] if agent in shown and agent in observations else np.zeros(3, np.float32)
                np.testing.assert_array_equal(observations_got[column], expected)
                assert rewards_got[column] == rewards.get(agent, 0.0) if agent in live else rewards_got[column] == 0.0
                assert terminations_got[column] == (agent in live and terminations[agent])
                assert truncations_got[column] == (agent in live and truncations[agent])
                assert infos_got["agent_live"][column] == (agent in live)  # false on the reset step
                assert infos_got["env_done"][column] == (bool(live) and not env.agents)
            assert rewards_got[columns][[k for k, a in enumerate(env.possible_agents) if a not in live]].sum() == 0


def test_parallel_vector_env_refuses_a_reset_of_part_of_an_env_and_ready_first_stepping():
    from parallel_rollouts import ConfigurationError, ParallelVectorEnv

    envs = ParallelVectorEnv([make_relay, make_relay], backend="sync")
    try:
        envs.reset(seed=0)
        mask = np.zeros(8, dtype=bool)
        mask[4:6] = True
        with pytest.raises(ValueError, match=r"selects some but not all of envs 4..7, the agents \[.a0., .a1., .a2., .late.\]"):
            envs.reset(options={"reset_mask": mask})
        mask[4:8] = True
        observations, infos = envs.reset(options={"reset_mask": mask})
        assert infos["agent_present"][4:8].tolist() == [True, True, True, False]
    finally:
        envs.close()
    with pytest.raises(ConfigurationError, match="`batch_size` .* a multi-agent env steps all its agents at once"):
        ParallelVectorEnv([make_relay, make_relay], backend="sync", batch_size=1)


class CountedRelay:
    """A Relay factory that counts its calls."""

    def __init__(self):
        self.calls = 0

    def __call__(self):
        self.calls += 1
        return Relay()


def test_a_batch_too_large_is_warned_about_before_the_envs_are_made_counting_every_agent(monkeypatch):
    import warnings

    from parallel_rollouts import BatchMemoryWarning
    from parallel_rollouts.config import build_progress, memory

    monkeypatch.setattr(build_progress, "available_memory", lambda: 2**20)
    monkeypatch.setattr(memory, "available_memory", lambda: 2**20)
    factory = CountedRelay()
    with warnings.catch_warnings():
        warnings.simplefilter("error", BatchMemoryWarning)
        with pytest.raises(BatchMemoryWarning, match="one batch of 8,000 envs x horizon 16"):
            ParallelRolloutCollector([factory] * 2000, None, "sync", horizon=16, seed=0)
    assert factory.calls == 1  # only the env that read the spaces


class ShiftedRelay(Relay):
    """Relay whose observations lie in [1, 200]: the zero rows of agents not arrived yet lie outside."""

    def __init__(self):
        super().__init__()
        from gymnasium import spaces

        self._observation_space = spaces.Box(1.0, 200.0, (3,), np.float32)

    def _observation(self, agent):
        observation = super()._observation(agent)
        observation[2] = abs(observation[2])
        return observation + 5


def test_rows_of_agents_not_live_are_not_checked_against_the_space():
    batches = collect("sync", env_fns=[ShiftedRelay] * 2, observation_check="raise", horizon=30)
    late = batches[0].observations[0, 3]
    assert not batches[0].valid[0, 3] and not late.any()  # zero, outside Box(1, 200), and no error


class NobodyAfterReset(Relay):
    def reset(self, seed=None, options=None):
        observations, infos = super().reset(seed=seed, options=options)
        self.agents = []
        return observations, infos


def test_a_reset_that_leaves_no_agent_live_is_an_error_naming_the_env():
    with pytest.raises(WorkerError, match=r"hosting envs 4..7 .* `reset` left env.agents empty"):
        collect("sync", env_fns=[make_relay, NobodyAfterReset], collects=1)


def test_make_collector_takes_a_pettingzoo_parallel_env_constructor():
    pytest.importorskip("mpe2")
    from mpe2 import simple_spread_v3

    with make_collector(simple_spread_v3.parallel_env, num_envs=2, horizon=5, seed=1, env_kwargs={"max_cycles": 3}) as collector:
        by_constructor = collector.collect()
    with make_collector(simple_spread_v3, num_envs=2, horizon=5, seed=1, env_kwargs={"max_cycles": 3}) as collector:
        by_module = collector.collect()
    assert collector.column_agents == ("agent_0", "agent_1", "agent_2") * 2
    assert_batches_identical(by_constructor, by_module)


def test_padded_box_actions_are_clipped_to_each_agents_own_bounds():
    from gymnasium import spaces

    class BoxAgents(Uneven):
        def __init__(self):
            super().__init__()
            self._spaces = {"small": (spaces.Box(-1, 1, (2,), np.float32), spaces.Box(0, 1, (1,), np.float32)),
                            "big": (spaces.Box(-1, 1, (3,), np.float32), spaces.Box(-1, 1, (2,), np.float32))}

        def step(self, actions):
            result = super().step({agent: 0 for agent in actions})
            self.received = {agent: np.asarray(action).tolist() for agent, action in actions.items()}
            return result

    padded = PadAgentSpaces(BoxAgents())
    assert padded.action_space("small") == spaces.Box(-1, 1, (2,), np.float32)
    assert padded.observation_spaces == {"small": padded.observation_space("small"), "big": padded.observation_space("big")}
    padded.reset(seed=0)
    padded.step({"small": np.array([-0.9, 0.5], np.float32), "big": np.array([-0.9, 0.5], np.float32)})
    assert padded.env.received["small"] == [0.0] and padded.env.received["big"] == pytest.approx([-0.9, 0.5])


def test_check_and_advise_point_a_multi_agent_env_to_the_collector():
    from parallel_rollouts.conformance.target import as_env

    with pytest.raises(ConfigurationError, match="multi-agent env Relay; `check` and `advise` examine single"):
        as_env(Relay())


def test_parallel_vector_env_disabled_mode_resets_an_env_from_its_env_done_flags():
    from parallel_rollouts import ParallelVectorEnv

    envs = ParallelVectorEnv([make_relay, make_relay], backend="sync", autoreset_mode="Disabled")
    try:
        envs.reset(seed=1)
        assert envs.np_random_seed == (1,) * 4 + (5,) * 4  # each env's seed: its first sub-env's
        resets, reset_columns = 0, np.zeros(8, dtype=bool)
        rng = np.random.default_rng(0)
        for _ in range(40):
            _, _, _, _, infos = envs.step(rng.integers(0, 3, size=8))
            done = infos["env_done"]
            if done.any():
                envs.reset(options={"reset_mask": done})
                resets += 1
                reset_columns |= done
        assert resets >= 2
        # Envs reset without a seed report -1, the others their first seed.
        assert [seed == -1 for seed in envs.np_random_seed] == reset_columns.tolist()
    finally:
        envs.close()


def test_parallel_vector_env_reports_an_agent_leaving_without_its_end():
    from parallel_rollouts import ParallelVectorEnv

    envs = ParallelVectorEnv([make_relay, partial(BadAgents, "left without end")], backend="sync")
    envs.reset(seed=0)
    try:
        with pytest.raises(WorkerError, match="agent 'a1' \\(env 5\\) left env.agents at this step without"):
            for _ in range(3):
                envs.step(np.zeros(8, dtype=np.int64))
    finally:
        envs.close()


class NoMetadataRelay(Relay):
    metadata = property(lambda self: (_ for _ in ()).throw(AttributeError("metadata")))


def test_the_sb3_adapter_refuses_aec_envs_and_takes_envs_without_metadata():
    pytest.importorskip("mpe2")
    from mpe2 import simple_spread_v3

    from parallel_rollouts.sb3 import ParallelVecEnv

    with pytest.raises((SpaceError, WorkerError), match="AEC env .* `parallel_env` constructor instead"):
        ParallelVecEnv([simple_spread_v3.env], backend="sync", seed=0)
    vec_env = ParallelVecEnv([NoMetadataRelay], backend="sync", seed=0)
    try:
        assert vec_env.metadata == {} and vec_env.get_attr("render_mode") == [None] * 4
    finally:
        vec_env.close()
