"""Backends: one module each; the step semantics they share live in ``stepping``."""
