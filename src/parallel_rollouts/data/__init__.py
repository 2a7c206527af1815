"""Data: spaces -> storage layout, the rollout storage, the batch, typed actions, batch memory."""
