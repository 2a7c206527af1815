"""The worker options of a collector or vector env, parsed and checked once at its front door.

``num_workers``, ``context``, ``step_timeout``, ``max_restarts`` and ``main_process_envs`` reach
every runner, stepper and pool below the front doors as one :class:`WorkerOptions`, passed by
keyword; nothing below checks them again.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigurationError
from .backends import backends_taking

__all__ = ["WorkerOptions"]


@dataclass(frozen=True)
class WorkerOptions:
    """How the envs' worker processes (or Ray actors) are run; build it with :meth:`parse`."""

    #: Worker processes / actors, each owning a contiguous slice of the env factories
    #: (``None``: ``min(usable cores, num_envs)``, resolved when the workers start).
    num_workers: int | None = None
    #: A multiprocessing start method name or context (``None``: ``"spawn"``).
    context: Any = None
    #: Seconds one step may take before :class:`StepTimeoutError` (``None``: no bound).
    step_timeout: float | None = None
    #: How many lost workers may be replaced over the owner's life.
    max_restarts: int = 0
    #: How many env factories (the first ones) the main process steps itself on the per-step
    #: paths (``None``: chosen from the usable cores; ``0``: every env in a worker).
    main_process_envs: int | None = None

    @classmethod
    def parse(
        cls,
        *,
        num_factories: int,
        backend: str,
        backends: Sequence[str] | None = None,
        num_workers: Any = None,
        context: Any = None,
        step_timeout: Any = None,
        max_restarts: Any = None,
        main_process_envs: Any = None,
        share_refused: str | None = None,
        share_by_default: bool = True,
    ) -> WorkerOptions:
        """Check each option once, naming it, what it must be and what it got.

        ``num_factories``: the env factories the workers share; ``backend``: the one chosen,
        out of ``backends`` (the front door's own; by default every backend): an option given
        for a backend it does not apply to is refused. ``None`` means the default everywhere.

        The main process's share of the envs is decided here too, for every mode: with
        ``share_refused`` (why the mode chosen cannot have one: rollout workers, pipelined) a
        ``main_process_envs`` above 0 is refused with that reason; with ``share_by_default``
        false (ready-first stepping) there is none unless ``main_process_envs`` asks for it.
        Either way the options returned say 0, and nothing below decides it again.
        """
        given = {
            "num_workers": num_workers, "context": context, "step_timeout": step_timeout, "max_restarts": max_restarts,
            "main_process_envs": main_process_envs,
        }
        for name, value in given.items():
            # The backends it means something to (the table's); given for any other, it is refused.
            applies_to = [option_backend for option_backend in backends_taking(name) if backends is None or option_backend in backends]
            if value is not None and backend not in applies_to:
                raise ConfigurationError(
                    f"`{name}` applies to backend {' or '.join(map(repr, applies_to))} only; got backend={backend!r}."
                )
        if num_workers is not None and (
            isinstance(num_workers, bool) or not isinstance(num_workers, int) or not 1 <= num_workers <= num_factories
        ):
            raise ConfigurationError(
                f"`num_workers` must be an int between 1 and the number of envs ({num_factories}); got {num_workers!r}."
            )
        _multiprocessing_context(context)
        if step_timeout is not None and (
            isinstance(step_timeout, bool) or not isinstance(step_timeout, (int, float)) or not step_timeout > 0
        ):
            raise ConfigurationError(f"`step_timeout` must be a positive number of seconds or None; got {step_timeout!r}.")
        if max_restarts is not None and (isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < 0):
            raise ConfigurationError(f"`max_restarts` must be an int >= 0 or None; got {max_restarts!r}.")
        if main_process_envs is not None and (
            isinstance(main_process_envs, bool) or not isinstance(main_process_envs, int)
            or not 0 <= main_process_envs < num_factories
        ):
            raise ConfigurationError(
                f"`main_process_envs` must be an int from 0 to num_envs - 1 ({num_factories - 1}): at least one env "
                f"steps in a worker (backend='sync' steps them all in this process); got {main_process_envs!r}."
            )
        if share_refused is not None and main_process_envs:
            raise ConfigurationError(f"{share_refused}; drop `main_process_envs` (got {main_process_envs!r}).")
        if share_refused is not None or (main_process_envs is None and not share_by_default):
            main_process_envs = 0
        return cls(num_workers, context, step_timeout, max_restarts or 0, main_process_envs)

    def multiprocessing_context(self) -> Any:
        """The multiprocessing context to start workers with (``"spawn"`` unless ``context`` says)."""
        return _multiprocessing_context(self.context)


def _multiprocessing_context(context: Any) -> Any:
    if context is None:
        return multiprocessing.get_context("spawn")
    if isinstance(context, str):
        try:
            return multiprocessing.get_context(context)
        except ValueError as error:
            raise ConfigurationError(
                f"`context` must be a multiprocessing start method {multiprocessing.get_all_start_methods()!r} "
                f"or a context; got {context!r} (multiprocessing: {error})."
            ) from error
    if hasattr(context, "Process") and hasattr(context, "Pipe"):
        return context
    raise ConfigurationError(f"`context` must be a start method name or a multiprocessing context; got {context!r}.")
