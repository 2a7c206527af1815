"""Requests to envs other than a step or a reset (``call``, ``get_attr``, ``set_attr``).

What an env raises while answering one is a mistake in the request (a missing attribute, a
wrong argument), not a failure of the env's episode: every env's episode is where it was (a
``set_attr`` may have set the envs answered before). So the group hands the exception back as a
:class:`RaisedByEnv` instead of raising it, in a worker process as in this one, and the front
door raises it as the env's own exception without marking itself broken (as ``SyncVectorEnv``
raises ``AttributeError`` and stays usable). An answer that cannot travel back from a worker
(it does not pickle) is such a mistake too.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Any, Callable, NoReturn, Sequence

__all__ = ["ANSWERED_REQUESTS", "RaisedByEnv", "answer_each", "raise_any_refusal"]

#: The requests whose failures come back as a :class:`RaisedByEnv`.
ANSWERED_REQUESTS = ("call", "set_attr")


@dataclass(frozen=True)
class RaisedByEnv:
    """The exception env ``env_index`` raised answering ``request`` (e.g. ``"get_attr('foo')"``)."""

    env_index: int
    request: str
    error: BaseException

    def __reduce__(self):
        # The env's own exception when it pickles (an AttributeError does); otherwise its type
        # and message, so that an unpicklable exception is still reported, never a worker crash.
        try:
            error = pickle.loads(pickle.dumps(self.error))
        except Exception:
            error = RuntimeError(f"{type(self.error).__name__}: {self.error}")
        return type(self), (self.env_index, self.request, error)

    def raise_again(self) -> NoReturn:
        error = self.error
        error.add_note(
            f"(raised by env {self.env_index} answering {self.request}; no episode was touched and the vector env "
            "is still usable)"
        )
        raise error


def answer_each(items: Sequence[Any], env_indices: Sequence[int], request: str, answer: Callable[[Any], Any]) -> list | RaisedByEnv:
    """``answer(item)`` for each env's item in turn (the env, or the env and its argument); the
    first exception, as a :class:`RaisedByEnv` naming ``env_indices[i]``, ends it."""
    results = []
    for item, env_index in zip(items, env_indices):
        try:
            results.append(answer(item))
        except Exception as error:
            return RaisedByEnv(env_index, request, error)
    return results


def raise_any_refusal(parts: Sequence[Any]) -> None:
    """Raise the first :class:`RaisedByEnv` among the groups' answers, if any."""
    for part in parts:
        if isinstance(part, RaisedByEnv):
            part.raise_again()
