"""Public names at their public paths: ``prioritylock.ConfigError``, not ``prioritylock._errors``.

The package ``__init__`` modules call :func:`publish` on what they export, so that ``repr`` of a
class, a traceback's last line, pickles and the generated API reference name the path users
import from.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping

__all__ = ["publish"]


def publish(package: str, namespace: Mapping[str, object], names: Iterable[str]) -> None:
    """Set ``__module__`` to ``package`` on each class and function in ``names`` that is defined
    in one of its private modules (``package._name``); other names are left alone."""
    for name in names:
        obj = namespace.get(name)
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue
        home = obj.__module__
        if home.startswith(package + ".") and home[len(package) + 1 :].startswith("_"):
            obj.__module__ = package
