"""The policy side: outputs, the per-row loop, generators, shipping to workers, slice rollouts and merges."""
