"""``run.py``'s sections, one module each; each has a ``section_NAME(Bench) -> Section``."""
