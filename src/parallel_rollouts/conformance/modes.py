"""The advisor's two modes: rounds and seconds per option per round (the command line's help reads them too)."""

from __future__ import annotations

__all__ = ["QUICK", "THOROUGH"]

#: About a minute: the default.
QUICK = {"rounds": 5, "trial_seconds": 1.5, "warmup_collects": 1}
#: ``thorough=True`` (``--thorough``): longer trials, more rounds, more options.
THOROUGH = {"rounds": 7, "trial_seconds": 4.0, "warmup_collects": 2}
