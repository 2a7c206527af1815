"""A policy in rollout workers is the policy in this process at every collect, with generators of its own."""

from functools import partial

import numpy as np
import pytest
import torch

from parallel_rollouts import ParallelRolloutCollector, PolicyOutput, StalePolicyWarning
from tests.envs import CountingEnv
from tests.policies import RandomBinaryPolicy, module_level_policy
from tests.torch_policies import ModuleHolder, NonPersistentBufferPolicy

pytestmark = pytest.mark.timeout(180)


def counting_envs(count=4, num_actions=2):
    return [partial(CountingEnv, env_id=i, episode_length=50, num_actions=num_actions) for i in range(count)]


def cartpole_envs(count=4):
    import gymnasium as gym

    return [partial(gym.make, "CartPole-v1", max_episode_steps=50)] * count


def in_workers(env_fns, policy, **kwargs):
    return ParallelRolloutCollector(env_fns, policy, "async", num_workers=2, policy_placement="workers", **kwargs)


def agreement(first, second):
    return float(np.mean(first == second))


# -- random generators ------------------------------------------------------------------------


def test_each_worker_draws_its_own_stream_from_a_generator_the_policy_holds(core, no_leaks):
    # Envs 0, 1 run in worker 0 and envs 2, 3 in worker 1; a shared stream would agree on every step.
    with in_workers(counting_envs(), RandomBinaryPolicy(), horizon=400, seed=3, core=core) as collector:
        actions = collector.collect().actions
    assert 0.4 < agreement(actions[:, 0], actions[:, 2]) < 0.6
    assert 0.4 < agreement(actions[:, 1], actions[:, 3]) < 0.6


def test_the_same_seed_gives_the_same_batch_and_another_seed_another_one(core):
    policy = RandomBinaryPolicy()
    batches = {}
    for seed in (3, 3, 4):
        with in_workers(counting_envs(), policy, horizon=200, seed=seed, core=core) as collector:
            batches.setdefault(seed, []).append([collector.collect().actions for _ in range(2)])
    (first, again), (other,) = batches[3], batches[4]
    for one, two in zip(first, again):
        np.testing.assert_array_equal(one, two)
    # A new collector with another seed does not replay the first one's stream.
    assert agreement(first[0], other[0]) < 0.6
    # Nor does the second collect replay the first.
    assert agreement(first[0], first[1]) < 0.6


def test_a_reshipped_policy_continues_its_workers_streams():
    policy = RandomBinaryPolicy()
    policy.label = "first"
    with in_workers(counting_envs(), policy, horizon=200, seed=5) as collector:
        first = collector.collect().actions
        policy.label = "second"  # the policy travels again, its generator does not restart
        second = collector.collect().actions
    assert agreement(first, second) < 0.6


def test_a_sampling_torch_policy_draws_from_a_seeded_stream_per_worker():
    logits = torch.zeros(2)

    def policy(observations):
        return torch.distributions.Categorical(logits=logits.expand(observations.shape[0], 2)).sample()

    with in_workers(counting_envs(), policy, horizon=400, seed=1) as collector:
        actions = collector.collect().actions
    with in_workers(counting_envs(), policy, horizon=400, seed=1) as collector:
        again = collector.collect().actions
    assert 0.4 < agreement(actions[:, 0], actions[:, 2]) < 0.6
    np.testing.assert_array_equal(actions, again)


# -- the README's actor-critic, in the workers --------------------------------------------------


def make_actor_critic(sample: bool):
    torch.manual_seed(0)
    agent = torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.Tanh(), torch.nn.Linear(32, 3))

    def policy(observations):
        with torch.no_grad():
            output = agent(torch.tensor(observations))
        distribution = torch.distributions.Categorical(logits=output[:, :2])
        actions = distribution.sample() if sample else output[:, :2].argmax(dim=1)
        return PolicyOutput(actions, values=output[:, 2], log_probs=distribution.log_prob(actions))

    return agent, policy


def train_step(agent, optimizer, batch, gamma=0.99):
    observations = torch.from_numpy(batch.observations)
    actions = torch.from_numpy(batch.actions)
    rewards = torch.from_numpy(batch.rewards).float()
    output = agent(observations)
    log_probs = torch.distributions.Categorical(logits=output[..., :2]).log_prob(actions)
    returns = rewards.flip(0).cumsum(0).flip(0) * gamma
    advantages = (returns - output[..., 2]).detach()
    loss = -(log_probs * advantages).mean() + 0.5 * (returns - output[..., 2]).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def test_the_readme_actor_critic_made_greedy_matches_sync_across_updates(core):
    agent, policy = make_actor_critic(sample=False)
    optimizer = torch.optim.Adam(agent.parameters(), lr=0.05)
    with in_workers(cartpole_envs(), policy, horizon=32, seed=0, core=core) as workers:
        with ParallelRolloutCollector(cartpole_envs(), policy, "sync", horizon=32, seed=0, core=core) as reference:
            for _ in range(4):
                got, expected = workers.collect(), reference.collect()
                np.testing.assert_array_equal(got.actions, expected.actions)
                np.testing.assert_array_equal(got.observations, expected.observations)
                # Values from smaller batches agree to float32 rounding (see test_rollout_workers);
                # a stale copy's values would be those of the weights before the update.
                np.testing.assert_allclose(got.values, expected.values, rtol=1e-5, atol=1e-6)
                before = agent(torch.from_numpy(expected.observations[0])).detach()
                train_step(agent, optimizer, expected)
                assert not torch.allclose(before, agent(torch.from_numpy(expected.observations[0])), atol=1e-3)


