"""The per-step core: the selector, the compiled extension and its pure-Python twin, their argument checks."""
