"""Worker processes writing into shared memory: the pool, its protocol, the segment.

Shared by the ``async`` backend's per-step stepper (:mod:`parallel_rollouts.steppers.processes`)
and its rollout workers (:mod:`parallel_rollouts.runners.rollout_workers`): one pool, one
worker program, one protocol, with or without a policy in the workers.
"""
