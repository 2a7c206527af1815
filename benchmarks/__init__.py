"""Runnable benchmarks of Parallel Rollouts: throughput, the per-step core, and a soak run.

Entry points (see ``benchmarks/README.md``)::

    python -m benchmarks.run_rollout_benchmark   one backend, or --compare against hand-written loops
    python -m benchmarks.core_microbench         the compiled core against the pure-Python one
    python -m benchmarks.soak                    memory and file descriptors over many collects
"""
