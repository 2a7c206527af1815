"""Recurrent policies: the state is reset at every episode start before the policy sees the row,
carried across rows and collects on every backend, recorded in the batch, and checked."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from parallel_rollouts import ActionError, ConfigurationError, ParallelRolloutCollector, RecurrentPolicy
from tests.batch_compare import assert_batches_identical
from tests.test_backend_identity import IN_PROCESS, collect_batches
from tests.recurrent_policies import GRUPolicy, counting_policy
from tests.recurrent_reference import (
    assert_matches_reference,
    cartpole_with_short_episodes,
    short_crashing_cartpole,
    state_leaves,
)

pytestmark = pytest.mark.timeout(180)

NUM_ENVS, HORIZON = 4, 24

BACKENDS = {
    "serial": dict(backend="serial"),
    "sync": dict(backend="sync"),
    "async per-step": dict(backend="async", num_workers=2),
    "async pipelined": dict(backend="async", num_workers=2, pipelined=True),
    "rollout workers": dict(backend="async", num_workers=2, policy_placement="workers"),
}


@pytest.fixture(autouse=True)
def _one_torch_thread(one_torch_thread):
    """Every test here runs PyTorch on one thread (the fixture in tests/conftest.py)."""


def collect(policy, mode: str, collects: int = 3, **kwargs) -> list:
    options = {**BACKENDS[mode], **kwargs}
    backend = options.pop("backend")
    fns = [cartpole_with_short_episodes] * NUM_ENVS
    with ParallelRolloutCollector(fns, policy, backend, horizon=HORIZON, seed=3, **options) as collector:
        return [collector.collect() for _ in range(collects)]


@pytest.mark.parametrize("mode", list(BACKENDS))
def test_every_backend_matches_the_one_env_reference_loop_across_autoresets_and_collects(mode):
    policy = GRUPolicy()
    batches = collect(policy, mode, store_states=True)
    starts_mid_rollout = assert_matches_reference(batches, policy, cartpole_with_short_episodes)
    assert starts_mid_rollout >= NUM_ENVS * 3, "too few autoresets mid-rollout to test the resets"
    ended = np.concatenate([batch.dones for batch in batches])
    assert np.concatenate([batch.truncations for batch in batches]).any() and ended.any()
    # The state carries over: each batch starts from the state the one before ended with.
    for before, after in zip(batches, batches[1:]):
        np.testing.assert_array_equal(after.initial_state["h"], before.bootstrap_states["h"])
        np.testing.assert_array_equal(after.episode_starts[0], before.dones[-1])


@pytest.mark.parametrize("mode", [mode for mode in BACKENDS if mode != "serial"])
def test_a_gru_policy_s_batches_are_bit_identical_on_every_backend(mode):
    reference = collect(GRUPolicy(), "serial", store_states=True)
    for first, second in zip(reference, collect(GRUPolicy(), mode, store_states=True)):
        assert_batches_identical(first, second)


def test_a_nested_numpy_state_made_with_the_wrapper_is_reset_at_every_episode_start():
    policy = counting_policy()
    batches = collect(policy, "sync", store_states=True)
    assert_matches_reference(batches, policy, cartpole_with_short_episodes)
    batch = batches[1]
    assert isinstance(batch.initial_state, dict) and isinstance(batch.initial_state["sums"], tuple)
    assert batch.states["count"].shape == (HORIZON, NUM_ENVS) and batch.states["sums"][0].shape == (HORIZON, NUM_ENVS, 1)
    # The count the policy was given is the rows seen since the episode's first row.
    count = batch.initial_state["count"].copy()
    for t in range(HORIZON):
        count = np.where(batch.episode_starts[t], 0, count)
        np.testing.assert_array_equal(batch.states["count"][t], count)
        count = count + 1


def test_states_are_not_stored_unless_asked_and_feed_forward_batches_have_no_state_fields():
    (recurrent,) = collect(GRUPolicy(), "sync", collects=1)
    assert recurrent.states is None and recurrent.initial_state["h"].shape == (NUM_ENVS, 8)
    assert recurrent.final_states["h"].dtype == np.float32 and recurrent.final_states["h"].shape == (HORIZON, NUM_ENVS, 8)
    (plain,) = collect(lambda observations: np.zeros(len(observations), dtype=np.int64), "sync", collects=1)
    assert plain.initial_state is plain.episode_starts is plain.final_states is plain.bootstrap_states is None


def test_a_learner_recomputes_every_row_s_state_from_initial_state_and_episode_starts():
    """What a BPTT update does: replay the policy over the batch from ``initial_state``,
    resetting where ``episode_starts`` says; it reproduces every stored state and value."""
    policy = GRUPolicy()
    for batch in collect(policy, "rollout workers", store_states=True):
        hidden = torch.from_numpy(batch.initial_state["h"])
        initial = policy.initial_state(NUM_ENVS)["h"]
        for t in range(HORIZON):
            hidden = torch.where(torch.from_numpy(batch.episode_starts[t])[:, None], initial, hidden)
            np.testing.assert_array_equal(hidden.numpy(), batch.states["h"][t])
            output, state = policy(batch.observations[t], {"h": hidden}, batch.episode_starts[t])
            np.testing.assert_array_equal(output.values.numpy(), batch.values[t])
            hidden = state["h"]
            mask = batch.final_observation_mask[t]
            np.testing.assert_array_equal(batch.final_states["h"][t][mask], hidden.numpy()[mask])


def test_a_policy_update_between_collects_keeps_the_carried_state_in_rollout_workers():
    """The workers' copies take the new weights; the state each env carries is not reset."""
    fns = [cartpole_with_short_episodes] * NUM_ENVS
    options = dict(horizon=HORIZON, seed=3, num_workers=2, store_states=True)
    runs = {}
    for placement in ("main", "workers"):
        model = GRUPolicy()
        with ParallelRolloutCollector(fns, model, "async", policy_placement=placement, **options) as collector:
            first = collector.collect()
            with torch.no_grad():
                model.cell.weight_hh.mul_(0.5)
            runs[placement] = (first, collector.collect())
    for main_batch, worker_batch in zip(runs["main"], runs["workers"]):
        assert_batches_identical(main_batch, worker_batch)
    first, second = runs["workers"]
    np.testing.assert_array_equal(second.initial_state["h"], first.bootstrap_states["h"])
    assert not np.array_equal(second.initial_state["h"], np.zeros_like(second.initial_state["h"]))


