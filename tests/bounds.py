"""Bounds for calls that must not hang, that a loaded machine cannot trip."""

from __future__ import annotations

import threading


def assert_returns(function, within: float = 30.0) -> None:
    """Call ``function`` in a thread; fail if it has not returned within ``within`` seconds.

    For calls that must not hang: the bound is far above their design time, so load
    cannot trip it, while a hang always does.
    """
    outcome = []
    thread = threading.Thread(target=lambda: outcome.append(_capture(function)), daemon=True)
    thread.start()
    thread.join(within)
    assert not thread.is_alive(), f"{function} did not return within {within} s"
    if outcome[0] is not None:
        raise outcome[0]


def _capture(function):
    try:
        function()
    except BaseException as error:
        return error
    return None
