"""PPO whose collection overlaps its update (``max_policy_lag=1``): ``python -m examples.overlap_ppo.train``."""
