"""How the results of slices of the envs, run apart, become one rollout's fields.

Rollout workers, pipelined parts and Ray actors each run the policy on a slice
of the envs. Whether the batch has ``values`` and ``log_probs`` is decided by
all slices together: every slice returned them, or none did. Anything else is
an :class:`~parallel_rollouts.errors.ActionError`, never a merge that would
leave the fields of the slices that returned nothing unwritten.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import ActionError

__all__ = ["merged_output_fields"]


def merged_output_fields(fields: Sequence[tuple[bool, bool]], slices: Sequence[tuple[int, int]]) -> tuple[bool, bool]:
    """``(has_values, has_log_probs)`` of the whole batch from each slice's own pair.

    ``slices[k]`` is the ``(start, stop)`` env range of ``fields[k]``, named in the error.
    """
    for position, name in enumerate(("values", "log_probs")):
        returned = [bool(pair[position]) for pair in fields]
        if any(returned) and not all(returned):
            given = [f"envs {start}..{stop - 1}" for (start, stop), has in zip(slices, returned) if has]
            missing = [f"envs {start}..{stop - 1}" for (start, stop), has in zip(slices, returned) if not has]
            raise ActionError(
                f"the policy returned `{name}` for {', '.join(given)} but not for {', '.join(missing)}; "
                "return it from every call or never."
            )
    return (bool(fields[0][0]), bool(fields[0][1])) if fields else (False, False)
