"""A store added the way every store is: this module, and one line in the scheme registry.

``toy://NAME`` opens a :class:`ToyStore`, an in-memory store of its own (a MemoryStore under
another name: what matters here is how it is plugged in, not how it keeps its objects).
"""

from __future__ import annotations

import urllib.parse

from prioritylock._errors import ConfigError
from prioritylock.stores import MemoryStore

__all__ = ["ToyStore", "store_from_url"]


class ToyStore(MemoryStore):
    """Objects in this process's memory, opened by ``toy://NAME``."""


_named: dict[str, ToyStore] = {}


def store_from_url(parts: urllib.parse.SplitResult, options: dict[str, str]) -> ToyStore:
    """``toy://NAME``: the toy store called NAME.

    :raises ConfigError: no name, or any option.
    """
    if not parts.netloc or options:
        raise ConfigError("toy store URL takes a name and nothing else: toy://NAME")
    return _named.setdefault(parts.netloc, ToyStore(parts.netloc))
