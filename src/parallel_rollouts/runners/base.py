"""What the collector asks of a runner and what one rollout hands back (its state: :mod:`.lifecycle`)."""

from __future__ import annotations

import abc
import threading
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ..config.layout import RolloutLayout
from ..data.recurrent_record import RecurrentRecord
from ..data.storage import CompletedEpisodes, RolloutStorage
from ..policy.snapshot import rollout_copy
from ..policy.cancel import cancellable
from ..processes.forwarded_warnings import raise_again
from .background import BackgroundRollout
from .global_generator import GlobalGeneratorWatch
from .lifecycle import Lifecycle, RunnerState

__all__ = ["RemoteRolloutRunner", "ReplacedWorkers", "RolloutResult", "RolloutRunner", "RunnerState", "stepped_result"]


@dataclass
class RolloutResult:
    """One rollout, as a runner hands it to the collector."""

    storage: RolloutStorage
    episodes: CompletedEpisodes
    has_values: bool
    has_log_probs: bool
    #: Envs whose rows in this rollout are not all valid (their worker died and was
    #: replaced); empty unless a runner restarts workers.
    lost_env_indices: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    #: ``[N]`` int64: the first row of each env that is lost (``horizon`` where none is;
    #: ``-1``: its first observation too). ``None``: no row is lost.
    lost_from_rows: np.ndarray | None = None
    #: ``[N]`` float64: seconds this process waited for the worker hosting each env
    #: (``None`` for runners whose envs run in this process).
    env_wait_seconds: np.ndarray | None = None
    #: A recurrent policy's state record of every env (``None``: the policy is not recurrent).
    recurrent: RecurrentRecord | None = None