def test_a_dropped_rollout_leaves_the_state_where_the_envs_stand():
    """The policy raises at row 5 of the second collect: the next batch starts at the envs' row
    5 with the state the policy was given there."""
    policy = GRUPolicy()
    calls = {"count": 0, "fail_at": None}

    def failing(observations, state, episode_starts):
        calls["count"] += 1
        if calls["count"] == calls["fail_at"]:
            raise RuntimeError("the policy failed")
        return policy(observations, state, episode_starts)

    wrapped = RecurrentPolicy(failing, policy.initial_state)
    fns = [cartpole_with_short_episodes] * NUM_ENVS
    with ParallelRolloutCollector(fns, wrapped, "sync", horizon=HORIZON, seed=3, store_states=True) as collector:
        first = collector.collect()
        calls["fail_at"] = calls["count"] + 6
        with pytest.raises(RuntimeError, match="the policy failed"):
            collector.collect()
        after = collector.collect()
    with ParallelRolloutCollector(fns, GRUPolicy(), "sync", horizon=HORIZON, seed=3, store_states=True) as collector:
        straight = [collector.collect() for _ in range(2)]
    # The dropped rollout's first 5 rows were stepped: `after` starts at row 5 of the straight run.
    np.testing.assert_array_equal(after.initial_state["h"], straight[1].states["h"][5])
    np.testing.assert_array_equal(after.episode_starts[0], straight[1].episode_starts[5])
    np.testing.assert_array_equal(after.observations[0], straight[1].observations[5])
    assert first.episode_starts[0].all()


