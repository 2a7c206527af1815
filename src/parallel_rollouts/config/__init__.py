"""Configuration: the rollout spec, its frozen layout, seeding."""
