"""Checks: the conversion rule, action and observation checks, env returns, failure merging."""
