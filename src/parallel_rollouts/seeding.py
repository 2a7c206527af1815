"""The documented old path of :mod:`parallel_rollouts.config.seeding`.

Importing this path gives the module at its new one, the same object (the import system reads
``sys.modules`` back after running this file), so code written against the old path keeps working
without a hook on every import of the process.
"""

import sys

from .config import seeding

sys.modules[__name__] = seeding