class RolloutRunner(Lifecycle, abc.ABC):
    """Runs one whole rollout per ``collect()``, and owns its own :class:`RunnerState`.

    A failure that leaves the envs in an unknown state moves the runner to ``BROKEN``
    (:meth:`_break`); it then refuses to collect again. A failure that does not keeps the
    runner ``READY``: the rollout is dropped and every env continues from where it stands.
    Which failures break is the runner's to say: the policy raising, or its output being
    rejected, keeps the in-process, pipelined and rollout-worker runners ``READY``, and
    breaks the Ray runner (its actors step on independently), except an ``ActionError``
    found when merging the slices. Callers ask
    (:attr:`state`, :attr:`failure`, :meth:`check_usable`, which raises
    :class:`CollectorClosedError`); they never write.

    ``layout`` is the rollout layout resolved when the runner's envs were made.
    """

    layout: RolloutLayout
    #: The caller's policy (``None``: random actions), which a background rollout runs a copy of.
    live_policy: Any = None
    #: Seconds ``close()`` waits for a background rollout to stop between two rows.
    cancel_timeout: float = 10.0
    #: Whether :meth:`launch` runs the rollout, and the policy, on a thread of this process.
    launches_on_thread: ClassVar[bool] = True
    _background: BackgroundRollout | None = None
    #: Set by ``close()`` while a background rollout runs: it stops at its next row.
    _cancel: threading.Event | None = None
    #: ``0``: each rollout runs when the caller asks for it; ``1``: the next one runs in the
    #: background from the moment the last one is handed out (set once, when the runner is built).
    max_policy_lag: int = 0
    #: Rollouts handed out so far: the policy version of a snapshot taken now.
    _handed_out: int = 0
    #: The policy version of the rollout in flight (``max_policy_lag=1``; ``None``: none is).
    _in_flight_version: int | None = None
    #: What starting the next rollout raised at the last hand-out: reported at the next ask.
    _launch_failure: BaseException | None = None
    #: ``max_policy_lag=1``: whether the policy draws from PyTorch's global generator on the thread.
    _generator_watch: GlobalGeneratorWatch | None = None

    def collect(self) -> RolloutResult:
        """One rollout (``READY`` -> ``COLLECTING`` -> ``READY``, or ``BROKEN``)."""
        self.check_usable()
        self._state = RunnerState.COLLECTING
        try:
            return self._collect()
        finally:
            if self._state is RunnerState.COLLECTING:
                self._state = RunnerState.READY

    # -- the caller's rollouts, in turn or one ahead (``max_policy_lag``) ---------------------

    def next_rollout(self) -> tuple[RolloutResult, int]:
        """The caller's next rollout and its policy version (how many rollouts were handed out
        before its policy was taken). With ``max_policy_lag=0`` it runs now; with ``1`` it is the
        one in flight (launched now if none is). Call :meth:`hand_out` once the caller holds it.
        What worker processes warned is raised quietly when it fails (the failure is what counts)."""
        if self.max_policy_lag:
            return self._join_in_flight()
        self.check_usable()
        try:
            return self.collect(), self._handed_out
        except BaseException:
            raise_again(self.take_warnings(), quietly=True)
            raise

    def hand_out(self) -> None:
        """The rollout :meth:`next_rollout` returned is the caller's: it counts, and with
        ``max_policy_lag=1`` the next one starts now, with the policy as the caller hands this one
        out (before it learns from it). A failure to start it is raised at the next ask: the
        rollout in hand is complete and is returned all the same."""
        if self.max_policy_lag:
            self._in_flight_version = self._handed_out  # first: a Ctrl-C after the launch still finds it
            try:
                self.launch()
            except Exception as error:
                self._in_flight_version = None
                self._launch_failure = error
        self._handed_out += 1

    def _join_in_flight(self) -> tuple[RolloutResult, int]:
        if self.state is RunnerState.CLOSED:
            # Closed with a rollout in flight: that rollout went with it.
            self._in_flight_version = self._launch_failure = None
            self.check_usable()
        if self._launch_failure is not None:
            # Starting this rollout failed when the last one was handed out: reported here, where
            # this one would have been returned; the next ask starts afresh.
            failure, self._launch_failure = self._launch_failure, None
            raise failure
        if self._generator_watch is None:
            self._generator_watch = GlobalGeneratorWatch()
        watched = None
        if self._in_flight_version is None:
            self.check_usable()
            self._in_flight_version = self._handed_out  # first: a Ctrl-C after the launch still finds it
            if self.launches_on_thread and self.live_policy is not None:
                # Launched and waited for at once: nothing else in this process draws meanwhile.
                watched = self._generator_watch.before()
            try:
                self.launch()
            except BaseException:
                self._in_flight_version = None
                raise
        try:
            result = self.join()
        except BaseException:
            if not self.in_flight:
                self._in_flight_version = None
            raise_again(self.take_warnings(), quietly=True)  # the failure is what counts
            raise
        version, self._in_flight_version = self._in_flight_version, None
        # The warning names the caller's collect(): two frames above next_rollout.
        self._generator_watch.after(watched, stacklevel=4)
        return result, version

    # -- a rollout in the background (``max_policy_lag=1``) -----------------------------------

    @property
    def in_flight(self) -> bool:
        """Whether a rollout launched by :meth:`launch` has not been joined yet."""
        return self._background is not None

    def launch(self) -> None:
        """Start the next rollout with the policy as it is now and return at once (``READY`` ->
        ``COLLECTING``); :meth:`join` waits for it. Changes made to the policy from now on reach
        the rollout after this one."""
        self.check_usable()
        self._state = RunnerState.COLLECTING
        try:
            self._launch()
        except BaseException:
            if self._state is RunnerState.COLLECTING:
                self._state = RunnerState.READY
            raise

    def join(self) -> RolloutResult:
        """The result of the rollout :meth:`launch` started (``COLLECTING`` -> ``READY``, or
        ``BROKEN``); raises what it raised. Interrupted (Ctrl-C), the rollout stays in flight."""
        try:
            return self._join()
        finally:
            if not self.in_flight and self._state is RunnerState.COLLECTING:
                self._state = RunnerState.READY

    def _launch(self) -> None:
        """By default: :meth:`_collect` on a thread, with a copy of the policy (the caller's
        learner changes the policy itself while the rollout runs; see :mod:`..policy.snapshot`)."""
        if self.live_policy is not None:
            self._use_policy(rollout_copy(self.live_policy))
        self._cancel = threading.Event()
        self._background = BackgroundRollout(self._collect, self._cancel)

    def _join(self) -> RolloutResult:
        background = self._background
        try:
            return background.result()
        finally:
            if background.done:  # else interrupted while waiting: the rollout is still in flight
                self._background = None

    def _use_policy(self, policy: Any) -> None:
        """Run ``policy`` from the next rollout on (a runner that launches on a thread says how)."""
        raise NotImplementedError(f"{type(self).__name__} does not run rollouts in the background")

    def _stop_in_flight(self) -> None:
        """Before closing: ask a background rollout to stop at its next row and wait for it (bounded;
        a rollout stuck in an env's step is left to end when its workers are stopped)."""
        background = self._background
        if background is None:
            return
        if self._cancel is not None:
            self._cancel.set()
        if background.wait(self.cancel_timeout):
            try:
                background.result()
            except BaseException:  # closing: what the dropped rollout raised no longer matters
                pass
        self._background = None

    def _rows(self, policy_rows):
        """``policy_rows`` as a background rollout must call it: refused once ``close()`` asked it to stop."""
        return cancellable(policy_rows, self._cancel)

    def close(self) -> None:
        """Release everything; idempotent. A rollout in flight is stopped first."""
        self._stop_in_flight()
        if self._mark_closed():
            self._close()

    @abc.abstractmethod
    def _collect(self) -> RolloutResult: ...

    @abc.abstractmethod
    def _close(self) -> None: ...

    def take_warnings(self) -> list:
        """Warnings raised in worker processes or actors since the last call
        (:mod:`parallel_rollouts.processes.forwarded_warnings` records)."""
        return []


