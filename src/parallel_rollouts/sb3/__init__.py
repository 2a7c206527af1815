"""The Stable-Baselines3 front door: ``from parallel_rollouts.sb3 import ParallelVecEnv``.

Needs the ``[sb3]`` extra; ``import parallel_rollouts`` alone never imports this package.
The adapter is in :mod:`.adapter`, the translation of SB3's actions in :mod:`.actions` and
what a worker does next to each env in :mod:`.env_side`. ``ParallelVecEnv`` is imported on
first use: worker processes import :mod:`.env_side`, which must not load Stable-Baselines3
(nor PyTorch) there.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # for type checkers and the API reference, which document it under this path
    from .adapter import ParallelVecEnv

__all__ = ["ParallelVecEnv"]


def __getattr__(name: str):
    if name == "ParallelVecEnv":
        from .adapter import ParallelVecEnv

        return ParallelVecEnv
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