# -- vector envs with next-step autoreset ---------------------------------------------------


def test_next_step_autoreset_resets_the_state_for_the_first_row_of_the_new_episode():
    """A next-step vector env spends the row after an end on its reset (``valid`` false): the
    state is reset there and again at the new episode's first row, which therefore starts from
    the initial state whatever the policy did with the terminal observation."""
    import gymnasium as gym

    def vector_env():
        return gym.vector.SyncVectorEnv(
            [cartpole_with_short_episodes] * 2, autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP
        )

    policy = counting_policy()
    with ParallelRolloutCollector([vector_env], policy, "sync", horizon=30, seed=1, store_states=True) as collector:
        batch = collector.collect()
    reset_rows = ~batch.valid
    assert reset_rows.any()
    after_reset = np.zeros_like(reset_rows)
    after_reset[1:] = reset_rows[:-1]
    np.testing.assert_array_equal(batch.episode_starts[1:], (batch.dones[:-1] | reset_rows[:-1]))
    assert batch.episode_starts[reset_rows].all() and batch.episode_starts[after_reset].all()
    assert (batch.states["count"][after_reset] == 0).all()


# -- bad input --------------------------------------------------------------------------------


def _policy_returning(make_next_state, initial=None):
    def step(observations, state, episode_starts):
        return np.zeros(len(observations), dtype=np.int64), make_next_state(state)

    return RecurrentPolicy(step, initial or (lambda n: {"h": np.zeros((n, 3), np.float32)}))


BAD_STATES = {
    "wrong leading dimension": (
        lambda state: {"h": np.zeros((5, 3), np.float32)},
        r"envs 0\.\.3 at row 0: the state\['h'\] has shape \(5, 3\); expected \(4, 3\)",
    ),
    "dtype changed": (
        lambda state: {"h": state["h"].astype(np.float64)},
        r"the state\['h'\] has dtype float64; expected float32",
    ),
    "leaf not an array": (
        lambda state: {"h": [[0.0] * 3] * 4},
        r"the state\['h'\] is a list; a state leaf must be a NumPy array or a PyTorch tensor",
    ),
    "leaf a number": (
        lambda state: {"h": 0.5},
        r"the state\['h'\] is a float; a state leaf must be a NumPy array or a PyTorch tensor",
    ),
    "tensor in place of an array": (
        lambda state: {"h": torch.zeros(4, 3)},
        r"the state\['h'\] is a Tensor; expected a ndarray",
    ),
    "keys changed": (
        lambda state: {"c": state["h"]},
        r"the state is a dict with keys \['c'\]; expected a dict with keys \['h'\]",
    ),
}


@pytest.mark.parametrize("case", list(BAD_STATES))
def test_a_bad_next_state_is_refused_naming_the_envs_and_the_leaf(case):
    make_next_state, message = BAD_STATES[case]
    with ParallelRolloutCollector([cartpole_with_short_episodes] * NUM_ENVS, _policy_returning(make_next_state), "sync", horizon=4) as collector:
        with pytest.raises(ActionError, match=message):
            collector.collect()
        assert collector.state.name == "READY", "a refused state must leave the collector usable"


@pytest.mark.parametrize(
    "returned, message",
    [
        (lambda observations: np.zeros(len(observations), dtype=np.int64), r"returned a ndarray at row 0; expected a 2-tuple \(output, next_state\)"),
        (lambda observations: (np.zeros(len(observations), dtype=np.int64), None, None), r"returned a tuple of 3 at row 0"),
    ],
    ids=["actions alone", "three values"],
)
def test_a_recurrent_policy_that_does_not_return_a_pair_is_refused(returned, message):
    policy = RecurrentPolicy(lambda observations, state, starts: returned(observations), lambda n: np.zeros((n, 2)))
    with ParallelRolloutCollector([cartpole_with_short_episodes] * 2, policy, "serial", horizon=4) as collector:
        with pytest.raises(ActionError, match=r"recurrent policy for envs 0\.\.1 " + message):
            collector.collect()


