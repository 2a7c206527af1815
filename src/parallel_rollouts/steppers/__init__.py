"""Per-step env steppers: "step every env for row ``t``" of storage a runner provides.

A stepper knows nothing of the policy. ``serial`` and ``sync`` step the envs in this
process (:mod:`.in_process`); ``async`` steps them in worker processes
(:mod:`.processes`). Runners (:mod:`parallel_rollouts.runners`) drive them through
:class:`~.base.RolloutStepper`; :class:`~parallel_rollouts.ParallelVectorEnv` drives its
envs, in this process or in workers, through :class:`~.base.VectorStepper`, with
ready-first stepping in :mod:`.ready_first`.
"""
