"""Feedback from the headsets that reaches the edge server late.

A headset measures its throughput, frame latencies, late and dropped frames and frozen time, but
the controller at the edge only learns them from the client's feedback report (in the manner of
RTCP receiver reports or transport-wide congestion feedback), which is sent once per interval
and arrives after a delay. `ReportDelayLine` holds each user's reports in flight: what is
delivered at a step is what was measured `delay_steps` steps earlier.
"""

from __future__ import annotations

import numpy as np

__all__ = ["ReportDelayLine"]


class ReportDelayLine:
    """A fixed delay of `delay_steps` (>= 1) steps for `[num_users, width]` reports.

    Until a slot's first report has travelled the whole line, it delivers zeros for that slot
    (a client that has not reported yet), as the observation of a user without measurements
    does.
    """

    def __init__(self, delay_steps: int, num_users: int, width: int) -> None:
        if delay_steps < 1:
            raise ValueError(f"`delay_steps` must be >= 1 for a delay line, got {delay_steps!r}.")
        self._in_flight = np.zeros((delay_steps, num_users, width))
        # The ring's oldest entry: the one delivered next.
        self._oldest = 0

    def deliver(self, measured: np.ndarray) -> np.ndarray:
        """Send this step's `measured` reports; return the ones that arrive now."""
        arriving = self._in_flight[self._oldest].copy()
        self._in_flight[self._oldest] = measured
        self._oldest = (self._oldest + 1) % self._in_flight.shape[0]
        return arriving

    def forget(self, slots: np.ndarray) -> None:
        """Drop the reports in flight of `slots` (a bool mask): their user left, a new one arrives."""
        self._in_flight[:, slots] = 0.0