@pytest.mark.parametrize(
    "initial, message",
    [
        (lambda n: {"h": np.zeros((n + 1, 2))}, r"`initial_state\(2\)` for envs 0\.\.1: the state\['h'\] has shape \(3, 2\); expected the env dimension first: \(2, \.\.\.\)"),
        (lambda n: {"h": "zeros"}, r"the state\['h'\] is str 'zeros'; a state is a dict, tuple or list of NumPy arrays or PyTorch tensors"),
        (lambda n: {}, r"holds no array or tensor"),
        (lambda n: np.array(["a"] * n), r"has dtype <U1; a state holds numbers"),
    ],
    ids=["leading dimension", "a string", "empty", "strings"],
)
def test_a_bad_initial_state_is_refused(initial, message):
    policy = RecurrentPolicy(lambda observations, state, starts: (np.zeros(len(observations), np.int64), state), initial)
    with ParallelRolloutCollector([cartpole_with_short_episodes] * 2, policy, "sync", horizon=4) as collector:
        with pytest.raises(ActionError, match=message):
            collector.collect()


def test_a_bad_state_in_a_rollout_worker_names_that_worker_s_envs():
    policy = _policy_returning(lambda state: {"h": state["h"][:1]})
    fns = [cartpole_with_short_episodes] * NUM_ENVS
    with ParallelRolloutCollector(fns, policy, "async", horizon=4, num_workers=2, policy_placement="workers") as collector:
        with pytest.raises(ActionError, match=r"envs (0\.\.1|2\.\.3) at row 0: the state\['h'\] has shape \(1, 3\); expected \(2, 3\)"):
            collector.collect()


def test_the_wrapper_and_store_states_check_their_arguments():
    with pytest.raises(TypeError, match="`step` must be callable"):
        RecurrentPolicy(None, lambda n: None)
    with pytest.raises(TypeError, match="`initial_state` must be callable"):
        RecurrentPolicy(lambda o, s, e: None, np.zeros(3))
    with pytest.raises(ConfigurationError, match="`store_states` must be True or False; got 1"):
        ParallelRolloutCollector([cartpole_with_short_episodes], None, "sync", store_states=1)


def test_a_state_returned_with_its_graph_is_carried_without_it():
    """A state computed with gradients on would chain every row's graph to the next one."""
    weight = torch.ones(1, requires_grad=True)
    seen = []

    def step(observations, state, episode_starts):
        seen.append(state.requires_grad)
        return np.zeros(len(observations), dtype=np.int64), state * weight

    policy = RecurrentPolicy(step, lambda n: torch.zeros(n, 2))
    with ParallelRolloutCollector([cartpole_with_short_episodes] * 2, policy, "sync", horizon=5) as collector:
        batch = collector.collect()
    assert seen == [False] * 5
    assert isinstance(batch.final_states, np.ndarray) and [path for path, _ in state_leaves(batch.initial_state)] == [""]


# -- lost workers (max_restarts) ------------------------------------------------------------


RESTARTABLE = ["async per-step", "async pipelined", "rollout workers"]


def restartable_collector(mode: str, fns, policy) -> ParallelRolloutCollector:
    options = {**BACKENDS[mode]}
    backend = options.pop("backend")
    return ParallelRolloutCollector(
        fns, policy, backend, horizon=HORIZON, seed=3, max_restarts=2, store_states=True, **options
    )


