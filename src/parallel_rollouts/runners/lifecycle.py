"""One lifecycle for everything that owns envs: its state, the failure that broke it, one message per state.

Runners (behind a collector) and :class:`~parallel_rollouts.ParallelVectorEnv` both move
through :class:`RunnerState`; only the object itself moves its state (as Gymnasium's
``AsyncState``), and :meth:`Lifecycle.check_usable` refuses every call that the state
forbids, with the same sentence for every owner but its name.
"""

from __future__ import annotations

import enum

from ..errors import CollectorClosedError

__all__ = ["Lifecycle", "RunnerState"]


class RunnerState(enum.Enum):
    """Where a runner (or a ParallelVectorEnv) stands; only the object itself moves it."""

    #: Between rollouts (calls): ``collect()`` may be called.
    READY = "ready"
    #: A ``collect()`` is under way (a policy calling ``collect()`` again lands here).
    COLLECTING = "collecting"
    #: A failure left the envs in an unknown state; only ``close()`` is left to do.
    BROKEN = "broken"
    #: ``close()`` was called; every process and segment is released.
    CLOSED = "closed"


class Lifecycle:
    """A :class:`RunnerState` and the failure behind ``BROKEN``, for a class to inherit.

    ``_subject`` names the owner in messages, ``_closed_error`` is what a refused call raises
    and ``_after_close`` says what to do once it is closed.
    """

    _subject = "collector"
    _closed_error: type[CollectorClosedError] = CollectorClosedError
    _after_close = "create a new one to collect again"
    _state: RunnerState = RunnerState.READY
    _failure: BaseException | None = None

    @property
    def state(self) -> RunnerState:
        return self._state

    @property
    def failure(self) -> BaseException | None:
        """The error that broke it (``None`` unless ``BROKEN``)."""
        return self._failure

    @property
    def broken(self) -> bool:
        return self._state is RunnerState.BROKEN

    def check_usable(self) -> None:
        """Raise ``_closed_error``, with the message of the state, unless ``READY``."""
        state = self._state
        if state is RunnerState.READY:
            return
        if state is RunnerState.CLOSED:
            raise self._closed_error(f"this {self._subject} is closed; {self._after_close}.")
        if state is RunnerState.COLLECTING:
            raise self._closed_error(
                f"a `collect()` is already under way on this {self._subject} (was `collect()` called from the "
                "policy?); wait for it to return."
            )
        failure = self._failure
        raise self._closed_error(
            f"this {self._subject} is broken by an earlier failure ({type(failure).__name__}: {failure}); "
            "close it and create a new one."
        ) from failure

    def _break(self, error: BaseException) -> None:
        """The envs are in an unknown state after ``error``: refuse every later call but ``close()``."""
        if self._state is not RunnerState.CLOSED:
            self._failure = error
            self._state = RunnerState.BROKEN

    def _guarded(self, function, *args):
        """Call ``function``; any exception it raises breaks the owner."""
        try:
            return function(*args)
        except BaseException as error:
            self._break(error)
            raise

    def _mark_closed(self) -> bool:
        """Move to ``CLOSED``; whether it was open (the caller then releases what it holds).

        A stored failure is dropped: its traceback holds the frames of the failed call and,
        through them, its storage.
        """
        if self._state is RunnerState.CLOSED:
            return False
        self._state = RunnerState.CLOSED
        self._failure = None
        return True
