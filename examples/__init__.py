"""Runnable examples built on Parallel Rollouts."""
