"""The per-step core: the row code written once (``rows.py``, compiled as ``_core`` or run as it is), its kernels, their argument checks, the selector."""