@pytest.mark.parametrize("mode", RESTARTABLE)
def test_a_worker_killed_between_collects_restarts_its_envs_from_the_initial_state(mode, no_leaks):
    from tests.test_restart_moments import kill, pool_of

    policy = GRUPolicy()
    with restartable_collector(mode, [cartpole_with_short_episodes] * NUM_ENVS, policy) as collector:
        batches = [collector.collect()]
        kill(pool_of(collector).workers[1])
        batches += [collector.collect(), collector.collect()]
    np.testing.assert_array_equal(batches[1].lost_env_indices, [2, 3])
    assert batches[1].episode_starts[0, 2:].all()
    np.testing.assert_array_equal(batches[1].initial_state["h"][2:], np.zeros((2, 8), np.float32))
    assert_matches_reference(batches, policy, cartpole_with_short_episodes)


@pytest.mark.parametrize("mode", ["async per-step", "async pipelined"])
def test_a_worker_lost_at_a_step_keeps_the_state_record_of_the_rows_before(mode, monkeypatch, no_leaks):
    from parallel_rollouts.processes import protocol
    from tests.test_restart_moments import KillAt

    trigger = KillAt(monkeypatch, protocol.STEP, "one", 5)
    policy = GRUPolicy()
    with restartable_collector(mode, [cartpole_with_short_episodes] * NUM_ENVS, policy) as collector:
        batches = [collector.collect()]
        trigger.arm()
        batches += [collector.collect(), collector.collect()]
    assert trigger.fired
    lost = batches[1]
    assert lost.valid[:5, 2:].all() and not lost.valid[5:, 2:].any()
    assert not lost.episode_starts[5:, 2:].any() and not lost.bootstrap_states["h"][2:].any()
    assert batches[2].episode_starts[0, 2:].all()
    assert_matches_reference(batches, policy, cartpole_with_short_episodes)


def test_a_rollout_worker_lost_part_way_leaves_initial_state_and_episode_starts_to_recompute_from(tmp_path, no_leaks):
    """The worker's state went with it; its valid rows keep what a learner recomputes from."""
    from functools import partial

    fns = [cartpole_with_short_episodes] * NUM_ENVS
    # Env 3 kills its process at its 35th step: row 10 of the second collect.
    fns[3] = partial(short_crashing_cartpole, 35, str(tmp_path / "crashed"))
    policy = GRUPolicy()
    with restartable_collector("rollout workers", fns, policy) as collector:
        batches = [collector.collect() for _ in range(3)]
    lost = batches[1]
    np.testing.assert_array_equal(lost.lost_env_indices, [2, 3])
    assert lost.valid[:5, 2:].all() and not lost.valid[-1, 2:].any()
    assert lost.episode_starts[1:, 2:][lost.valid[1:, 2:]].any(), "the rebuilt episode starts show no reset to test"
    assert_matches_reference(batches, policy, cartpole_with_short_episodes, states_kept_when_lost=False)


def test_ray_actors_record_their_slices_state_and_the_merge_gives_the_sync_batch_s_fields():
    """The Ray backend's actor code, run here without Ray: two slices' records, merged as the Ray
    runner merges them, equal the state fields of the same collects on ``sync``."""
    from parallel_rollouts.config.spec import RolloutSpec
    from parallel_rollouts.data.recurrent_record import RecurrentRecord
    from parallel_rollouts.groups import resolve_layout
    from parallel_rollouts.policy.shipping import PolicyShipper
    from parallel_rollouts.processes.slicing import pickle_env_fns
    from parallel_rollouts.runners.ray import SliceActor

    fns = [cartpole_with_short_episodes] * NUM_ENVS
    policy = GRUPolicy()
    spec = RolloutSpec(tuple(fns), 3, HORIZON, store_states=True)
    shipper = PolicyShipper(policy, "the test's actors")
    pickled = pickle_env_fns(fns, "the test's actors")
    actors = [SliceActor(pickled[start:stop], start, 0) for start, stop in ((0, 2), (2, 4))]
    layout = resolve_layout(spec, actors[0].spaces() + actors[1].spaces())
    snapshot = shipper.snapshot()
    for columns, actor in zip(((0, 2), (2, 4)), actors):
        actor.start(layout, snapshot, columns, f"the test's actor for envs {columns}")
    reference = collect(GRUPolicy(), "sync", store_states=True)
    try:
        for batch in reference:
            parts = [(start, start + 2, actor.collect(None)[-1]) for start, actor in zip((0, 2), actors)]
            merged = RecurrentRecord.merge(parts, NUM_ENVS).batch_fields()
            for name, value in merged.items():
                expected = getattr(batch, name)
                for (path, got), (_, want) in zip(state_leaves(value), state_leaves(expected)):
                    np.testing.assert_array_equal(got, want, err_msg=f"{name}{path}")
    finally:
        for actor in actors:
            actor.close()