def test_the_readme_actor_critic_follows_an_update_that_makes_one_action_certain():
    agent, policy = make_actor_critic(sample=True)
    with in_workers(cartpole_envs(), policy, horizon=32, seed=0) as collector:
        assert 0 < collector.collect().actions.mean() < 1
        with torch.no_grad():
            for parameter in agent.parameters():
                parameter.zero_()
            agent[2].bias[1] = 50.0
        assert (collector.collect().actions == 1).all()


# -- whatever the policy object is --------------------------------------------------------------


def test_an_object_holding_a_module_sends_its_new_weights():
    policy = ModuleHolder()
    with in_workers(counting_envs(), policy, horizon=3, seed=0) as collector:
        assert (collector.collect().actions == 0).all()
        with torch.no_grad():
            policy.network.bias.fill_(1.0)
        assert (collector.collect().actions == 1).all()


def test_a_changed_plain_attribute_reaches_the_workers():
    class Constant:
        def __init__(self):
            self.action = 0

        def __call__(self, observations):
            return np.full(observations.shape[0], self.action, dtype=np.int64)

    policy = Constant()
    with in_workers(counting_envs(), policy, horizon=3, seed=0) as collector:
        assert (collector.collect().actions == 0).all()
        policy.action = 1
        assert (collector.collect().actions == 1).all()


def test_a_non_persistent_buffer_changed_in_place_reaches_the_workers():
    policy = NonPersistentBufferPolicy()
    with in_workers(counting_envs(), policy, horizon=3, seed=0) as collector:
        assert (collector.collect().actions == 0).all()
        policy.running_mean.fill_(1.0)
        assert (collector.collect().actions == 1).all()


def test_a_closure_over_a_module_switched_to_eval_runs_in_eval_mode():
    network = torch.nn.Dropout(p=0.5)

    def policy(observations):
        return np.full(observations.shape[0], int(network.training), dtype=np.int64)

    with in_workers(counting_envs(), policy, horizon=3, seed=0) as collector:
        assert (collector.collect().actions == 1).all()
        network.eval()
        assert (collector.collect().actions == 0).all()


def test_an_unchanged_policy_sends_nothing_after_the_first_collect(monkeypatch):
    from parallel_rollouts.policy import shipping as policy_shipping

    policy = ModuleHolder()
    sent = []
    snapshot = policy_shipping.PolicyShipper.snapshot

    def recording(self):
        sent.append(snapshot(self))
        return sent[-1]

    monkeypatch.setattr(policy_shipping.PolicyShipper, "snapshot", recording)
    with in_workers(counting_envs(), policy, horizon=2, seed=0) as collector:
        collector.collect()
        collector.collect()
        with torch.no_grad():
            policy.network.bias.fill_(1.0)
        assert (collector.collect().actions == 1).all()
    assert [item.empty for item in sent] == [False, True, True, False]
    assert sent[-1].skeleton is None and len(sent[-1].storages) == 1


# -- what cannot follow -------------------------------------------------------------------------


def test_a_function_imported_by_name_is_warned_about_once_naming_it():
    with pytest.warns(StalePolicyWarning, match=r"tests\.policies\.module_level_policy") as recorded:
        with in_workers(counting_envs(), module_level_policy, horizon=2, seed=0) as collector:
            collector.collect()
            collector.collect()
    assert sum(issubclass(record.category, StalePolicyWarning) for record in recorded) == 1


# -- devices the workers cannot use -----------------------------------------------------------


class _MetaPolicy(torch.nn.Module):
    """A module whose weights live on the meta device (no data): pickling it needs no storage."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(2, 2, device="meta")

    def forward(self, observations):
        return np.zeros(len(observations), dtype=np.int64)


@pytest.mark.parametrize("holder", ["module", "tensor in a closure"])
def test_a_policy_holding_meta_tensors_is_refused_before_any_worker_starts(holder, monkeypatch, no_leaks):
    from parallel_rollouts.processes.pool import WorkerPool

    if holder == "module":
        policy = _MetaPolicy()
    else:
        weights = torch.zeros(3, device="meta")

        def policy(observations):
            return np.zeros(len(observations), dtype=np.int64) + int(weights.shape[0] > 5)

    started = []
    monkeypatch.setattr(WorkerPool, "start", lambda *args, **kwargs: started.append(1))
    with pytest.raises(ValueError, match=r"holds a tensor on meta \(a meta tensor holds no data.*to_empty"):
        in_workers(counting_envs(), policy, horizon=4)
    assert not started
