"""Worker processes writing into shared memory: the pool, its protocol, the segments.

The ``async`` backend's per-step stepper (:mod:`parallel_rollouts.steppers.processes`), its
rollout workers (:mod:`parallel_rollouts.runners.rollout_workers`) and an ``"async"``
:class:`~parallel_rollouts.ParallelVectorEnv` run on one pool, one worker program and one
protocol, with or without a policy in the workers. The Ray runner uses the env slicing, the
count of usable cores (:mod:`.slicing`, which the advisor also asks) and the forwarding of
warnings (:mod:`.forwarded_warnings`).
"""
