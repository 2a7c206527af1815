"""``python -m parallel_rollouts check|advise TARGET``: see :mod:`parallel_rollouts.conformance.cli`."""

import sys

from .conformance.cli import main

if __name__ == "__main__":
    sys.exit(main())
