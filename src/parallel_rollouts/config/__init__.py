"""Configuration: the table of backends, worker options, the rollout spec, its frozen layout, seeding."""