class RemoteRolloutRunner(RolloutRunner):
    """A runner whose rollouts run elsewhere (rollout workers, Ray actors): a rollout in the
    background needs no thread, it runs between the request :meth:`_send_rollout` makes (with the
    policy snapshot taken then) and the replies :meth:`_receive_rollout` reads."""

    _in_flight: tuple | None = None
    launches_on_thread: ClassVar[bool] = False

    @abc.abstractmethod
    def _send_rollout(self) -> tuple: ...

    @abc.abstractmethod
    def _receive_rollout(self, *request) -> RolloutResult: ...

    def _collect(self) -> RolloutResult:
        return self._receive_rollout(*self._send_rollout())

    def _launch(self) -> None:
        self._in_flight = self._send_rollout()

    def _join(self) -> RolloutResult:
        in_flight, self._in_flight = self._in_flight, None
        return self._receive_rollout(*in_flight)

    @property
    def in_flight(self) -> bool:
        return self._in_flight is not None


def stepped_result(stepper, memory, episodes: CompletedEpisodes, has_values: bool, has_log_probs: bool) -> RolloutResult:
    """The result of a rollout a per-step stepper ran: the batch memory's storage (lost rows
    cleared) with what the stepper knows of losses and waiting."""
    lost_from_rows = stepper.lost_from_rows()
    replaced = stepper.replaced_env_indices()
    result = RolloutResult(
        memory.finish(lost_from_rows), episodes, has_values, has_log_probs,
        lost_from_rows=lost_from_rows, env_wait_seconds=stepper.take_wait_seconds(),
    )
    if replaced is not None:
        result.lost_env_indices = replaced
    return result


class ReplacedWorkers:
    """Which envs had their worker replaced since the last look: they start fresh episodes, so a
    recurrent policy's state must restart with them.

    Read from each worker's incarnation (how many times its slot was refilled) in the stepper's
    pool, so every replacement counts once whenever it happened (found dead at the start of a
    rollout, lost at a step, at the finish, or while a dropped rollout was abandoned; twice in one
    rollout included). A stepper without worker processes replaces nothing.
    """

    def __init__(self, stepper) -> None:
        self._pool = getattr(stepper, "pool", None)
        self._seen = self._incarnations()

    def _incarnations(self) -> dict[int, tuple[int, int, int]]:
        if self._pool is None:
            return {}
        return {worker.index: (worker.incarnation, worker.start, worker.stop) for worker in self._pool.workers}

    def take(self) -> np.ndarray:
        """``np.int64`` indices of the envs whose worker was replaced since the last call."""
        now = self._incarnations()
        envs = [
            env
            for index, (incarnation, start, stop) in now.items()
            if self._seen.get(index, (incarnation,))[0] != incarnation
            for env in range(start, stop)
        ]
        self._seen = now
        return np.array(envs, dtype=np.int64)
