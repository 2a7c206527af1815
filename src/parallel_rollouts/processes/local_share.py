"""The main process's own share of the envs, stepped here while the workers step theirs.

On a machine with ``C`` usable cores, ``C - 1`` workers and the main process make ``C``
processes stepping envs; with ``C`` workers the main process would be an extra process
that mostly waits, and every step would wait for the slowest of ``C + 1`` processes
sharing ``C`` cores. The pool sends a request to the workers first and then serves it
for this share in-process (:class:`~parallel_rollouts.processes.worker_main.HostedSlice`:
the same code a worker runs), so the share steps while the workers do.

The share is not isolated: an env that crashes its process takes the main process with
it (as with ``backend="sync"``), and ``step_timeout`` cannot interrupt it. That is why the
pool gives the main process no share by default when ``step_timeout`` or ``max_restarts`` is
set, or when the user chose ``num_workers`` (see :func:`resolve_main_share`); a share given
explicitly with them is taken as asked, unbounded and never restarted.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config.worker_options import WorkerOptions
from ..groups import make_all, spaces_per_env
from ..groups.single_envs import close_each
from . import protocol
from .worker_main import HostedSlice
from .slicing import usable_cores

__all__ = ["LocalShare", "resolve_main_share"]


def resolve_main_share(options: WorkerOptions, num_factories: int) -> int:
    """How many of the env factories (the first ones) the main process steps itself.

    ``options.main_process_envs`` if given (the front door's parse gives 0 for the modes that
    have no share: rollout workers, pipelined, ready-first unless asked). By default: none with
    ``num_workers``, ``step_timeout`` or ``max_restarts`` set (they promise isolation or a chosen
    process count), or on one core; otherwise an equal share of ``min(usable cores, num_envs)``
    shares.
    """
    given = options.main_process_envs
    if given is not None:
        return given
    if options.num_workers is not None or options.step_timeout is not None or options.max_restarts:
        return 0
    shares = min(usable_cores(), num_factories)
    if shares < 2:
        return 0
    # Rounded down: the main process also runs the policy.
    return num_factories // shares


@dataclass(eq=False)
class LocalShare:
    """The main process's envs, in the pool's list of workers as a worker that never dies.

    :meth:`post` keeps a request; :meth:`take_reply` serves it when the pool reads this
    share's reply, after the workers were asked.
    """

    index: int
    start: int
    stop: int
    envs: list
    hosted: object = None
    #: The request posted and not served yet.
    pending: bytes | None = None
    alive: bool = True
    awaiting_reply: bool = False
    phase: str = "worker"
    incarnation: int = 0
    wait_seconds: float = 0.0
    factories: tuple[int, int] = (0, 0)
    #: What making the envs gave: their spaces per env, or the exception a factory raised
    #: (reported with the workers' start-up errors).
    spaces: object = None
    is_local = True

    @classmethod
    def make(cls, env_fns, stop: int) -> LocalShare:
        """The share of factories ``0 .. stop - 1``, made here."""
        try:
            envs = make_all(list(env_fns[:stop]), 0)
        except Exception as error:
            return cls(0, 0, stop, [], factories=(0, stop), spaces=error)
        return cls(0, 0, len(envs), envs, factories=(0, stop), spaces=spaces_per_env(envs))

    def attach(self, order, storage) -> None:
        """Host the envs on their columns of the pool's ``storage`` and reset them."""
        try:
            self.hosted = HostedSlice.build(self.envs, order, storage)
        except BaseException:
            close_each(self.envs)
            self.envs = []
            raise

    def describe(self) -> str:
        envs = f"env {self.start}" if self.stop - self.start == 1 else f"envs {self.start}..{self.stop - 1}"
        return f"the main process's share ({envs})"

    # The host interface of WorkerHandle: a request is kept when posted and served here, in this
    # thread, when the pool asks for its reply.
    replies_at_once = True

    def post(self, request: bytes, step_row: int | None = None, transport=None) -> None:
        self.pending = request

    def take_reply(self, transport=None, deadline: float | None = None) -> tuple[str, bytes]:
        """Serve the request posted last: ``("reply", the reply a worker would have sent)``."""
        message, self.pending = self.pending, None
        command, argument = protocol.REQUEST.unpack_from(message)
        reply = self.hosted.serve(command, argument, message)
        return "reply", protocol.DONE if reply is None else reply

    def close(self) -> bytes | None:
        """Close the envs; a ``FAILED`` reply if some raised while closing, else ``None``."""
        if self.hosted is None:
            close_each(self.envs)
            return None
        hosted, self.hosted = self.hosted, None
        try:
            return hosted.serve(protocol.CLOSE, 0, protocol.REQUEST.pack(protocol.CLOSE, 0))
        finally:
            hosted.segments.release_all()
