"""Whole-rollout runners: one ``collect()`` each, wherever the policy runs.

- :mod:`.local`: the policy runs in this process and drives a per-step stepper row by row
  (``serial``, ``sync``, ``async``);
- :mod:`.pipelined`: the policy runs in this process on one half of the envs while
  worker processes step the other half (``async`` with ``pipelined=True``);
- :mod:`.rollout_workers`: each worker process runs whole rollouts of its slice with its
  own copy of the policy (``async`` with ``policy_placement="workers"``);
- :mod:`.ray`: Ray actors run whole rollouts of their slices (``ray``).

The last two run the same code for one slice (:mod:`~parallel_rollouts.policy.slice_rollout`)
and share one request/reply launch (:class:`~.base.RemoteRolloutRunner`); :mod:`.background`
runs a per-step runner's next batch on a thread under ``max_policy_lag=1``, and every runner
numbers the policy versions of the batches it hands out (:meth:`~.base.RolloutRunner.next_rollout`).
Every runner gets its storage from :class:`~parallel_rollouts.data.batch_memory.BatchMemory`.
:mod:`.options` parses a collector's options once; :mod:`.build` builds the runner they choose.
"""