def test_same_step_autoreset_resets_the_state_at_the_row_after_each_end():
    """A same-step vector env returns the new episode's first observation with the end: the
    state is reset at the next row, exactly where single envs reset it."""
    import gymnasium as gym

    def vector_env():
        return gym.vector.SyncVectorEnv(
            [cartpole_with_short_episodes] * 3, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
        )

    policy = counting_policy()
    with ParallelRolloutCollector([vector_env], policy, "sync", horizon=30, seed=1, store_states=True) as collector:
        batches = [collector.collect(), collector.collect()]
    for before, batch in zip([None, batches[0]], batches):
        assert batch.valid.all() and batch.dones.any()
        np.testing.assert_array_equal(batch.episode_starts[1:], batch.dones[:-1])
        if before is not None:
            np.testing.assert_array_equal(batch.episode_starts[0], before.dones[-1])
        # The count given at each row is the rows seen since the episode's first row.
        count = batch.initial_state["count"].copy()
        for t in range(batch.horizon):
            count = np.where(batch.episode_starts[t], 0, count)
            np.testing.assert_array_equal(batch.states["count"][t], count)
            count = count + 1


def test_a_pipelined_rollout_dropped_with_one_half_a_row_ahead_keeps_each_half_s_state():
    """The policy raises on the second half's row 5: the first half has stepped row 5 already,
    so its envs stand at row 6 and the second half's at row 5; the next batch starts each
    half from the state of its own row."""
    policy = GRUPolicy()
    calls = {"count": 0, "fail_at": None}

    def failing(observations, state, episode_starts):
        calls["count"] += 1
        if calls["count"] == calls["fail_at"]:
            raise RuntimeError("the policy failed")
        return policy(observations, state, episode_starts)

    fns = [cartpole_with_short_episodes] * NUM_ENVS
    options = dict(horizon=HORIZON, seed=3, num_workers=2, pipelined=True, store_states=True)
    with ParallelRolloutCollector(fns, RecurrentPolicy(failing, policy.initial_state), "async", **options) as collector:
        collector.collect()
        # Two calls per row (first half, second half): the second half's call of row 5.
        calls["fail_at"] = calls["count"] + 2 * 5 + 2
        with pytest.raises(RuntimeError, match="the policy failed"):
            collector.collect()
        after = collector.collect()
    with ParallelRolloutCollector(fns, GRUPolicy(), "sync", horizon=HORIZON, seed=3, store_states=True) as collector:
        straight = [collector.collect() for _ in range(2)][1]
    for envs, row in ((slice(0, 2), 6), (slice(2, 4), 5)):
        np.testing.assert_array_equal(after.observations[0, envs], straight.observations[row, envs])
        np.testing.assert_array_equal(after.initial_state["h"][envs], straight.states["h"][row, envs])
        np.testing.assert_array_equal(after.episode_starts[0, envs], straight.episode_starts[row, envs])


def test_an_interrupt_between_two_rows_leaves_the_state_at_the_row_the_envs_stand_at(monkeypatch):
    """A KeyboardInterrupt after row 6's step, as row 7's observations are read for the policy,
    drops the rollout; the next batch starts at the envs' row 7 with that row's state, as a
    straight run has it."""
    from parallel_rollouts.data.batch_memory import BatchMemory

    original_rows = BatchMemory.policy_rows
    armed = {"on": False}

    def policy_rows(self, t, *args):
        if armed["on"] and t == 7:
            armed["on"] = False
            raise KeyboardInterrupt
        return original_rows(self, t, *args)

    monkeypatch.setattr(BatchMemory, "policy_rows", policy_rows)
    fns = [cartpole_with_short_episodes] * NUM_ENVS
    with ParallelRolloutCollector(fns, GRUPolicy(), "sync", horizon=HORIZON, seed=3, store_states=True) as collector:
        collector.collect()
        armed["on"] = True
        with pytest.raises(KeyboardInterrupt):
            collector.collect()
        after = collector.collect()
    with ParallelRolloutCollector(fns, GRUPolicy(), "sync", horizon=HORIZON, seed=3, store_states=True) as collector:
        straight = [collector.collect() for _ in range(2)][1]
    np.testing.assert_array_equal(after.observations[0], straight.observations[7])
    np.testing.assert_array_equal(after.initial_state["h"], straight.states["h"][7])
    np.testing.assert_array_equal(after.episode_starts[0], straight.episode_starts[7])


def test_an_initial_state_whose_dtype_changes_between_collects_is_refused():
    dtypes = iter([np.float32, np.float64])

    def initial(num_envs):
        return {"h": np.zeros((num_envs, 3), dtype=next(dtypes))}

    policy = RecurrentPolicy(lambda observations, state, starts: (np.zeros(len(observations), np.int64), state), initial)
    with ParallelRolloutCollector([cartpole_with_short_episodes] * 2, policy, "sync", horizon=4) as collector:
        collector.collect()
        with pytest.raises(ActionError, match=r"`initial_state\(2\)` for envs 0\.\.1 changed its nesting, leaf shapes or dtypes "
                           r"from \[state\['h'\] array \(n, 3\) float32\] to \[state\['h'\] array \(n, 3\) float64\]"):
            collector.collect()


@pytest.mark.parametrize("mode", ["async per-step", "async pipelined"])
def test_a_worker_replaced_at_the_start_and_lost_again_at_the_finish_restarts_its_envs_both_times(mode, monkeypatch, no_leaks):
    from parallel_rollouts.processes import protocol
    from tests.test_restart_moments import KillAt, kill, pool_of

    trigger = KillAt(monkeypatch, protocol.FINISH, "one")
    policy = GRUPolicy()
    with restartable_collector(mode, [cartpole_with_short_episodes] * NUM_ENVS, policy) as collector:
        batches = [collector.collect()]
        kill(pool_of(collector).workers[1])
        trigger.arm()
        batches += [collector.collect(), collector.collect()]
    assert trigger.fired
    for batch in batches[1:]:
        assert batch.valid.all() and batch.episode_starts[0, 2:].all()
        np.testing.assert_array_equal(batch.initial_state["h"][2:], np.zeros((2, 8), np.float32))
    assert_matches_reference(batches, policy, cartpole_with_short_episodes)


def test_a_recurrent_gru_policy_agrees_across_backends_and_cores():
    """The state fields too (``initial_state``, ``episode_starts``, ``final_states``,
    ``bootstrap_states``, ``states``), across autoresets and collects; the process modes are
    compared above."""
    import torch

    from tests.recurrent_policies import GRUPolicy
    from tests.recurrent_reference import cartpole_with_short_episodes

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        batches = {
            (backend, core): collect_batches(
                backend, [cartpole_with_short_episodes] * 3, GRUPolicy(), horizon=20, seed=4, core=core, store_states=True
            )
            for backend in IN_PROCESS
            for core in ("compiled", "python")
        }
    finally:
        torch.set_num_threads(threads)
    reference = batches[("serial", "python")]
    assert all(batch.final_observation_mask.any() for batch in reference)
    assert reference[1].states["h"].shape == (20, 3, 8)
    for candidate in batches.values():
        for first, second in zip(reference, candidate):
            assert_batches_identical(first, second)
